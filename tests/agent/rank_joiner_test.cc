#include "src/agent/rank_joiner.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pitstop::agent {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kComm = 0xC0FFEE;

v1::StreamTelemetryRequest Hello(uint32_t pid, int32_t global_rank) {
  v1::StreamTelemetryRequest req;
  req.mutable_hello()->set_host("proc-host");
  req.mutable_hello()->set_pid(pid);
  req.mutable_hello()->set_job_id("job1");
  req.mutable_hello()->set_global_rank(global_rank);
  req.set_batch_seq(1);
  return req;
}

void AddCommInit(v1::StreamTelemetryRequest* req, int32_t rank,
                 int32_t n_ranks) {
  auto* ev = req->add_communicators();
  ev->set_kind(v1::CommunicatorEvent::KIND_INIT);
  ev->mutable_info()->set_comm_hash(kComm);
  ev->mutable_info()->set_rank(rank);
  ev->mutable_info()->set_n_ranks(n_ranks);
}

v1::OpRecord* AddOp(v1::StreamTelemetryRequest* req, uint64_t op_id,
                    uint64_t seq, int32_t rank = 1) {
  v1::OpRecord* r = req->add_ops();
  r->set_op_id(op_id);
  r->set_comm_hash(kComm);
  r->set_rank(rank);
  r->set_kind(v1::OP_KIND_COLLECTIVE);
  r->set_func(v1::COLL_FUNC_ALL_REDUCE);
  r->set_seq_number(seq);
  r->set_bytes(1 << 20);
  r->set_algorithm(v1::ALGORITHM_RING);
  r->set_protocol(v1::PROTOCOL_SIMPLE);
  r->set_enqueue_start_cpu_ns(1000 + seq);
  r->set_peer(-1);
  return r;
}

void AddCompletion(v1::StreamTelemetryRequest* req, uint64_t op_id,
                   uint64_t cpu_ns, uint32_t children) {
  auto* c = req->add_completions();
  c->set_op_id(op_id);
  c->set_completion_cpu_ns(cpu_ns);
  c->set_children(children);
}

class RankJoinerTest : public ::testing::Test {
 protected:
  std::vector<v1::CollectiveSummary> Summaries() {
    std::vector<v1::CollectiveSummary> out;
    joiner_.TakeSummaries(&out);
    return out;
  }
  std::vector<v1::RankLifecycle> Lifecycle() {
    std::vector<v1::RankLifecycle> out;
    joiner_.TakeLifecycle(&out);
    return out;
  }
  FakeClock clock_;
  RankJoiner joiner_{&clock_,
                     RankJoinerOptions{.host = "agent-host",
                                       .max_open_ops = 8,
                                       .incomplete_timeout_ns = 5'000'000'000,
                                       .grace_ns = 100'000'000}};
};

