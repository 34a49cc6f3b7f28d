// NCCL's odd cases, driven through the real library into a real receiver:
// CUDA-graph replays, PXN proxy ops, NULL/foreign handles, failed init, two
// communicators sharing NCCL's one mask with agent-driven deep profiling,
// and an agent that is killed and restarted mid-run.
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <set>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/nccl/emulator/nccl_emulator.h"
#include "tests/harness/telemetry_receiver.h"
#include "tests/plugin/test_util.h"

namespace pitstop::emu {
namespace {

constexpr int kDefaultMask = 0x2 | 0x4 | 0x8 | 0x40;
constexpr int kDeepMask = 0x10 | 0x80;

class EventsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sock_ = TempSocketPath("ev");
    auto r = TelemetryReceiver::Start(sock_);
    ASSERT_TRUE(r.ok()) << r.status();
    receiver_ = std::move(*r);
    setenv("PITSTOP_AGENT_SOCKET", sock_.c_str(), 1);
    // Generous flush bound: sanitizer builds connect slowly under load.
    setenv("PITSTOP_FINALIZE_TIMEOUT_MS", "20000", 1);
    auto e = Emulator::Create({.plugin = "pitstop"});
    ASSERT_TRUE(e.ok()) << e.status();
    emu_ = std::move(*e);
  }
  std::unique_ptr<Comm> Init(uint64_t hash, int rank = 0, int n = 2) {
    auto c = emu_->InitComm({.comm_hash = hash,
                             .name = "c",
                             .n_ranks = n,
                             .rank = rank,
                             .n_nodes = 1});
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }
  // Waits for the clean end of the stream(s) after the last finalize.
  std::vector<ReceivedStream> WaitGoodbye() {
    EXPECT_TRUE(receiver_->WaitFor(
        [](const auto& s) {
          return HasGoodbye(s, v1::ProcessGoodbye::REASON_FINALIZE);
        },
        absl::Seconds(30)));
    return receiver_->Streams();
  }
  bool WaitHello() {
    return receiver_->WaitFor(
        [](const auto& s) { return !s.empty() && !s.back().batches.empty(); },
        absl::Seconds(30));
  }
  bool WaitMask(int want) {
    for (int i = 0; i < 3000 && emu_->activation_mask() != want; ++i) {
      usleep(10000);
    }
    return emu_->activation_mask() == want;
  }

  std::string sock_;
  std::unique_ptr<TelemetryReceiver> receiver_;
  std::unique_ptr<Emulator> emu_;
};

TEST_F(EventsTest, GraphReplaysReferenceLongStoppedApiEvent) {
  auto comm = Init(0x6A);
  ASSERT_TRUE(WaitHello());
  // Counters are cumulative per process: start from the first batch's.
  const uint64_t ring_full_before =
      receiver_->Streams().back().batches.front().drops().ring_full();
  OpSpec spec;
  spec.graph_captured = true;
  spec.seq_number = 100;
  auto captured = comm->StartOp(spec);
  ASSERT_NE(captured->api_handle(), nullptr);  // v6: CollApi
  captured->EnqueueDone();                     // first launch
  // Thousands of other API calls in between cycle the API pool.
  for (int i = 0; i < 5000; ++i) {
    OpSpec other;
    other.seq_number = i;
    auto op = comm->StartOp(other);
    op->EnqueueDone();
  }
  usleep(100000);  // let the exporter drain before the replays
  std::set<uint64_t> replay_seqs = {101, 102, 103};
  for (uint64_t seq : replay_seqs) {
    auto replay = comm->Replay(*captured, seq);
    replay->EnqueueDone();  // host task on the graph thread
    const int p = replay->ProxyOpStart({.channel = 0, .peer = 1});
    replay->KernelStart(0, 500);
    replay->ProxyOpStop(p);
    replay->KernelStop(0, 900);
  }
  comm->Finalize();
  const auto streams = WaitGoodbye();
  std::set<uint64_t> replay_ids;
  int normal = 0;
  for (const auto& op : AllOps(streams)) {
    if (op.comm_hash() != 0x6A) continue;
    if (op.graph_replay()) {
      EXPECT_TRUE(op.graph_captured());
      EXPECT_EQ(op.api_cpu_ns(), 0u) << "replay has no API call time";
      if (replay_seqs.count(op.seq_number())) replay_ids.insert(op.op_id());
    } else {
      ++normal;
      EXPECT_GT(op.api_cpu_ns(), 0u);
    }
  }
  EXPECT_EQ(replay_ids.size(), 3u);
  // A tight loop may outrun the exporter: every op either arrived or was
  // counted as a ring drop.
  EXPECT_EQ(static_cast<uint64_t>(normal) + LastDrops(streams).ring_full() -
                ring_full_before,
            5000u);
  int completed = 0;
  for (const auto& c : AllCompletions(streams)) {
    if (replay_ids.count(c.op_id())) {
      ++completed;
      EXPECT_EQ(c.children(), 2u);
    }
  }
  EXPECT_EQ(completed, 3);
}

