// The hot path's clock: it stays on CLOCK_MONOTONIC, never goes backwards,
// and a reader never waits for the exporter thread in the middle of an
// update (a preempted writer once made NCCL threads spin for milliseconds).
#include "plugin/cpu_clock.h"

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "gtest/gtest.h"

namespace pitstop::plugin {

class CpuClockTestPeer {
 public:
  // Leaves the sequence odd, as a writer preempted between its stores does.
  static void BeginUpdate() { CpuClock::seq_.store(CpuClock::seq_.load() + 1); }
  static void EndUpdate() { CpuClock::seq_.store(CpuClock::seq_.load() + 1); }
};

namespace {

class CpuClockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CpuClock::Calibrate(true)) {
      GTEST_SKIP() << "SKIPPED LOUDLY: this CPU has no invariant TSC; the "
                      "clock is clock_gettime itself";
    }
  }
};

TEST_F(CpuClockTest, StaysOnClockMonotonicAndNeverGoesBackwards) {
  uint64_t last = 0;
  for (int i = 0; i < 200000; ++i) {
    const uint64_t before = MonotonicNs();
    const uint64_t now = CpuClock::NowNs();
    const uint64_t after = MonotonicNs();
    ASSERT_GE(now, last) << "went backwards at read " << i;
    last = now;
    // Calibration error plus a re-anchor's slew: far below a microsecond
    // in practice; 50 us leaves room for a preemption between the reads.
    ASSERT_GE(now + 50000, before) << "read " << i;
    ASSERT_LE(now, after + 50000) << "read " << i;
    if (i % 50000 == 0) CpuClock::Anchor();
  }
}

TEST_F(CpuClockTest, ReaderDoesNotWaitForAWriterStuckMidUpdate) {
  CpuClockTestPeer::BeginUpdate();
  const uint64_t before = MonotonicNs();
  auto reading = std::async(std::launch::async, [] {
    uint64_t v = 0;
    for (int i = 0; i < 1000; ++i) v = CpuClock::NowNs();
    return v;
  });
  const bool returned =
      reading.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  CpuClockTestPeer::EndUpdate();  // lets a spinning reader finish, too
  ASSERT_TRUE(returned) << "NowNs() spun while the update was in progress";
  const uint64_t v = reading.get();
  EXPECT_GE(v, before);
  EXPECT_LE(v, MonotonicNs());
}

}  // namespace
}  // namespace pitstop::plugin
