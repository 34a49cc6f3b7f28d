// The hot path's clock: CLOCK_MONOTONIC nanoseconds from one read of the
// invariant TSC (a few ns, no vDSO call), or clock_gettime where the CPU has
// no invariant TSC (or PITSTOP_CLOCK=monotonic).
//
// ns = base_ns + ((tsc - base_tsc) * mult) >> 32, with (base, mult) in a
// seqlock. Calibrate() (at the first profiler init) measures the TSC rate
// against CLOCK_MONOTONIC over a few milliseconds; Anchor() (the exporter
// thread, about once a second) re-measures it and slews towards
// CLOCK_MONOTONIC so errors never grow (like NTP: the line stays continuous
// and increasing, the next period absorbs the offset). Records therefore
// stay in the node's CLOCK_MONOTONIC domain, which the agent relies on.
//
// Threads: NowNs from any thread (lock-free); Calibrate/Anchor from one
// thread at a time (the runtime's init, then the exporter).
#ifndef PITSTOP_PLUGIN_CPU_CLOCK_H_
#define PITSTOP_PLUGIN_CPU_CLOCK_H_

#include <time.h>

#include <atomic>
#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace pitstop::plugin {

inline uint64_t MonotonicNs() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull +
         static_cast<uint64_t>(ts.tv_nsec);
}

class CpuClock {
 public:
  // Hot path.
  static uint64_t NowNs() noexcept {
#if defined(__x86_64__)
    if (enabled_.load(std::memory_order_relaxed)) {
      // Seqlock without fences (TSan does not model them): the fields are
      // stored with release after the odd sequence number, so seeing a new
      // field means the second load sees a changed sequence. A reader never
      // retries: the writer (the exporter thread) may be preempted in the
      // middle of an update for milliseconds on a loaded machine, and an
      // NCCL thread must not spin on it. It reads CLOCK_MONOTONIC instead,
      // the line's own reference, once.
      const uint32_t s1 = seq_.load(std::memory_order_acquire);
      const uint64_t base_tsc = base_tsc_.load(std::memory_order_acquire);
      const uint64_t base_ns = base_ns_.load(std::memory_order_acquire);
      const uint64_t mult = mult_.load(std::memory_order_acquire);
      if ((s1 & 1) == 0 && seq_.load(std::memory_order_relaxed) == s1) {
        const uint64_t tsc = __rdtsc();
        const uint64_t d = tsc > base_tsc ? tsc - base_tsc : 0;
        return base_ns + static_cast<uint64_t>(
                             (static_cast<unsigned __int128>(d) * mult) >> 32);
      }
    }
#endif
    return MonotonicNs();
  }

  // Measures the TSC against CLOCK_MONOTONIC (about `window_ns`) and turns
  // the TSC path on if the CPU has an invariant TSC. `allow` false keeps
  // clock_gettime. Returns whether the TSC is used.
  static bool Calibrate(bool allow, uint64_t window_ns = 5000000) noexcept;
  // Re-measures and slews (exporter thread, ~1/s). No-op without TSC.
  static void Anchor() noexcept;
  static bool uses_tsc() { return enabled_.load(std::memory_order_relaxed); }
  // Whether this CPU advertises an invariant TSC (CPUID 0x80000007 EDX[8]).
  static bool HasInvariantTsc() noexcept;

 private:
  friend class CpuClockTestPeer;
  static void Publish(uint64_t base_tsc, uint64_t base_ns,
                      uint64_t mult) noexcept;
  static inline std::atomic<bool> enabled_{false};
  static inline std::atomic<uint32_t> seq_{0};
  static inline std::atomic<uint64_t> base_tsc_{0};
  static inline std::atomic<uint64_t> base_ns_{0};
  static inline std::atomic<uint64_t> mult_{0};  // ns per tick << 32
  // Anchor state (calibrating thread only).
  static inline uint64_t last_tsc_ = 0;
  static inline uint64_t last_mono_ = 0;
};

}  // namespace pitstop::plugin

#endif  // PITSTOP_PLUGIN_CPU_CLOCK_H_