TEST_F(EventsTest, PxnProxyOpOfAnotherProcessIsNotDereferenced) {
  auto comm = Init(0x9C);
  OpSpec spec;
  auto op = comm->StartOp(spec);
  op->EnqueueDone();
  const int other_pid = getpid() + 100000;
  // The harness passes a bogus parent for the foreign op; a dereference
  // would crash this test.
  const int pxn = op->ProxyOpStart({.channel = 1, .peer = 1, .pid = other_pid});
  const int own = op->ProxyOpStart({.channel = 0, .peer = 1});
  op->ProxyStep(pxn, 0, 4096);
  op->ProxyOpStop(pxn);
  op->ProxyOpStop(own);
  comm->Finalize();
  const auto streams = WaitGoodbye();
  const auto ops = AllOps(streams);
  ASSERT_EQ(ops.size(), 1u);
  bool saw_pxn = false, saw_own = false;
  for (const auto& p : AllProxyOps(streams)) {
    if (p.pid() == static_cast<uint32_t>(other_pid)) {
      saw_pxn = true;
      EXPECT_EQ(p.op_id(), 0u);  // not ours to tie
      EXPECT_EQ(p.channel_id(), 1u);
    } else {
      saw_own = true;
      EXPECT_EQ(p.op_id(), ops[0].op_id());
    }
  }
  EXPECT_TRUE(saw_pxn);
  EXPECT_TRUE(saw_own);
  // Completion counts only the op's own child.
  const auto completions = AllCompletions(streams);
  ASSERT_EQ(completions.size(), 1u);
  EXPECT_EQ(completions[0].children(), 1u);
}

TEST_F(EventsTest, NullAndForeignHandlesAreIgnoredAndCounted) {
  auto comm = Init(0x11);
  int not_a_handle = 0;
  emu_->RawStop(nullptr);
  emu_->RawRecordState(nullptr, 22, 5);
  emu_->RawStop(&not_a_handle);
  emu_->RawRecordState(&not_a_handle, 9, 5);
  EXPECT_EQ(not_a_handle, 0);
  comm->RunCollective(OpSpec{}, {.kernel_us = 0});
  comm->Finalize();
  const auto streams = WaitGoodbye();
  EXPECT_EQ(AllOps(streams).size(), 1u);
  EXPECT_GE(LastDrops(streams).ignored(), 4u);
}

TEST_F(EventsTest, FailedInitLeavesNcclRunningWithoutUs) {
  int result = 0;
  auto bad = emu_->InitCommKeepOnFailure(
      {.comm_hash = 0xBAD, .n_ranks = 4, .rank = 7}, &result);
  EXPECT_EQ(result, 4);  // ncclInvalidArgument
  EXPECT_EQ(bad->context(), nullptr);
  // NCCL keeps calling with the NULL context: nothing recorded, no crash.
  bad->RunCollective(OpSpec{}, {.kernel_us = 0});
  auto status = emu_->InitComm({.comm_hash = 0xBAD, .n_ranks = 0, .rank = 0});
  EXPECT_EQ(status.status().code(), absl::StatusCode::kFailedPrecondition);

  auto good = Init(0x600D);
  good->RunCollective(OpSpec{}, {.kernel_us = 0});
  good->Finalize();
  bad->Finalize();
  const auto streams = WaitGoodbye();
  const auto ops = AllOps(streams);
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].comm_hash(), 0x600Du);
  for (const auto& ev : AllCommEvents(streams)) {
    EXPECT_NE(ev.info().comm_hash(), 0xBADu);
  }
}

