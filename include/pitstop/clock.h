// Injectable clocks. Detectors, timeouts and batching take a Clock* so tests
// drive time deterministically with FakeClock instead of sleeping.
//
// Two time lines:
//   - Now(): wall clock (absl::Time), for records shown to people.
//   - MonotonicNanos(): CLOCK_MONOTONIC in ns, for durations and for the
//     *_cpu_ns timestamps of the telemetry protocol.
#ifndef PITSTOP_CLOCK_H_
#define PITSTOP_CLOCK_H_

#include <cstdint>
#include <memory>

#include "absl/time/time.h"
#include "pitstop/sync.h"

namespace pitstop {

// Thread-safe: every implementation may be called from any thread.
class Clock {
 public:
  virtual ~Clock() = default;

  // Wall-clock time.
  virtual absl::Time Now() const = 0;
  // Monotonic time in nanoseconds (CLOCK_MONOTONIC for the real clock).
  virtual int64_t MonotonicNanos() const = 0;
  // Blocks the calling thread for `d` of this clock's time. FakeClock
  // returns at once after advancing itself.
  virtual void SleepFor(absl::Duration d) = 0;

  // Returns the process's real clock (stateless; shared by all callers).
  static Clock* Real();
};

// A clock that moves only when told. Starts at `start` wall time and 1 s
// monotonic (never 0, which the protocol uses for "unknown").
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000));

  absl::Time Now() const override;
  int64_t MonotonicNanos() const override;
  // Advances the clock by `d` (does not block).
  void SleepFor(absl::Duration d) override;

  // Moves both time lines forward by `d`. REQUIRES: d >= 0.
  void Advance(absl::Duration d);

 private:
  mutable Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  int64_t monotonic_ns_ ABSL_GUARDED_BY(mu_);
};

// Reads CLOCK_MONOTONIC directly (ns). For code that must not go through a
// virtual call; equals Clock::Real()->MonotonicNanos().
int64_t MonotonicNowNs();

}  // namespace pitstop

#endif  // PITSTOP_CLOCK_H_
