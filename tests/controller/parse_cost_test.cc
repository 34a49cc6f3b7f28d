// Issue #33, F6: the parse cost of an AgentLink batch, estimated from its
// bytes before parsing (src/controller/api/parse_cost.h), bounds what
// parsing takes, lets a busy agent's largest batch through and refuses a
// batch of empty entries.
#include "src/controller/api/parse_cost.h"

#include <iostream>
#include <string>

#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "gtest/gtest.h"
#include "pitstop/v1/agent.pb.h"

namespace pitstop::controller {
namespace {

uint64_t Estimate(const v1::ConnectRequest& b, std::string* wire) {
  *wire = b.SerializeAsString();
  google::protobuf::io::ArrayInputStream in(wire->data(),
                                            static_cast<int>(wire->size()));
  absl::StatusOr<uint64_t> cost =
      ParsedBytes(v1::ConnectRequest::descriptor(), &in);
  EXPECT_TRUE(cost.ok()) << cost.status();
  return cost.ok() ? *cost : 0;
}

// What parsing `wire` takes (the message's own count of its memory).
uint64_t Parsed(const std::string& wire) {
  v1::ConnectRequest parsed;
  EXPECT_TRUE(parsed.ParseFromString(wire));
  return parsed.SpaceUsedLong();
}

// A busy agent's largest batch: 8192 summaries (its per-message cap) of
// 64 ranks, 32 connections each, progress of 64 ranks in 8 communicators.
v1::ConnectRequest BusyBatch() {
  v1::ConnectRequest b;
  for (int i = 0; i < 8192; ++i) {
    v1::CollectiveSummary* s = b.add_summaries();
    s->set_comm_hash(0xC0FFEE00 + i % 8);
    s->set_rank(i % 64);
    s->set_global_rank(i % 64);
    s->set_pid(4000 + i % 64);
    s->set_seq_number(100000 + i / 64);
    s->set_func(v1::COLL_FUNC_ALL_REDUCE);
    s->set_bytes(1 << 26);
    s->set_kernel_start_cpu_ns(1'700'000'000'000'000'000 + i);
    s->set_kernel_end_cpu_ns(1'700'000'000'000'100'000 + i);
    s->set_kernel_duration_ns(100'000 + i);
    for (int c = 0; c < 32; ++c) {
      v1::ConnectionSummary* cs = s->add_connections();
      cs->set_peer_rank((i + c) % 64);
      cs->set_channel_id(c);
      cs->set_is_send(c % 2 == 0);
      cs->set_bytes(1 << 21);
      cs->set_duration_ns(90'000 + c);
      cs->set_throughput_bps(2.2e10);
    }
  }
  for (int r = 0; r < 64 * 8; ++r) {
    v1::RankProgress* p = b.add_progress();
    p->set_comm_hash(0xC0FFEE00 + r / 64);
    p->set_rank(r % 64);
    p->set_pid(4000 + r % 64);
    p->set_last_enqueued_seq(100128);
    p->set_last_completed_seq(100127);
  }
  return b;
}

TEST(ParseCostTest, ABusyAgentsLargestBatchPasses) {
  std::string wire;
  const uint64_t estimate = Estimate(BusyBatch(), &wire);
  const uint64_t parsed = Parsed(wire);
  std::cout << "busy batch: " << wire.size() << " bytes on the wire, " << parsed
            << " parsed, " << estimate << " estimated\n";
  EXPECT_GE(estimate, parsed);
  EXPECT_LT(estimate, kMaxParsedBatchBytes / 2);
}

TEST(ParseCostTest, EmptyEntriesAreCountedAtTheirParsedSize) {
  v1::ConnectRequest b;
  for (int i = 0; i < 100'000; ++i) b.add_summaries();
  b.add_summaries()->add_connections();
  v1::RankLifecycle* l = b.add_lifecycle();
  for (int i = 0; i < 10'000; ++i) l->add_communicators();
  std::string wire;
  const uint64_t estimate = Estimate(b, &wire);
  const uint64_t parsed = Parsed(wire);
  std::cout << "empty entries: " << wire.size() << " bytes on the wire, "
            << parsed << " parsed (x" << parsed / wire.size() << "), "
            << estimate << " estimated\n";
  EXPECT_GE(estimate, parsed);
  EXPECT_LT(estimate, 2 * parsed);
  // So an 8 MiB batch of them (4 Mi entries, ~900 MB parsed) is refused.
  EXPECT_GT(estimate / wire.size() * (8 << 20), kMaxParsedBatchBytes);
}

// A packed list costs its elements, whatever their varints' lengths (a
// list of -1, 10 bytes each on the wire, is 4 bytes each parsed).
TEST(ParseCostTest, PackedListsCostTheirElements) {
  v1::ConnectRequest b;
  v1::CommunicatorInfo* info = b.add_communicators();
  for (int i = 0; i < 100'000; ++i) info->add_global_ranks(i % 2 ? -1 : i);
  std::string wire;
  const uint64_t estimate = Estimate(b, &wire);
  const uint64_t parsed = Parsed(wire);
  std::cout << "packed list: " << wire.size() << " bytes on the wire, "
            << parsed << " parsed, " << estimate << " estimated\n";
  EXPECT_GE(estimate, parsed);
  EXPECT_LT(estimate, 2 * parsed);
}

TEST(ParseCostTest, MalformedBytesAreInvalid) {
  const std::string wire = "\x1a\x7f\x01";  // a summary of 127 bytes: 1 sent
  google::protobuf::io::ArrayInputStream in(wire.data(),
                                            static_cast<int>(wire.size()));
  absl::StatusOr<uint64_t> cost =
      ParsedBytes(v1::ConnectRequest::descriptor(), &in);
  EXPECT_TRUE(absl::IsInvalidArgument(cost.status())) << cost.status();
}

}  // namespace
}  // namespace pitstop::controller
