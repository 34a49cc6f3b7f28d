#include "pitstop/clock.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace pitstop {
namespace {

TEST(ClockTest, RealMonotonicNeverGoesBack) {
  Clock* clock = Clock::Real();
  int64_t prev = clock->MonotonicNanos();
  for (int i = 0; i < 1000; ++i) {
    const int64_t now = clock->MonotonicNanos();
    ASSERT_GE(now, prev);
    prev = now;
  }
  EXPECT_GT(prev, 0);
}

TEST(ClockTest, RealSleepAdvancesMonotonic) {
  Clock* clock = Clock::Real();
  const int64_t before = clock->MonotonicNanos();
  clock->SleepFor(absl::Milliseconds(5));
  EXPECT_GE(clock->MonotonicNanos() - before, 5'000'000);
}

TEST(FakeClockTest, MovesOnlyWhenAdvanced) {
  FakeClock clock(absl::FromUnixSeconds(100));
  const int64_t mono = clock.MonotonicNanos();
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(100));
  EXPECT_EQ(clock.MonotonicNanos(), mono);
  clock.Advance(absl::Milliseconds(1500));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(100) + absl::Milliseconds(1500));
  EXPECT_EQ(clock.MonotonicNanos() - mono, 1'500'000'000);
}

TEST(FakeClockTest, SleepAdvancesAndNegativeIsIgnored) {
  FakeClock clock;
  const int64_t mono = clock.MonotonicNanos();
  EXPECT_GT(mono, 0);
  clock.SleepFor(absl::Seconds(2));
  clock.Advance(-absl::Seconds(1));
  EXPECT_EQ(clock.MonotonicNanos() - mono, 2'000'000'000);
}

TEST(FakeClockTest, ConcurrentAdvancesAllCount) {
  FakeClock clock;
  const int64_t start = clock.MonotonicNanos();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&clock] {
      for (int i = 0; i < 1000; ++i) clock.Advance(absl::Nanoseconds(1));
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(clock.MonotonicNanos() - start, 4000);
}

}  // namespace
}  // namespace pitstop