TEST_F(RankJoinerTest, JoinsKernelChannelsAndProxyOpsIntoOneSummary) {
  auto req = Hello(42, 9);
  AddCommInit(&req, /*rank=*/1, /*n_ranks=*/4);
  AddOp(&req, 7, /*seq=*/3);
  // GPU timer = CPU clock - 5 s; the CPU sees events 200..900 ns late.
  const int64_t off = 5'000'000'000;
  auto add_ch = [&](uint32_t ch, uint64_t gstart, uint64_t gstop, uint64_t d) {
    auto* k = req.add_kernel_channels();
    k->set_op_id(7);
    k->set_channel_id(ch);
    k->set_start_gpu_ns(gstart);
    k->set_stop_gpu_ns(gstop);
    k->set_start_cpu_ns(gstart + off + d);
    k->set_stop_cpu_ns(gstop + off + d);
  };
  add_ch(0, 1'000'000, 1'040'000, 900);
  add_ch(1, 1'002'000, 1'062'000, 200);  // longest channel: 60 us
  for (uint32_t i = 0; i < 2; ++i) {
    auto* p = req.add_proxy_ops();
    p->set_op_id(7);
    p->set_proxy_index(i);
    p->set_channel_id(i);
    p->set_peer(i == 0 ? 2 : 0);
    p->set_is_send(i == 0);
    p->set_bytes(1000);
    p->set_start_cpu_ns(6'000'000'000);
    p->set_stop_cpu_ns(6'000'000'000 + 10'000 * (i + 1));
    p->set_send_wait_ns(i == 0 ? 77 : 0);
  }
  AddCompletion(&req, 7, 7'000'000'000, /*children=*/4);
  ASSERT_TRUE(joiner_.Add(1, req).ok());

  auto s = Summaries();
  ASSERT_EQ(s.size(), 1u);
  const v1::CollectiveSummary& sum = s[0];
  EXPECT_EQ(sum.comm_hash(), kComm);
  EXPECT_EQ(sum.seq_number(), 3u);
  EXPECT_EQ(sum.rank(), 1);
  EXPECT_EQ(sum.global_rank(), 9);
  EXPECT_EQ(sum.pid(), 42u);
  EXPECT_EQ(sum.state(), v1::OP_STATE_COMPLETED);
  EXPECT_EQ(sum.kernel_duration_ns(), 60'000u);
  // Converted with the fitted offset (off + 200 ns, the smallest delay), not
  // the raw GPU values.
  EXPECT_EQ(sum.kernel_start_cpu_ns(), 1'000'000u + off + 200);
  EXPECT_EQ(sum.kernel_end_cpu_ns(), 1'062'000u + off + 200);
  EXPECT_EQ(sum.completion_cpu_ns(), 7'000'000'000u);
  EXPECT_EQ(sum.proxy_duration_ns(), 20'000u);
  ASSERT_EQ(sum.connections_size(), 2);
  EXPECT_EQ(sum.connections(0).peer_rank(), 2);
  EXPECT_TRUE(sum.connections(0).is_send());
  EXPECT_EQ(sum.connections(0).send_wait_ns(), 77u);
  EXPECT_DOUBLE_EQ(sum.connections(0).throughput_bps(), 1000 * 1e9 / 10'000);
  EXPECT_EQ(sum.algorithm(), v1::ALGORITHM_RING);
  // AllReduce on 4 ranks: busbw = bytes / time * 2 * 3 / 4.
  EXPECT_DOUBLE_EQ(sum.bus_bandwidth_bps(), (1 << 20) * 1e9 / 60'000 * 1.5);
  EXPECT_EQ(joiner_.open_ops(), 0u);
}

TEST_F(RankJoinerTest, ImportedOpsWithoutHelloOrChildrenCompleteAtOnce) {
  v1::StreamTelemetryRequest req;
  AddOp(&req, 1, 0);
  AddOp(&req, 2, 1);
  AddCompletion(&req, 1, 5000, 0);
  AddCompletion(&req, 2, 9000, 0);
  ASSERT_TRUE(joiner_.Add(3, req).ok());
  auto s = Summaries();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].global_rank(), -1);
  EXPECT_EQ(s[0].kernel_duration_ns(), 0u);
  EXPECT_EQ(s[1].state(), v1::OP_STATE_COMPLETED);
  // Time falls back to enqueue -> completion; n_ranks unknown -> no busbw
  // for AllReduce.
  EXPECT_EQ(s[1].bus_bandwidth_bps(), 0.0);
  EXPECT_TRUE(Lifecycle().empty());
}

TEST_F(RankJoinerTest, CompletionWaitsForAnnouncedChildrenAcrossBatches) {
  auto req = Hello(1, 0);
  AddCompletion(&req, 5, 900, /*children=*/1);  // before its OpRecord
  ASSERT_TRUE(joiner_.Add(1, req).ok());
  v1::StreamTelemetryRequest b2;
  b2.set_batch_seq(2);
  AddOp(&b2, 5, 0);
  ASSERT_TRUE(joiner_.Add(1, b2).ok());
  EXPECT_TRUE(Summaries().empty());  // kernel channel still missing
  v1::StreamTelemetryRequest b3;
  b3.set_batch_seq(3);
  auto* k = b3.add_kernel_channels();
  k->set_op_id(5);
  k->set_start_cpu_ns(100);
  k->set_stop_cpu_ns(400);
  ASSERT_TRUE(joiner_.Add(1, b3).ok());
  auto s = Summaries();
  ASSERT_EQ(s.size(), 1u);
  // No GPU timers: kernel times from the CPU observations.
  EXPECT_EQ(s[0].kernel_start_cpu_ns(), 100u);
  EXPECT_EQ(s[0].kernel_end_cpu_ns(), 400u);
  EXPECT_EQ(s[0].kernel_duration_ns(), 0u);
}

TEST_F(RankJoinerTest, MissingChildrenEmitAfterGraceAndLateRecordsCount) {
  auto req = Hello(1, 0);
  AddOp(&req, 5, 0);
  AddCompletion(&req, 5, 900, /*children=*/2);
  ASSERT_TRUE(joiner_.Add(1, req).ok());
  joiner_.Poll();
  EXPECT_TRUE(Summaries().empty());
  clock_.Advance(absl::Milliseconds(150));
  joiner_.Poll();
  ASSERT_EQ(Summaries().size(), 1u);
  v1::StreamTelemetryRequest late;
  late.add_kernel_channels()->set_op_id(5);
  ASSERT_TRUE(joiner_.Add(1, late).ok());
  EXPECT_EQ(joiner_.stats().late_records, 1u);
  EXPECT_EQ(joiner_.open_ops(), 0u);
}

// The completion came first (another thread's ring) and the OpRecord is
// batches late on a loaded node: the grace does not emit a summary-less op;
// the record, when it comes, completes the op.
TEST_F(RankJoinerTest, CompletionBeforeItsRecordWaitsPastTheGrace) {
  auto first = Hello(1, 0);
  AddCompletion(&first, 5, 900, /*children=*/0);
  ASSERT_TRUE(joiner_.Add(1, first).ok());
  clock_.Advance(absl::Seconds(2));
  joiner_.Poll();
  EXPECT_TRUE(Summaries().empty());
  EXPECT_EQ(joiner_.stats().orphan_ops, 0u);
  v1::StreamTelemetryRequest late;
  AddOp(&late, 5, /*seq=*/11);
  ASSERT_TRUE(joiner_.Add(1, late).ok());
  const auto s = Summaries();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].seq_number(), 11u);
  EXPECT_EQ(s[0].state(), v1::OP_STATE_COMPLETED);
  EXPECT_EQ(joiner_.stats().late_records, 0u);
}

TEST_F(RankJoinerTest, CapEvictsOldestIncompleteOps) {
  auto req = Hello(1, 0);
  for (uint64_t i = 0; i < 10; ++i) AddOp(&req, 100 + i, i);
  ASSERT_TRUE(joiner_.Add(1, req).ok());
  EXPECT_EQ(joiner_.open_ops(), 8u);
  EXPECT_EQ(joiner_.stats().ops_evicted, 2u);
  auto s = Summaries();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].seq_number(), 0u);
  EXPECT_EQ(s[0].state(), v1::OP_STATE_ENQUEUED);
}

TEST_F(RankJoinerTest, IncompleteOpsTimeOut) {
  auto req = Hello(1, 0);
  AddOp(&req, 1, 0);
  ASSERT_TRUE(joiner_.Add(1, req).ok());
  clock_.Advance(absl::Seconds(4));
  joiner_.Poll();
  EXPECT_TRUE(Summaries().empty());
  clock_.Advance(absl::Seconds(2));
  joiner_.Poll();
  EXPECT_EQ(Summaries().size(), 1u);
  EXPECT_EQ(joiner_.stats().ops_timed_out, 1u);
}

TEST_F(RankJoinerTest, ProgressReportsOldestIncompleteOp) {
  auto req = Hello(1, 4);
  AddCommInit(&req, 1, 2);
  AddOp(&req, 1, 10);
  AddCompletion(&req, 1, 5000, 0);
  v1::OpRecord* op11 = AddOp(&req, 2, 11);
  op11->set_count(262144);
  op11->set_datatype(v1::DATA_TYPE_FLOAT32);
  auto* p = req.add_proxy_ops();  // op 11 started, in flight
  p->set_op_id(2);
  p->set_peer(0);
  p->set_bytes(4096);
  AddOp(&req, 3, 12);
  ASSERT_TRUE(joiner_.Add(1, req).ok());
  clock_.Advance(absl::Seconds(2));
  std::vector<v1::RankProgress> progress;
  joiner_.SnapshotProgress(&progress);
  ASSERT_EQ(progress.size(), 1u);
  const v1::RankProgress& rp = progress[0];
  EXPECT_EQ(rp.comm_hash(), kComm);
  EXPECT_EQ(rp.global_rank(), 4);
  EXPECT_EQ(rp.last_enqueued_seq(), 12u);
  EXPECT_EQ(rp.last_started_seq(), 11u);
  EXPECT_EQ(rp.last_completed_seq(), 10u);
  EXPECT_EQ(rp.oldest_incomplete_seq(), 11u);
  EXPECT_EQ(rp.oldest_incomplete_age_ns(), 2'000'000'000u);
  // What the op is, so the controller can tell a collective mismatch.
  EXPECT_EQ(rp.oldest_incomplete_count(), 262144u);
  EXPECT_EQ(rp.oldest_incomplete_datatype(), v1::DATA_TYPE_FLOAT32);
  ASSERT_EQ(rp.in_flight_size(), 1);
  EXPECT_EQ(rp.in_flight(0).bytes(), 4096u);
}

TEST_F(RankJoinerTest, MemberWithoutOpsStillReportsProgress) {
  auto req = Hello(1, 6);
  AddCommInit(&req, 2, 4);
  ASSERT_TRUE(joiner_.Add(1, req).ok());
  std::vector<v1::RankProgress> progress;
  joiner_.SnapshotProgress(&progress);
  ASSERT_EQ(progress.size(), 1u);
  EXPECT_EQ(progress[0].comm_hash(), kComm);
  EXPECT_EQ(progress[0].rank(), 2);
  EXPECT_EQ(progress[0].global_rank(), 6);
  EXPECT_EQ(progress[0].func(), v1::COLL_FUNC_UNSPECIFIED);
  EXPECT_EQ(progress[0].last_enqueue_cpu_ns(), 0u);
  // Once it enqueues, the per-function entry replaces it.
  v1::StreamTelemetryRequest b;
  AddOp(&b, 1, 0, /*rank=*/2);
  ASSERT_TRUE(joiner_.Add(1, b).ok());
  progress.clear();
  joiner_.SnapshotProgress(&progress);
  ASSERT_EQ(progress.size(), 1u);
  EXPECT_EQ(progress[0].func(), v1::COLL_FUNC_ALL_REDUCE);
}

TEST_F(RankJoinerTest, LifecycleOpenedDiedAndClean) {
  ASSERT_TRUE(joiner_.Add(1, Hello(11, 0)).ok());
  ASSERT_TRUE(joiner_.Add(2, Hello(12, 1)).ok());
  ASSERT_TRUE(joiner_.Add(3, Hello(13, 2)).ok());
  auto opened = Lifecycle();
  ASSERT_EQ(opened.size(), 3u);
  EXPECT_EQ(opened[0].kind(), v1::RankLifecycle::KIND_STREAM_OPENED);
  EXPECT_EQ(opened[0].job_id(), "job1");
  v1::StreamTelemetryRequest bye;
  bye.mutable_goodbye()->set_reason(v1::ProcessGoodbye::REASON_FINALIZE);
  ASSERT_TRUE(joiner_.Add(2, bye).ok());
  EXPECT_THAT(joiner_.Add(2, bye).message(), HasSubstr("goodbye"));
  joiner_.EndStream(1);
  joiner_.EndStream(2);
  joiner_.EndStream(3, /*agent_stopping=*/true);
  auto ended = Lifecycle();
  ASSERT_EQ(ended.size(), 2u);
  EXPECT_EQ(ended[0].kind(), v1::RankLifecycle::KIND_DIED);
  EXPECT_EQ(ended[0].pid(), 11u);
  EXPECT_EQ(ended[1].kind(), v1::RankLifecycle::KIND_CLEAN_EXIT);
  EXPECT_EQ(joiner_.open_streams(), 0u);
}

// A failed communicator creation (NVIDIA/nccl#426) the library reported
// becomes a lifecycle event for the controller, with the process's
// identity; long error texts are cut, extra failures in one message dropped.
TEST_F(RankJoinerTest, InitFailuresBecomeLifecycleEvents) {
  auto req = Hello(21, 3);
  for (int i = 0; i < kMaxInitFailures + 4; ++i) {
    v1::CommInitFailure* f = req.add_init_failures();
    f->set_call("ncclCommInitRank");
    f->set_result(2);
    f->set_error(i == 0 ? "NET/IB : No device found."
                        : std::string(kMaxInitErrorText + 100, 'x'));
    f->set_n_ranks(8);
    f->set_rank(3);
  }
  ASSERT_TRUE(joiner_.Add(1, req).ok());
  std::vector<v1::RankLifecycle> events = Lifecycle();
  ASSERT_EQ(events.size(), 1u + kMaxInitFailures);
  EXPECT_EQ(events[0].kind(), v1::RankLifecycle::KIND_STREAM_OPENED);
  const v1::RankLifecycle& e = events[1];
  EXPECT_EQ(e.kind(), v1::RankLifecycle::KIND_COMM_INIT_FAILED);
  EXPECT_EQ(e.pid(), 21u);
  EXPECT_EQ(e.global_rank(), 3);
  EXPECT_EQ(e.job_id(), "job1");
  EXPECT_EQ(e.init_failure().call(), "ncclCommInitRank");
  EXPECT_EQ(e.init_failure().result(), 2);
  EXPECT_EQ(e.init_failure().error(), "NET/IB : No device found.");
  EXPECT_EQ(events[2].init_failure().error().size(), kMaxInitErrorText);
}

TEST_F(RankJoinerTest, SecondHelloIsInvalid) {
  ASSERT_TRUE(joiner_.Add(1, Hello(11, 0)).ok());
  absl::Status st = joiner_.Add(1, Hello(11, 0));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("hello"));
}

TEST_F(RankJoinerTest, CommunicatorWithHugeOrBadSizesIsDropped) {
  auto req = Hello(77, 5);
  AddCommInit(&req, 1, 50'000'000);  // one small message, huge n_ranks
  ASSERT_TRUE(joiner_.Add(1, req).ok());
  v1::StreamTelemetryRequest more;
  AddCommInit(&more, 3, 2);  // rank >= n_ranks
  AddCommInit(&more, 0, kMaxCommRanks + 1);
  auto* ev = more.add_communicators();
  ev->mutable_info()->set_comm_hash(9);
  ev->mutable_info()->set_rank(0);
  ev->mutable_info()->set_n_ranks(2);
  for (int i = 0; i < 3; ++i) ev->mutable_info()->add_global_ranks(i);
  ASSERT_TRUE(joiner_.Add(1, more).ok());
  std::vector<v1::CommunicatorInfo> comms;
  joiner_.TakeCommunicators(&comms);
  EXPECT_TRUE(comms.empty());
  EXPECT_EQ(joiner_.stats().invalid_records, 4u);
  EXPECT_FALSE(joiner_.StreamInComm(1, kComm, -1));
  std::vector<v1::RankLifecycle> life = Lifecycle();
  ASSERT_EQ(life.size(), 1u);
  joiner_.EndStream(1);
  life = Lifecycle();
  ASSERT_EQ(life.size(), 1u);
  EXPECT_EQ(life[0].communicators_size(), 0);
  // A valid one still works on the same stream.
  v1::StreamTelemetryRequest ok = Hello(78, 2);
  AddCommInit(&ok, 0, 4);
  ASSERT_TRUE(joiner_.Add(2, ok).ok());
  joiner_.TakeCommunicators(&comms);
  ASSERT_EQ(comms.size(), 1u);
  EXPECT_EQ(comms[0].global_ranks_size(), 4);
}

TEST_F(RankJoinerTest, ProxyIndexBeyondPerOpCapIsDroppedAndCounted) {
  auto req = Hello(1, 0);
  AddCommInit(&req, 1, 2);
  AddOp(&req, 10, 1);
  for (uint32_t idx : {0u, kMaxConnsPerOp - 1, kMaxConnsPerOp, 4096u}) {
    auto* p = req.add_proxy_ops();
    p->set_op_id(10);
    p->set_proxy_index(idx);
    p->set_peer(0);
    p->set_bytes(100);
  }
  auto* st = req.add_proxy_steps();
  st->set_op_id(10);
  st->set_proxy_index(100000);
  AddCompletion(&req, 10, 5000, 2);
  ASSERT_TRUE(joiner_.Add(1, req).ok());
  EXPECT_EQ(joiner_.stats().invalid_records, 3u);
  auto sums = Summaries();
  ASSERT_EQ(sums.size(), 1u);
  EXPECT_EQ(sums[0].connections_size(), 2);
}

TEST_F(RankJoinerTest, CommunicatorsGetHostPidAndGlobalRank) {
  auto req = Hello(77, 5);
  AddCommInit(&req, 1, 3);
  ASSERT_TRUE(joiner_.Add(1, req).ok());
  std::vector<v1::CommunicatorInfo> comms;
  joiner_.TakeCommunicators(&comms);
  ASSERT_EQ(comms.size(), 1u);
  EXPECT_EQ(comms[0].host(), "agent-host");
  EXPECT_EQ(comms[0].pid(), 77u);
  EXPECT_EQ(comms[0].job_id(), "job1");
  EXPECT_THAT(comms[0].global_ranks(), ::testing::ElementsAre(-1, 5, -1));
  EXPECT_TRUE(joiner_.StreamInComm(1, kComm, 1));
  EXPECT_FALSE(joiner_.StreamInComm(1, kComm, 0));
  EXPECT_FALSE(joiner_.StreamInComm(1, 1234, -1));
}

TEST_F(RankJoinerTest, CountsBatchGapsDropsAndProxySteps) {
  auto req = Hello(1, 0);
  req.mutable_drops()->set_ring_full(5);
  ASSERT_TRUE(joiner_.Add(1, req).ok());
  v1::StreamTelemetryRequest b;
  b.set_batch_seq(4);  // 2 and 3 lost
  b.mutable_drops()->set_ring_full(7);
  b.mutable_drops()->set_export_dropped(1);
  AddOp(&b, 9, 0);
  for (uint32_t step = 0; step < 2; ++step) {
    auto* st = b.add_proxy_steps();
    st->set_op_id(9);
    st->set_proxy_index(0);
    st->set_step(step);
    st->set_bytes(100);
    st->set_send_wait_cpu_ns(1000);
    st->set_stop_cpu_ns(1600);
  }
  auto* p = b.add_proxy_ops();
  p->set_op_id(9);
  p->set_steps_seen(2);
  AddCompletion(&b, 9, 2000, 1);
  ASSERT_TRUE(joiner_.Add(1, b).ok());
  EXPECT_EQ(joiner_.stats().batches_lost, 2u);
  EXPECT_EQ(joiner_.stats().plugin_dropped, 8u);
  auto s = Summaries();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_TRUE(s[0].deep());
  ASSERT_EQ(s[0].connections_size(), 1);
  EXPECT_EQ(s[0].connections(0).bytes(), 200u);
  EXPECT_EQ(s[0].connections(0).send_wait_ns(), 1200u);
  EXPECT_TRUE(s[0].connections(0).from_proxy_steps());
}

TEST_F(RankJoinerTest, FinalizeInTheBatchOfTheLastOpKeepsItsCommunicator) {
  auto req = Hello(1, 0);
  AddCommInit(&req, 1, 4);
  ASSERT_TRUE(joiner_.Add(1, req).ok());
  v1::StreamTelemetryRequest last;
  auto* ev = last.add_communicators();  // packed before the ops
  ev->set_kind(v1::CommunicatorEvent::KIND_FINALIZE);
  ev->mutable_info()->set_comm_hash(kComm);
  ev->mutable_info()->set_rank(1);
  ev->mutable_info()->set_n_ranks(4);
  AddOp(&last, 3, 0);
  AddCompletion(&last, 3, 90'000, 0);
  ASSERT_TRUE(joiner_.Add(1, last).ok());
  auto s = Summaries();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_GT(s[0].bus_bandwidth_bps(), 0);  // n_ranks still known
  std::vector<v1::RankProgress> progress;
  joiner_.SnapshotProgress(&progress);
  EXPECT_TRUE(progress.empty());  // nothing expected from an ended comm
  EXPECT_FALSE(joiner_.StreamInComm(1, kComm, -1));
  // The controller is told the member finalized it (the init was not).
  std::vector<v1::CommunicatorInfo> comms;
  joiner_.TakeCommunicators(&comms);
  ASSERT_EQ(comms.size(), 2u);
  EXPECT_FALSE(comms[0].finalized());
  EXPECT_TRUE(comms[1].finalized());
  EXPECT_EQ(comms[1].comm_hash(), kComm);
  EXPECT_EQ(comms[1].rank(), 1);
}

// An aborted communicator ended in error: not a clean end to the
// controller, whose hang (if any) stays judged.
TEST_F(RankJoinerTest, AnAbortedCommunicatorIsNotFinalized) {
  auto req = Hello(1, 0);
  AddCommInit(&req, 1, 4);
  auto* ev = req.add_communicators();
  ev->set_kind(v1::CommunicatorEvent::KIND_ABORT);
  ev->mutable_info()->set_comm_hash(kComm);
  ev->mutable_info()->set_rank(1);
  ev->mutable_info()->set_n_ranks(4);
  ASSERT_TRUE(joiner_.Add(1, req).ok());
  std::vector<v1::CommunicatorInfo> comms;
  joiner_.TakeCommunicators(&comms);
  ASSERT_EQ(comms.size(), 2u);
  EXPECT_FALSE(comms[1].finalized());
}

TEST(BusBandwidthFactorTest, MatchesNcclDefinitions) {
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(v1::COLL_FUNC_ALL_REDUCE, 8), 1.75);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(v1::COLL_FUNC_ALL_GATHER, 4), 0.75);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(v1::COLL_FUNC_BROADCAST, 0), 1.0);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(v1::COLL_FUNC_ALL_REDUCE, 0), 0.0);
}

}  // namespace
}  // namespace pitstop::agent
