#include "pitstop/clock.h"

#include <time.h>

#include <thread>

namespace pitstop {
namespace {

class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  int64_t MonotonicNanos() const override { return MonotonicNowNs(); }
  void SleepFor(absl::Duration d) override {
    std::this_thread::sleep_for(absl::ToChronoNanoseconds(d));
  }
};

}  // namespace

int64_t MonotonicNowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

Clock* Clock::Real() {
  // Stateless, so sharing one instance is not a singleton in the harmful
  // sense: it holds no data that tests would need to reset.
  static RealClock* const kClock = new RealClock();
  return kClock;
}

FakeClock::FakeClock(absl::Time start)
    : now_(start), monotonic_ns_(1'000'000'000) {}

absl::Time FakeClock::Now() const {
  MutexLock lock(&mu_);
  return now_;
}

int64_t FakeClock::MonotonicNanos() const {
  MutexLock lock(&mu_);
  return monotonic_ns_;
}

void FakeClock::SleepFor(absl::Duration d) { Advance(d); }

void FakeClock::Advance(absl::Duration d) {
  if (d < absl::ZeroDuration()) return;
  MutexLock lock(&mu_);
  now_ += d;
  monotonic_ns_ += absl::ToInt64Nanoseconds(d);
}

}  // namespace pitstop
