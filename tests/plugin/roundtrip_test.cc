// Every exported profiler version, driven by the NCCL emulator, round-trips
// into a real gRPC Telemetry server.
#include <stdlib.h>

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/nccl/emulator/nccl_emulator.h"
#include "tests/harness/telemetry_receiver.h"
#include "tests/plugin/test_util.h"

namespace pitstop::emu {
namespace {

class RoundTripTest : public ::testing::TestWithParam<int> {};

TEST_P(RoundTripTest, CollectivesAndP2pArriveComplete) {
  const int version = GetParam();
  const std::string sock = TempSocketPath("rt");
  auto receiver = TelemetryReceiver::Start(sock);
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  setenv("PITSTOP_AGENT_SOCKET", sock.c_str(), 1);
  // Generous flush bound: sanitizer builds connect slowly under load.
  setenv("PITSTOP_FINALIZE_TIMEOUT_MS", "20000", 1);
  setenv("RANK", "5", 1);
  setenv("PITSTOP_HOST", "emu-node-1", 1);
  setenv("PITSTOP_JOB_ID", "job-rt", 1);

  auto emu = Emulator::Create({.plugin = "pitstop", .force_version = version});
  ASSERT_TRUE(emu.ok()) << emu.status();
  EXPECT_EQ((*emu)->abi_version(), version);
  auto comm = (*emu)->InitComm({.comm_hash = 0xC0FFEE,
                                .name = "world",
                                .n_ranks = 4,
                                .rank = 1,
                                .n_nodes = 2});
  ASSERT_TRUE(comm.ok()) << comm.status();
  // The plugin wrote its default mask into NCCL's global mask.
  EXPECT_EQ((*emu)->activation_mask(), 0x2 | 0x4 | 0x8 | 0x40);

  constexpr int kColls = 20;
  for (int i = 0; i < kColls; ++i) {
    OpSpec spec;
    spec.seq_number = i;
    spec.count = 1024;
    (*comm)->RunCollective(spec, {.kernel_us = 0});
  }
  OpSpec send;
  send.p2p = true;
  send.func = "Send";
  send.peer = 2;
  send.count = 4096;
  send.datatype = "ncclBfloat16";
  send.n_channels = 1;
  (*comm)->RunCollective(send, {.kernel_us = 0});
  (*comm)->RunCollective(send, {.kernel_us = 0});
  EXPECT_EQ((*comm)->Finalize(), 0);

  ASSERT_TRUE((*receiver)->WaitFor(
      [](const auto& s) {
        return HasGoodbye(s, v1::ProcessGoodbye::REASON_FINALIZE);
      },
      absl::Seconds(30)));
  const auto streams = (*receiver)->Streams();
  ASSERT_FALSE(streams.empty());
  const auto& first = streams.back().batches.front();
  ASSERT_TRUE(first.has_hello());
  EXPECT_EQ(first.hello().host(), "emu-node-1");
  EXPECT_EQ(first.hello().job_id(), "job-rt");
  EXPECT_EQ(first.hello().global_rank(), 5);
  EXPECT_EQ(first.hello().pid(), static_cast<uint32_t>(getpid()));

  const auto ops = AllOps(streams);
  ASSERT_EQ(ops.size(), kColls + 2u);
  std::set<uint64_t> seqs;
  std::set<uint64_t> op_ids;
  for (const auto& op : ops) {
    EXPECT_EQ(op.comm_hash(), 0xC0FFEEu);
    EXPECT_EQ(op.rank(), 1);
    op_ids.insert(op.op_id());
    EXPECT_LE(op.enqueue_start_cpu_ns(), op.enqueue_stop_cpu_ns());
    if (op.kind() == v1::OP_KIND_COLLECTIVE) {
      seqs.insert(op.seq_number());
      EXPECT_EQ(op.func(), v1::COLL_FUNC_ALL_REDUCE);
      EXPECT_EQ(op.datatype(), v1::DATA_TYPE_FLOAT32);
      EXPECT_EQ(op.algorithm(), v1::ALGORITHM_RING);
      EXPECT_EQ(op.protocol(), v1::PROTOCOL_SIMPLE);
      EXPECT_EQ(op.count(), 1024u);
      EXPECT_EQ(op.bytes(), 4096u);
      EXPECT_EQ(op.n_channels(), 2u);
      EXPECT_EQ(op.peer(), -1);
      // CollApi exists from v5 on.
      if (version >= 5) {
        EXPECT_GT(op.api_cpu_ns(), 0u);
        EXPECT_LE(op.api_cpu_ns(), op.enqueue_start_cpu_ns());
      } else {
        EXPECT_EQ(op.api_cpu_ns(), 0u);
      }
    } else {
      EXPECT_EQ(op.func(), v1::COLL_FUNC_SEND);
      EXPECT_EQ(op.peer(), 2);
      EXPECT_EQ(op.bytes(), 8192u);
      EXPECT_EQ(op.datatype(), v1::DATA_TYPE_BFLOAT16);
    }
  }
  EXPECT_EQ(seqs.size(), static_cast<size_t>(kColls));
  EXPECT_EQ(op_ids.size(), ops.size());

  // Two channels x (send + recv) proxy ops per collective, one per send.
  const auto proxies = AllProxyOps(streams);
  EXPECT_EQ(proxies.size(), kColls * 4u + 2u);
  for (const auto& p : proxies) {
    EXPECT_TRUE(op_ids.count(p.op_id())) << p.op_id();
    EXPECT_EQ(p.pid(), static_cast<uint32_t>(getpid()));
    EXPECT_GT(p.in_progress_cpu_ns(), 0u);
    EXPECT_LE(p.start_cpu_ns(), p.stop_cpu_ns());
  }
  const auto kernels = AllKernels(streams);
  EXPECT_EQ(kernels.size(), kColls * 2u + 2u);
  for (const auto& k : kernels) {
    EXPECT_TRUE(op_ids.count(k.op_id()));
    if (version >= 4) {
      EXPECT_EQ(k.stop_gpu_ns() - k.start_gpu_ns(), 40'000u);
    } else {
      EXPECT_EQ(k.start_gpu_ns(), 0u);  // v3: no GPU timers
    }
  }
  // One completion per op, after all its children.
  const auto completions = AllCompletions(streams);
  EXPECT_EQ(completions.size(), ops.size());
  for (const auto& c : completions) {
    EXPECT_TRUE(op_ids.count(c.op_id()));
  }
  // Default mask: no proxy steps.
  EXPECT_TRUE(AllProxySteps(streams).empty());

  const auto comms = AllCommEvents(streams);
  ASSERT_GE(comms.size(), 2u);
  EXPECT_EQ(comms.front().kind(), v1::CommunicatorEvent::KIND_INIT);
  EXPECT_EQ(comms.back().kind(), v1::CommunicatorEvent::KIND_FINALIZE);
  if (version >= 4) {
    EXPECT_EQ(comms.front().info().comm_hash(), 0xC0FFEEu);
    EXPECT_EQ(comms.front().info().comm_name(), "world");
    EXPECT_EQ(comms.front().info().n_ranks(), 4);
    ASSERT_EQ(comms.front().info().global_ranks_size(), 4);
    EXPECT_EQ(comms.front().info().global_ranks(1), 5);
  }
  EXPECT_EQ(comms.front().info().profiler_abi_version(),
            static_cast<uint32_t>(version));
  const auto drops = LastDrops(streams);
  EXPECT_EQ(drops.ring_full(), 0u);
  EXPECT_EQ(drops.export_dropped(), 0u);
  EXPECT_EQ(drops.pool_exhausted(), 0u);
}

INSTANTIATE_TEST_SUITE_P(AllVersions, RoundTripTest,
                         ::testing::Values(3, 4, 5, 6), [](const auto& info) {
                           return absl::StrCat("v", info.param);
                         });

TEST(LoaderTest, ProbesNewestFirstAndByPath) {
  auto by_name = Emulator::Create({.plugin = "pitstop"});
  ASSERT_TRUE(by_name.ok()) << by_name.status();
  EXPECT_EQ((*by_name)->abi_version(), 6);
  auto by_path = Emulator::Create({.plugin = BuiltPluginPath()});
  ASSERT_TRUE(by_path.ok()) << by_path.status();
  EXPECT_EQ((*by_path)->library_path(), (*by_name)->library_path());
  auto missing = Emulator::Create({.plugin = "no-such-profiler"});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              ::testing::HasSubstr("libnccl-profiler-no-such-profiler.so"));
}

}  // namespace
}  // namespace pitstop::emu
