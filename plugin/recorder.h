// The hot path: turns profiler callbacks (already decoded from a version's
// descriptor by exports.cc) into handles and Records.
//
// Every method is noexcept and, after construction, takes no lock, makes no
// allocation and no system call (the clock is the TSC, cpu_clock.h; or
// clock_gettime(CLOCK_MONOTONIC) through the vDSO where there is none).
// One clock read per event that needs a CPU time; a KernelCh with GPU
// timers at start and stop needs none (a sample for the agent's clock fit
// every kFitSampleGpuNs of GPU time per thread, and the completion time when
// its stop completes the op, excepted).
// Handles come from preallocated pools; records go to the calling thread's
// ring. Full ring / empty pool: the event is dropped and counted.
//
// Threads: any NCCL thread (user, CUDA host-task, proxy). A handle is used by
// the threads NCCL passes it to, with NCCL's own ordering between them.
#ifndef PITSTOP_PLUGIN_RECORDER_H_
#define PITSTOP_PLUGIN_RECORDER_H_

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <ctime>

#include "plugin/comm_registry.h"
#include "plugin/cpu_clock.h"
#include "plugin/event_pool.h"
#include "plugin/record.h"
#include "plugin/ring.h"

namespace pitstop::plugin {

// CLOCK_MONOTONIC ns: one TSC read once calibrated (cpu_clock.h).
inline uint64_t NowCpuNs() noexcept { return CpuClock::NowNs(); }

// Coll / P2p start, version-independent.
struct OpStart {
  bool p2p = false;
  uint64_t comm_hash = 0;  // v3 descriptors carry it; 0 = the context's
  int rank = 0;
  uint64_t seq_number = 0;
  const char* func = nullptr;
  size_t count = 0;
  int root = -1;
  int peer = -1;
  const char* datatype = nullptr;
  uint8_t n_channels = 0;
  uint8_t n_warps = 0;
  const char* algo = nullptr;
  const char* proto = nullptr;
};

struct ProxyOpStart {
  pid_t pid = 0;
  uint8_t channel = 0;
  int peer = -1;
  int n_steps = 0;
  int chunk_size = 0;
  bool is_send = false;
};

// GPU time between two CPU clock samples taken at kernel channel stops that
// carry GPU timers, per thread: at most 20,000 clock reads a second where
// there were one per stop, and the agent's fit (a minimum over 4,096
// samples) still spans at most ~0.2 s of samples at full rate.
inline constexpr uint64_t kFitSampleGpuNs = 50'000;

struct PoolSizes {
  uint32_t api = 4096;
  uint32_t op = 8192;
  uint32_t proxy_op = 16384;
  uint32_t proxy_step = 16384;
  uint32_t kernel = 8192;
  uint32_t net = 4096;
};

class Recorder {
 public:
  // `rings` must outlive the recorder. `self_pid`: getpid() of this process,
  // cached (PXN checks must not make a system call).
  Recorder(RingSet* rings, pid_t self_pid, const PoolSizes& sizes = {});
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // Each Start* returns the handle for NCCL, or nullptr (not recorded).
  // `ctx` may be null (failed init): nothing is recorded.
  void* StartApi(CommContext* ctx, bool p2p, bool graph_captured) noexcept;
  // `parent`: the CollApi/P2pApi handle (v5+) or a Group handle / nullptr.
  void* StartOp(CommContext* ctx, void* parent, const OpStart& a) noexcept;
  void* StartProxyOp(CommContext* ctx, void* parent,
                     const ProxyOpStart& a) noexcept;
  void* StartProxyStep(CommContext* ctx, void* parent, int step) noexcept;
  // gpu_ns: kernelCh.pTimer (0 when the ABI has none).
  void* StartKernelCh(CommContext* ctx, void* parent, uint8_t channel,
                      uint64_t gpu_ns) noexcept;
  // `data`: the net plugin's event struct (IB/socket v1), may be null.
  void* StartNetPlugin(CommContext* ctx, void* parent, int64_t id,
                       const void* data) noexcept;
  void Stop(void* handle) noexcept;
  // `arg`: transSize (ProxyStep states) or pTimer (KernelChStop).
  void RecordState(void* handle, int state, uint64_t arg) noexcept;
  // A callback we do not record (NULL handle, unknown type, no context).
  void CountIgnored() noexcept {
    ignored_.fetch_add(1, std::memory_order_relaxed);
  }

  // Counters for DropCounters (any thread).
  uint64_t pool_exhausted() const {
    return pool_exhausted_.load(std::memory_order_relaxed);
  }
  uint64_t ignored() const { return ignored_.load(std::memory_order_relaxed); }
  RingSet* rings() const { return rings_; }
  // After fork() in the child (single-threaded): the new pid, counters at 0.
  void ResetAfterFork(pid_t pid) noexcept {
    self_pid_ = pid;
    pool_exhausted_.store(0);
    ignored_.store(0);
  }

 private:
  struct ApiSlot;
  struct OpSlot;
  struct ProxyOpSlot;
  struct StepSlot;
  struct KernelSlot;
  struct NetSlot;

  Record* Reserve(Ring** ring) noexcept;
  OpSlot* AsOp(void* p) const noexcept;
  void StopOp(OpSlot* s) noexcept;
  // Drops a child's reference on `parent`; a stopped op left without
  // references is completed (the clock is read there if `now` is 0).
  void DetachChild(OpSlot* parent, uint64_t now) noexcept;
  // The reference drop itself: true if the caller must now emit the
  // completion (FinishCompletion) with the header word it set (*word).
  bool DropRef(OpSlot* parent, uint32_t* word) noexcept;
  // Counts a child's reference on `parent` (one locked add); false (and
  // counted) if the parent has implausibly many children in flight.
  bool AttachChild(OpSlot* parent) noexcept;
  void EmitCompletion(OpSlot* s, uint64_t now, uint32_t children) noexcept;
  // Emits the completion of `s`, whose header the caller moved to `word`
  // (kStopped | kStopping, no references left), and releases the slot;
  // then the completion of late children that stopped meanwhile, if any.
  void FinishCompletion(OpSlot* s, uint32_t word, uint64_t now) noexcept;
  void StopStep(StepSlot* s) noexcept;
  void StopKernel(KernelSlot* s) noexcept;
  // Whether a kernel channel stop at `stop_gpu_ns` should read the CPU clock
  // as a (cpu, gpu) sample for the agent's offset fit: the first on each
  // thread, then once the GPU timer moved kFitSampleGpuNs from the last one.
  static bool FitSampleDue(Ring* ring, uint64_t stop_gpu_ns) noexcept;

  friend class RecorderTestPeer;

  RingSet* const rings_;
  pid_t self_pid_;
  SlotPool<ApiSlot>* api_;
  SlotPool<OpSlot>* op_;
  SlotPool<ProxyOpSlot>* proxy_op_;
  SlotPool<StepSlot>* step_;
  SlotPool<KernelSlot>* kernel_;
  SlotPool<NetSlot>* net_;
  std::atomic<uint32_t> pinned_api_{0};
  std::atomic<uint64_t> pool_exhausted_{0};
  std::atomic<uint64_t> ignored_{0};

 public:
  ~Recorder();
};

}  // namespace pitstop::plugin

#endif  // PITSTOP_PLUGIN_RECORDER_H_
