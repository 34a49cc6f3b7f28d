// Chaining a second profiler plugin (PITSTOP_CHAIN_PROFILER_PLUGIN): NCCL
// loads exactly one profiler, so pitstop loads the user's (NVIDIA's
// Inspector, their own) by NCCL's naming rules (ABI §2.1: the value
// verbatim, then libnccl-profiler-<value>.so unless it has a '/' or looks
// like lib*.so), calls its init with the same arguments for every
// communicator, and passes it every event of the types it asked for with its
// own handles (a pair handle holds both plugins' handles; parents are
// translated), then its finalize. NCCL's mask becomes the union of both
// plugins' masks; each plugin is given only the events its own mask implies
// (ABI §8). A chained plugin whose init fails is logged once and dropped.
//
// The chained plugin must export the profiler version NCCL uses with us
// (v5 may serve a v6 NCCL: same layout, CE events withheld); otherwise it is
// not chained (logged).
//
// Threads: Load once (first init, locked); Start/Stop/Record from any NCCL
// thread (lock-free: a preallocated pair pool); Init/Finalize from NCCL's
// init/destroy threads.
#ifndef PITSTOP_PLUGIN_CHAIN_H_
#define PITSTOP_PLUGIN_CHAIN_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "plugin/abi/profiler_common.h"
#include "plugin/event_pool.h"

namespace pitstop::plugin {

// The handle NCCL holds while a plugin is chained.
struct PairSlot {
  SlotHeader header;
  void* ours = nullptr;
  void* theirs = nullptr;
};

// dlopen candidates for a PITSTOP_CHAIN_PROFILER_PLUGIN value, in order.
std::vector<std::string> ChainCandidates(const std::string& value);

// The event types NCCL emits for a mask (parents implied by children).
uint32_t EmittedTypes(uint32_t mask);

class Chain {
 public:
  // The process-wide chain, or null when none is configured or it could
  // not be loaded (then logged through `log`).
  static Chain* Get() noexcept {
    return active_.load(std::memory_order_acquire);
  }
  // Loads `value` for NCCL's profiler version `version` (first init only).
  static void Load(const std::string& value, int version,
                   void (*log)(const std::string&));

  // Per communicator. `*chain_ctx` receives the chained plugin's context
  // (null if it failed: then it is dropped, logged once).
  void Init(void** chain_ctx, uint64_t comm_id, const char* name, int n_nodes,
            int n_ranks, int rank, abi::NcclLogger logfn,
            uint32_t* chained_mask) noexcept;
  void Finalize(void* chain_ctx) noexcept;

  // Hot path. `descr` is the version's descriptor: start_event forwards a
  // copy whose parent is the chained plugin's own handle.
  bool Wants(uint32_t type) const noexcept {
    return (emitted_.load(std::memory_order_relaxed) & type) != 0;
  }
  void* Start(void* chain_ctx, const void* descr, size_t descr_size,
              void* their_parent) noexcept;
  void Stop(void* their_handle) noexcept;
  void Record(void* their_handle, int state, void* args) noexcept;

  // Pair handles.
  PairSlot* NewPair(void* ours, void* theirs) noexcept;
  PairSlot* AsPair(void* handle) const noexcept {
    return handle != nullptr && pairs_.Owns(handle)
               ? static_cast<PairSlot*>(handle)
               : nullptr;
  }
  void Release(PairSlot* p) noexcept { pairs_.Release(p); }

  // The chained plugin's mask (what it wrote at init or since).
  uint32_t mask() const { return mask_.load(std::memory_order_relaxed); }
  // Re-reads the mask the chained plugin may change at any time.
  void RefreshMask() noexcept;
  bool dropped() const { return dropped_.load(); }

 private:
  Chain() : pairs_(1u << 16) {}
  void Drop(const std::string& why) noexcept;

  static inline std::atomic<Chain*> active_{nullptr};
  int version_ = 0;
  std::string name_;
  void* lib_ = nullptr;
  // The chained plugin's table, as the generic function pointers of one
  // version (all versions share name + 5 pointers; init differs by version).
  void* init_ = nullptr;
  abi::NcclResult (*start_)(void*, void**, void*) = nullptr;
  abi::NcclResult (*stop_)(void*) = nullptr;
  abi::NcclResult (*record_)(void*, int, void*) = nullptr;
  abi::NcclResult (*finalize_)(void*) = nullptr;
  int their_version_ = 0;
  // The int we hand to its init as "NCCL's" mask.
  int their_mask_int_ = 0;
  std::atomic<uint32_t> mask_{0};
  std::atomic<uint32_t> emitted_{0};  // EmittedTypes(mask_), 0 when dropped
  std::atomic<bool> dropped_{false};
  void (*log_)(const std::string&) = nullptr;
  SlotPool<PairSlot> pairs_;
};

}  // namespace pitstop::plugin

#endif  // PITSTOP_PLUGIN_CHAIN_H_
