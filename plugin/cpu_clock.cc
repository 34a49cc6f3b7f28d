#include "plugin/cpu_clock.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace pitstop::plugin {
namespace {

#if defined(__x86_64__)
// One (tsc, monotonic) pair with the TSC read right around clock_gettime;
// the tightest of a few tries (an interrupt can fall in between).
void Pair(uint64_t* tsc, uint64_t* mono) {
  uint64_t best = ~uint64_t{0};
  for (int i = 0; i < 5; ++i) {
    const uint64_t a = __rdtsc();
    const uint64_t m = MonotonicNs();
    const uint64_t b = __rdtsc();
    if (b - a < best) {
      best = b - a;
      *tsc = a + (b - a) / 2;
      *mono = m;
    }
  }
}
#endif

}  // namespace

bool CpuClock::HasInvariantTsc() noexcept {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0x80000000u, &a, &b, &c, &d) == 0 || a < 0x80000007u) {
    return false;
  }
  __get_cpuid(0x80000007u, &a, &b, &c, &d);
  return (d & (1u << 8)) != 0;
#else
  return false;
#endif
}

void CpuClock::Publish(uint64_t base_tsc, uint64_t base_ns,
                       uint64_t mult) noexcept {
  const uint32_t s = seq_.load(std::memory_order_relaxed);
  seq_.store(s + 1, std::memory_order_relaxed);
  base_tsc_.store(base_tsc, std::memory_order_release);
  base_ns_.store(base_ns, std::memory_order_release);
  mult_.store(mult, std::memory_order_release);
  seq_.store(s + 2, std::memory_order_release);
}

bool CpuClock::Calibrate(bool allow, uint64_t window_ns) noexcept {
#if defined(__x86_64__)
  if (!allow || !HasInvariantTsc()) {
    enabled_.store(false);
    return false;
  }
  if (enabled_.load()) return true;  // already calibrated (a later init)
  uint64_t t0, m0, t1, m1;
  Pair(&t0, &m0);
  do {
    Pair(&t1, &m1);
  } while (m1 - m0 < window_ns);
  if (t1 <= t0) return false;
  const uint64_t mult = static_cast<uint64_t>(
      (static_cast<unsigned __int128>(m1 - m0) << 32) / (t1 - t0));
  if (mult == 0) return false;
  Publish(t1, m1, mult);
  last_tsc_ = t1;
  last_mono_ = m1;
  enabled_.store(true);
  return true;
#else
  (void)allow;
  (void)window_ns;
  return false;
#endif
}

void CpuClock::Anchor() noexcept {
#if defined(__x86_64__)
  if (!enabled_.load()) return;
  // Several exporters in one process (benchmarks, replay): one anchors.
  static std::atomic<bool> busy{false};
  if (busy.exchange(true, std::memory_order_acquire)) return;
  struct Release {
    ~Release() { busy.store(false, std::memory_order_release); }
  } release;
  uint64_t tsc, mono;
  Pair(&tsc, &mono);
  if (tsc <= last_tsc_ || mono <= last_mono_) return;
  const uint64_t period_ns = mono - last_mono_;
  if (period_ns < 100000000) return;  // measure over >= 100 ms
  // The measured rate over the last period.
  const unsigned __int128 rate =
      (static_cast<unsigned __int128>(period_ns) << 32) / (tsc - last_tsc_);
  // Where our line says we are, and how far that is from CLOCK_MONOTONIC:
  // the next period (about as long as this one) absorbs the difference.
  const uint64_t base_tsc = base_tsc_.load(std::memory_order_relaxed);
  const uint64_t ours =
      base_ns_.load(std::memory_order_relaxed) +
      static_cast<uint64_t>(
          (static_cast<unsigned __int128>(tsc > base_tsc ? tsc - base_tsc : 0) *
           mult_.load(std::memory_order_relaxed)) >>
          32);
  const int64_t error = static_cast<int64_t>(mono - ours);
  const __int128 adjusted =
      static_cast<__int128>(rate) +
      static_cast<__int128>(rate) * error / static_cast<int64_t>(period_ns);
  if (adjusted > 0) {
    Publish(tsc, ours, static_cast<uint64_t>(adjusted));
  }
  last_tsc_ = tsc;
  last_mono_ = mono;
#endif
}

}  // namespace pitstop::plugin
