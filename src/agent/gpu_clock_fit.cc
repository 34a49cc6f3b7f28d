#include "src/agent/gpu_clock_fit.h"

#include <algorithm>

namespace pitstop::agent {

void GpuClockFit::AddSample(uint64_t cpu_ns, uint64_t gpu_ns) {
  if (cpu_ns == 0 || gpu_ns == 0) return;
  const int64_t d = static_cast<int64_t>(cpu_ns - gpu_ns);
  current_min_ = std::min(current_min_, d);
  ++samples_;
  if (++in_current_ >= window_) {
    previous_min_ = current_min_;
    current_min_ = kNone;
    in_current_ = 0;
  }
}

int64_t GpuClockFit::offset_ns() const {
  const int64_t m = std::min(current_min_, previous_min_);
  return m == kNone ? 0 : m;
}

uint64_t GpuClockFit::ToCpu(uint64_t gpu_ns) const {
  if (gpu_ns == 0 || !fitted()) return 0;
  return gpu_ns + static_cast<uint64_t>(offset_ns());
}

}  // namespace pitstop::agent