TEST_F(EventsTest, AgentSwitchesDeepProfilingPerCommunicator) {
  auto a = Init(0xA, 0, 2);
  auto b = Init(0xB, 1, 2);
  ASSERT_EQ(emu_->activation_mask(), kDefaultMask);
  ASSERT_TRUE(WaitHello());
  // Deep profiling for A only, until told otherwise.
  v1::ActivationCommand cmd;
  cmd.set_comm_hash(0xA);
  cmd.set_event_mask(kDefaultMask | kDeepMask);
  ASSERT_EQ(receiver_->SendActivation(cmd), 1);
  // NCCL's one mask gets the union; our own per-comm mask filters B.
  ASSERT_TRUE(WaitMask(kDefaultMask | kDeepMask));
  Timeline t{.kernel_us = 0, .steps_per_proxy_op = 2, .with_net_events = true};
  a->RunCollective(OpSpec{}, t);
  b->RunCollective(OpSpec{}, t);
  // Back to the default.
  cmd.set_event_mask(0);
  ASSERT_EQ(receiver_->SendActivation(cmd), 1);
  ASSERT_TRUE(WaitMask(kDefaultMask));
  a->RunCollective(OpSpec{}, t);
  // A timed activation for all comms reverts by itself.
  v1::ActivationCommand timed;
  timed.set_event_mask(kDefaultMask | kDeepMask);
  timed.set_duration_ms(50);
  ASSERT_EQ(receiver_->SendActivation(timed), 1);
  ASSERT_TRUE(WaitMask(kDefaultMask | kDeepMask));
  ASSERT_TRUE(WaitMask(kDefaultMask));
  a->Finalize();
  b->Finalize();

  const auto streams = WaitGoodbye();
  std::map<uint64_t, uint64_t> comm_of;  // op_id -> comm hash
  std::vector<uint64_t> a_ops;
  for (const auto& op : AllOps(streams)) {
    comm_of[op.op_id()] = op.comm_hash();
    if (op.comm_hash() == 0xA) a_ops.push_back(op.op_id());
  }
  ASSERT_EQ(a_ops.size(), 2u);
  const auto steps = AllProxySteps(streams);
  // A's first op: 2 channels x 2 proxy ops x 2 steps; B and A's second: none.
  ASSERT_EQ(steps.size(), 8u);
  for (const auto& s : steps) {
    EXPECT_EQ(s.op_id(), a_ops[0]);
    EXPECT_EQ(s.bytes(), 1u << 16);
    EXPECT_GE(s.stop_cpu_ns(), s.start_cpu_ns());
  }
  for (const auto& p : AllProxyOps(streams)) {
    if (p.op_id() == a_ops[0]) {
      EXPECT_EQ(p.steps_seen(), 2u);
      EXPECT_EQ(p.bytes(), 2u << 16);
    } else {
      EXPECT_EQ(p.steps_seen(), 0u);
    }
  }
  const auto net = AllNetEvents(streams);
  ASSERT_EQ(net.size(), 8u);
  for (const auto& n : net) {
    EXPECT_EQ(n.op_id(), a_ops[0]);
    EXPECT_EQ(n.transport(), v1::NetPluginRecord::TRANSPORT_IB);
    EXPECT_EQ(n.length_bytes(), 1u << 16);
  }
}

