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

TEST(UpstreamBufferTest, RequeueKeepsInfosCountsEventDropsAndCapsAggregates) {
  UpstreamBuffer buffer(10);
  v1::ConnectRequest failed;
  failed.add_communicators()->set_comm_hash(42);
  for (size_t i = 0; i < 3; ++i) failed.add_lifecycle()->set_pid(1000 + i);
  // Fill the event queue so only part of the failed batch fits.
  std::vector<v1::RankLifecycle> newer(UpstreamBuffer::kMaxEvents - 1);
  buffer.PushLifecycle(&newer);
  for (size_t k = 0; k < UpstreamBuffer::kMaxAggregates; ++k) {
    std::vector<v1::CollectiveSummary> s = {Summary(k, 0, 1)};
    UpstreamBuffer tiny(0);
    tiny.PushSummaries(&s);
    tiny.Drain(0, &failed);  // one aggregate per comm
  }
  auto* extra = failed.add_aggregates();
  extra->set_comm_hash(999'999);
  extra->set_ops(5);
  // The buffer already holds one other key, so the last one does not fit.
  std::vector<v1::CollectiveSummary> own = {Summary(777'777, 0, 1)};
  UpstreamBuffer own_buf(0);
  own_buf.PushSummaries(&own);
  v1::ConnectRequest mine;
  own_buf.Drain(0, &mine);
  buffer.Requeue(&mine);
  buffer.Requeue(&failed);
  EXPECT_EQ(buffer.counters().events_dropped, 2u);
  EXPECT_EQ(buffer.counters().summaries_dropped, 5u + 1u);
  v1::ConnectRequest out;
  buffer.Drain(100, &out);
  ASSERT_EQ(out.communicators_size(), 1);
  EXPECT_EQ(out.communicators(0).comm_hash(), 42u);
  ASSERT_EQ(out.lifecycle_size(), static_cast<int>(UpstreamBuffer::kMaxEvents));
  EXPECT_EQ(out.lifecycle(0).pid(), 1002u);  // the newest of the failed ones
  EXPECT_EQ(out.aggregates_size(),
            static_cast<int>(UpstreamBuffer::kMaxAggregates));
}

}  // namespace
}  // namespace pitstop::agent
