// Ring capacity and environment validation. Runs with a 64-record ring and
// bad/good mask variables set before the library reads its environment
// (its own test binary: the library reads the environment once).
#include <stdlib.h>
#include <unistd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/nccl/emulator/nccl_emulator.h"
#include "tests/harness/telemetry_receiver.h"
#include "tests/plugin/test_util.h"

namespace pitstop::emu {
namespace {

// Before main: the library reads these at its first init.
const bool kEnvSet = [] {
  setenv("PITSTOP_RING_CAPACITY", "64", 1);
  setenv("PITSTOP_EVENT_MASK", "coll|bogus", 1);  // invalid: default kept
  setenv("PITSTOP_DEEP_EVENT_MASK", "proxystep", 1);
  // Generous flush bound: sanitizer builds connect slowly under load.
  setenv("PITSTOP_FINALIZE_TIMEOUT_MS", "20000", 1);
  return true;
}();

TEST(SmallRingTest, NothingLostBelowCapacityEveryDropCountedAbove) {
  ASSERT_TRUE(kEnvSet);
  const std::string sock = TempSocketPath("ring");
  auto receiver = TelemetryReceiver::Start(sock);
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  setenv("PITSTOP_AGENT_SOCKET", sock.c_str(), 1);
  auto emu = Emulator::Create({.plugin = "pitstop"});
  ASSERT_TRUE(emu.ok()) << emu.status();

  ::testing::internal::CaptureStderr();
  auto comm = (*emu)->InitComm({.comm_hash = 0x64, .n_ranks = 2, .rank = 0});
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(comm.ok()) << comm.status();
  // The bad value was reported through NCCL's logger; the default is used.
  EXPECT_THAT(log, ::testing::HasSubstr("WARN"));
  EXPECT_THAT(log, ::testing::HasSubstr("PITSTOP_EVENT_MASK='coll|bogus'"));
  EXPECT_EQ((*emu)->activation_mask(), 0x2 | 0x4 | 0x8 | 0x40);

  // Below capacity: 50 op records (no children) in a burst all arrive.
  for (int i = 0; i < 50; ++i) {
    OpSpec spec;
    spec.seq_number = i;
    (*comm)->StartOp(spec)->EnqueueDone();
  }
  ASSERT_TRUE((*receiver)->WaitFor(
      [](const auto& s) { return AllOps(s).size() == 50; }, absl::Seconds(30)));
  EXPECT_EQ(LastDrops((*receiver)->Streams()).ring_full(), 0u);

  // Above capacity: a burst of 5000 outruns the exporter; every record
  // either arrives or is counted.
  constexpr int kBurst = 5000;
  for (int i = 0; i < kBurst; ++i) {
    OpSpec spec;
    spec.seq_number = 1000 + i;
    (*comm)->StartOp(spec)->EnqueueDone();
  }
  (*comm)->Finalize();
  ASSERT_TRUE((*receiver)->WaitFor(
      [](const auto& s) {
        return HasGoodbye(s, v1::ProcessGoodbye::REASON_FINALIZE);
      },
      absl::Seconds(30)));
  const auto streams = (*receiver)->Streams();
  const auto drops = LastDrops(streams);
  const uint64_t arrived = AllOps(streams).size() - 50;
  EXPECT_GT(drops.ring_full(), 0u);
  EXPECT_EQ(arrived + drops.ring_full(), static_cast<uint64_t>(kBurst));
  EXPECT_EQ(drops.events_recorded(), 50u + arrived);
  EXPECT_EQ(drops.export_dropped(), 0u);
}

}  // namespace
}  // namespace pitstop::emu