// Finalizing the last communicator while another thread creates one: the
// old exporter is stopped and joined before a new one starts, so no two
// exporters drain the same rings (duplicates) and the new comm always has an
// exporter (nothing stranded).
TEST_F(EventsTest, FinalizeOfLastCommRacingAnInitKeepsOneExporter) {
  constexpr int kRounds = 15;
  constexpr int kOps = 20;
  for (int round = 0; round < kRounds; ++round) {
    auto a = Init(0xA000 + round);
    ASSERT_NE(a, nullptr);
    // A backlog makes A's final flush long enough for B to overlap it.
    for (int i = 0; i < 300; ++i) a->RunCollective(OpSpec{}, {.kernel_us = 0});
    std::atomic<bool> finalizing{false};
    std::thread finalize([&] {
      finalizing = true;
      a->Finalize();
    });
    // B's init and ops overlap A's finalize (and its exporter's flush).
    while (!finalizing) std::this_thread::yield();
    usleep(250 * (round % 8));
    auto b = Init(0xB000 + round);
    ASSERT_NE(b, nullptr);
    for (int i = 0; i < kOps; ++i) {
      OpSpec spec;
      spec.seq_number = static_cast<uint64_t>(round) * 1000 + i;
      b->RunCollective(spec, {.kernel_us = 0});
    }
    finalize.join();
    b->Finalize();  // flushes this round's ops before it returns
  }
  ASSERT_TRUE(receiver_->WaitFor(
      [&](const auto& s) {
        size_t b_ops = 0;
        for (const auto& op : AllOps(s)) b_ops += op.comm_hash() >= 0xB000;
        return b_ops >= kRounds * kOps;
      },
      absl::Seconds(20)))
      << "ops stranded without an exporter";
  usleep(200000);  // room for late duplicates to arrive
  std::map<std::pair<uint64_t, uint64_t>, int> seen;
  for (const auto& op : AllOps(receiver_->Streams())) {
    ++seen[{op.comm_hash(), op.seq_number()}];
  }
  std::erase_if(seen, [](const auto& kv) { return kv.first.first < 0xB000; });
  EXPECT_EQ(seen.size(), static_cast<size_t>(kRounds * kOps));
  int duplicated = 0;
  for (const auto& [key, n] : seen) duplicated += n > 1;
  EXPECT_EQ(duplicated, 0);
}

TEST_F(EventsTest, AgentKilledAndRestartedMidRun) {
  auto comm = Init(0xD1E);
  for (int i = 0; i < 5; ++i) comm->RunCollective(OpSpec{}, {.kernel_us = 0});
  ASSERT_TRUE(receiver_->WaitFor(
      [](const auto& s) { return AllOps(s).size() == 5; }, absl::Seconds(30)));
  // Counters are cumulative per process: start from what the agent saw.
  usleep(20000);
  const v1::DropCounters before = LastDrops(receiver_->Streams());
  receiver_->Shutdown();  // the agent dies
  // NCCL threads keep going; nothing blocks.
  for (int i = 0; i < 200; ++i) comm->RunCollective(OpSpec{}, {.kernel_us = 0});
  usleep(50000);  // let the exporter notice and drop
  auto restarted = TelemetryReceiver::Start(sock_);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  // A new stream starts with a hello (reconnects > 0) and the live comm.
  ASSERT_TRUE(
      (*restarted)
          ->WaitFor(
              [](const auto& s) { return !s.empty() && !s[0].batches.empty(); },
              absl::Seconds(30)));
  for (int i = 0; i < 7; ++i) {
    OpSpec spec;
    spec.seq_number = 1000 + i;
    comm->RunCollective(spec, {.kernel_us = 0});
  }
  comm->Finalize();
  ASSERT_TRUE((*restarted)
                  ->WaitFor(
                      [](const auto& s) {
                        return HasGoodbye(s,
                                          v1::ProcessGoodbye::REASON_FINALIZE);
                      },
                      absl::Seconds(30)));
  const auto streams = (*restarted)->Streams();
  const auto& first = streams[0].batches[0];
  ASSERT_TRUE(first.has_hello());
  EXPECT_GE(first.hello().reconnects(), 1u);
  bool comm_announced = false;
  for (const auto& ev : first.communicators()) {
    comm_announced |= ev.info().comm_hash() == 0xD1E;
  }
  EXPECT_TRUE(comm_announced);
  int after = 0;
  for (const auto& op : AllOps(streams)) after += op.seq_number() >= 1000;
  EXPECT_EQ(after, 7);
  // What was produced while the agent was away was dropped and counted:
  // 8 records per collective (op, 4 proxy ops, 2 kernel channels,
  // completion); writes that failed count too, so received + dropped covers
  // every record except those in a write the dead agent had accepted.
  const auto drops = LastDrops(streams);
  const uint64_t after_records =
      AllOps(streams).size() + AllProxyOps(streams).size() +
      AllKernels(streams).size() + AllCompletions(streams).size();
  EXPECT_EQ(after_records % 8, 0u);
  const uint64_t dropped = drops.export_dropped() - before.export_dropped();
  EXPECT_GT(dropped, 0u);
  EXPECT_EQ(drops.ring_full(), before.ring_full());
  EXPECT_LE(after_records + dropped, 207u * 8);
  EXPECT_GE(after_records + dropped, 200u * 8);
}

}  // namespace
}  // namespace pitstop::emu
