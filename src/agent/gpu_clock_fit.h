// Fits the offset between a GPU's %globaltimer and the node's CLOCK_MONOTONIC
// from (cpu observation, gpu timer) pairs.
//
// The library observes a kernel channel's start/stop on the CPU some time
// after the GPU timer was read, never before, so cpu - gpu = offset + delay
// with delay >= 0. The lower envelope (minimum of cpu - gpu) is the best
// estimate of the offset. To follow slow drift the minimum is taken over two
// rotating windows of `window` samples each.
//
// Not thread-safe; owned by one stream's join state.
#ifndef PITSTOP_AGENT_GPU_CLOCK_FIT_H_
#define PITSTOP_AGENT_GPU_CLOCK_FIT_H_

#include <cstdint>
#include <limits>

namespace pitstop::agent {

class GpuClockFit {
 public:
  explicit GpuClockFit(uint32_t window = 4096) : window_(window) {}

  // Adds one pair; either value 0 (unknown) is ignored. Units: ns.
  void AddSample(uint64_t cpu_ns, uint64_t gpu_ns);

  // True once at least one sample was added.
  bool fitted() const { return samples_ > 0; }
  // Current offset estimate: cpu = gpu + offset_ns() (ns, may be negative).
  int64_t offset_ns() const;
  // Converts a GPU timer value to node monotonic ns; 0 stays 0 and so does
  // any value while no offset is fitted.
  uint64_t ToCpu(uint64_t gpu_ns) const;
  uint64_t samples() const { return samples_; }

 private:
  static constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  uint32_t window_;
  uint32_t in_current_ = 0;
  int64_t current_min_ = kNone;
  int64_t previous_min_ = kNone;
  uint64_t samples_ = 0;
};

}  // namespace pitstop::agent

#endif  // PITSTOP_AGENT_GPU_CLOCK_FIT_H_
