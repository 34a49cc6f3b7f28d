#include "src/agent/upstream_buffer.h"

#include "gtest/gtest.h"

namespace pitstop::agent {
namespace {

v1::CollectiveSummary Summary(uint64_t comm, uint64_t seq, uint64_t kernel_ns) {
  v1::CollectiveSummary s;
  s.set_comm_hash(comm);
  s.set_func(v1::COLL_FUNC_ALL_GATHER);
  s.set_seq_number(seq);
  s.set_bytes(100);
  s.set_kernel_duration_ns(kernel_ns);
  return s;
}

TEST(UpstreamBufferTest, FullBufferFoldsIntoAggregatesWithCounts) {
  UpstreamBuffer buffer(3);
  std::vector<v1::CollectiveSummary> in;
  for (uint64_t i = 0; i < 5; ++i) in.push_back(Summary(7, i, 10 + i));
  buffer.PushSummaries(&in);
  EXPECT_TRUE(in.empty());
  EXPECT_EQ(buffer.counters().queued, 3u);
  EXPECT_EQ(buffer.counters().summaries_aggregated, 2u);
  v1::ConnectRequest out;
  buffer.Drain(2, &out);
  ASSERT_EQ(out.summaries_size(), 2);
  EXPECT_EQ(out.summaries(0).seq_number(), 0u);
  ASSERT_EQ(out.aggregates_size(), 1);
  EXPECT_EQ(out.aggregates(0).ops(), 2u);
  EXPECT_EQ(out.aggregates(0).bytes(), 200u);
  EXPECT_EQ(out.aggregates(0).total_kernel_ns(), 13u + 14u);
  EXPECT_EQ(out.aggregates(0).max_kernel_ns(), 14u);
  EXPECT_EQ(buffer.queued(), 1u);
}

TEST(UpstreamBufferTest, RequeueKeepsOrderAndRespectsCapacity) {
  UpstreamBuffer buffer(3);
  std::vector<v1::CollectiveSummary> in = {Summary(1, 0, 1), Summary(1, 1, 1)};
  std::vector<v1::RankLifecycle> events(2);
  events[0].set_pid(1);
  events[1].set_pid(2);
  buffer.PushSummaries(&in);
  buffer.PushLifecycle(&events);
  v1::ConnectRequest failed;
  buffer.Drain(10, &failed);
  in = {Summary(1, 2, 1), Summary(1, 3, 1)};
  buffer.PushSummaries(&in);  // arrived while the write failed
  buffer.Requeue(&failed);
  v1::ConnectRequest out;
  buffer.Drain(10, &out);
  ASSERT_EQ(out.summaries_size(), 3);  // capacity 3: one folded
  EXPECT_EQ(out.summaries(0).seq_number(), 1u);
  EXPECT_EQ(out.summaries(1).seq_number(), 2u);
  ASSERT_EQ(out.lifecycle_size(), 2);
  EXPECT_EQ(out.lifecycle(0).pid(), 1u);
  EXPECT_EQ(out.lifecycle(1).pid(), 2u);
  EXPECT_EQ(buffer.counters().summaries_aggregated, 1u);
}

TEST(UpstreamBufferTest, AggregateKeysAreBounded) {
  UpstreamBuffer buffer(0);
  std::vector<v1::CollectiveSummary> in;
  for (uint64_t c = 0; c < UpstreamBuffer::kMaxAggregates + 5; ++c) {
    in.push_back(Summary(c + 1, 0, 1));
  }
  buffer.PushSummaries(&in);
  EXPECT_EQ(buffer.counters().summaries_aggregated,
            UpstreamBuffer::kMaxAggregates);
  EXPECT_EQ(buffer.counters().summaries_dropped, 5u);
}

}  // namespace
}  // namespace pitstop::agent
