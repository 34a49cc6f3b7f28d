// PITSTOP_CHAIN_PROFILER_PLUGIN: pitstop and a second plugin (the counting
// plugin, libnccl-profiler-counter.so) both get every event they asked
// for, each with its own handles; a chained plugin whose init fails is
// logged once and dropped while pitstop keeps streaming.
#include "plugin/chain.h"

#include <dlfcn.h>
#include <stdlib.h>

#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "plugin/abi/profiler_common.h"
#include "src/nccl/emulator/nccl_emulator.h"
#include "tests/harness/telemetry_receiver.h"
#include "tests/plugin/test_util.h"

namespace pitstop::emu {
namespace {

int Bit(uint32_t type) { return __builtin_ctz(type); }

TEST(ChainTest, CandidatesFollowNcclsNamingRules) {
  using plugin::ChainCandidates;
  EXPECT_THAT(
      ChainCandidates("inspector"),
      ::testing::ElementsAre("inspector", "libnccl-profiler-inspector.so"));
  EXPECT_THAT(ChainCandidates("/opt/x/libfoo.so"),
              ::testing::ElementsAre("/opt/x/libfoo.so"));
  EXPECT_THAT(ChainCandidates("libnccl-profiler-inspector.so"),
              ::testing::ElementsAre("libnccl-profiler-inspector.so"));
  EXPECT_TRUE(ChainCandidates("").empty());
}

TEST(ChainTest, EmittedTypesImplyParents) {
  using plugin::EmittedTypes;
  EXPECT_EQ(EmittedTypes(abi::kKernelCh),
            abi::kKernelCh | abi::kColl | abi::kP2p | abi::kGroup |
                abi::kCollApi | abi::kP2pApi | abi::kGroupApi);
  EXPECT_EQ(EmittedTypes(abi::kProxyCtrl), abi::kProxyCtrl);
  EXPECT_EQ(EmittedTypes(abi::kKernelLaunch),
            abi::kKernelLaunch | abi::kGroupApi);
}

// In-process: the emulator loads pitstop (v5), pitstop chains the counter.
TEST(ChainTest, BothPluginsGetEveryEventTheyAskedFor) {
  const std::string sock = TempSocketPath("chain");
  auto receiver = TelemetryReceiver::Start(sock);
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  setenv("PITSTOP_AGENT_SOCKET", sock.c_str(), 1);
  setenv("PITSTOP_FINALIZE_TIMEOUT_MS", "20000", 1);
  setenv("PITSTOP_CHAIN_PROFILER_PLUGIN", PITSTOP_COUNTER_PLUGIN, 1);
  // Coll | KernelLaunch: pitstop's default set adds P2p, ProxyOp, KernelCh.
  setenv("COUNTER_MASK", "2050", 1);
  auto emu = Emulator::Create({.plugin = "pitstop", .force_version = 5});
  ASSERT_TRUE(emu.ok()) << emu.status();
  auto comm = (*emu)->InitComm({.comm_hash = 0xC4A1,
                                .name = "chained",
                                .n_ranks = 4,
                                .rank = 1,
                                .n_nodes = 1});
  ASSERT_TRUE(comm.ok()) << comm.status();
  // NCCL's mask is the union.
  EXPECT_EQ((*emu)->activation_mask() & 0x84e, 0x84e);
  constexpr int kColls = 20;
  for (int i = 0; i < kColls; ++i) {
    OpSpec spec;
    spec.seq_number = i;
    (*comm)->RunCollective(spec, {.kernel_us = 0});
  }
  OpSpec send;
  send.p2p = true;
  send.func = "Send";
  send.peer = 2;
  (*comm)->RunCollective(send, {.kernel_us = 0});
  EXPECT_EQ((*comm)->Finalize(), 0);

  // pitstop: everything as without a chain.
  ASSERT_TRUE((*receiver)->WaitFor(
      [](const auto& s) {
        return HasGoodbye(s, v1::ProcessGoodbye::REASON_FINALIZE);
      },
      absl::Seconds(60)));
  const auto streams = (*receiver)->Streams();
  EXPECT_EQ(AllOps(streams).size(), kColls + 1u);
  EXPECT_EQ(AllCompletions(streams).size(), kColls + 1u);
  EXPECT_FALSE(AllKernels(streams).empty());
  EXPECT_FALSE(AllProxyOps(streams).empty());

  // The counter: its own events only, its own handles only, all stopped.
  void* lib = dlopen(PITSTOP_COUNTER_PLUGIN, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr) << "pitstop did not load the chained plugin";
  auto get =
      reinterpret_cast<void (*)(uint64_t*)>(dlsym(lib, "counter_get_stats"));
  ASSERT_NE(get, nullptr);
  uint64_t st[42] = {};
  get(st);
  const uint64_t* starts = st;
  const uint64_t* stops = st + 16;
  const uint64_t* o = st + 32;
  EXPECT_EQ(o[0], 1u) << "inits";
  EXPECT_EQ(o[1], 1u) << "finalizes";
  EXPECT_EQ(o[4], 0u) << "events of types it did not ask for";
  EXPECT_EQ(o[5], 0u) << "parents that are not its own handles";
  EXPECT_EQ(o[6], 0u) << "stops/states with handles not its own";
  EXPECT_EQ(o[7], 0u) << "double stops";
  EXPECT_EQ(starts[Bit(abi::kColl)], static_cast<uint64_t>(kColls));
  EXPECT_EQ(o[8], static_cast<uint64_t>(kColls)) << "Coll under its CollApi";
  EXPECT_GT(starts[Bit(abi::kKernelLaunch)], 0u);
  EXPECT_EQ(starts[Bit(abi::kP2p)], 0u);
  EXPECT_EQ(starts[Bit(abi::kKernelCh)], 0u);
  EXPECT_EQ(starts[Bit(abi::kProxyOp)], 0u);
  for (int b = 0; b < 16; ++b) {
    EXPECT_EQ(stops[b], starts[b]) << "type bit " << b;
  }
}

// A chained plugin whose init fails: one log line, pitstop unaffected. In
// a child process (the chain is loaded once per process), found by name
// (libnccl-profiler-counter.so on LD_LIBRARY_PATH, NCCL's rule).
TEST(ChainTest, FailingChainedPluginIsLoggedOnceAndDropped) {
  const std::string sock = TempSocketPath("chainf");
  auto receiver = TelemetryReceiver::Start(sock);
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  const std::string err = sock + ".err";
  const int status =
      RunChild({PITSTOP_EMULATED_RANK, "--ops", "12", "--end", "finalize"},
               {{"PITSTOP_AGENT_SOCKET", sock},
                {"PITSTOP_FINALIZE_TIMEOUT_MS", "20000"},
                {"PITSTOP_CHAIN_PROFILER_PLUGIN", "counter"},
                {"LD_LIBRARY_PATH", PITSTOP_COUNTER_DIR},
                {"COUNTER_FAIL_INIT", "1"}},
               err);
  EXPECT_TRUE(ExitedWith(status, 0));
  ASSERT_TRUE((*receiver)->WaitFor(
      [](const auto& s) {
        return HasGoodbye(s, v1::ProcessGoodbye::REASON_FINALIZE);
      },
      absl::Seconds(60)));
  EXPECT_EQ(AllOps((*receiver)->Streams()).size(), 12u);
  std::ifstream in(err);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string log = ss.str();
  unlink(err.c_str());
  EXPECT_THAT(log, ::testing::HasSubstr("chaining profiler plugin "
                                        "libnccl-profiler-counter.so"));
  size_t n = 0;
  for (size_t at = log.find("dropped it"); at != std::string::npos;
       at = log.find("dropped it", at + 1)) {
    ++n;
  }
  EXPECT_EQ(n, 1u) << log;
}

}  // namespace
}  // namespace pitstop::emu
