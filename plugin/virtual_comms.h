// Communicator virtualisation in the interposer (PITSTOP_VIRTUALIZE_COMMS=1;
// docs/plugin.md "Communicator virtualisation"): the application gets a
// handle of the process's CommTable from every creating call, and every
// interposed entry point that takes a communicator maps it to the real one
// here. Off by default: then no handle exists and every call passes its
// argument through unchanged.
//
// Also the interposer's shared plumbing (real-symbol lookup, our ABI types).
//
// Threads: the hot-path helpers (OnComm, OnQuery) from any thread, without
// locks or allocation; group tracking is per thread, like NCCL's groups.
#ifndef PITSTOP_PLUGIN_VIRTUAL_COMMS_H_
#define PITSTOP_PLUGIN_VIRTUAL_COMMS_H_

#include <dlfcn.h>

#include <atomic>

#include "plugin/abi/profiler_common.h"
#include "plugin/comm_table.h"
#include "plugin/shadow_record.h"
#include "plugin/stats.h"

namespace pitstop::plugin {

using abi::NcclResult;

// Our declarations of NCCL's public types (facts: nccl-plugin-abi.md §16).
struct NcclCommOpaque;
using NcclComm = NcclCommOpaque*;
struct NcclUniqueId {
  char internal[128];
};
static_assert(sizeof(NcclUniqueId) == 128);
struct NcclConfig;  // ncclConfig_t: passed through untouched

// The real entry point `name` (pncclX), looked up once; null without NCCL.
template <typename Fn>
Fn Real(const char* name, std::atomic<void*>* cache) noexcept {
  void* p = cache->load(std::memory_order_acquire);
  if (p == nullptr) {
    p = dlsym(RTLD_NEXT, name);
    if (p == nullptr) p = dlsym(RTLD_DEFAULT, name);
    if (p != nullptr) cache->store(p, std::memory_order_release);
  }
  return reinterpret_cast<Fn>(p);
}

// The process's handle table (constant-initialised: usable from any
// constructor). Empty unless virtualisation is on.
extern CommTable g_comm_table;

// PITSTOP_VIRTUALIZE_COMMS=1 (read once; anything else is off, a value
// other than 0/1/empty is warned about on stderr).
bool VirtualizationEnabled() noexcept;

// After a creating call that returned `r`: when virtualisation is on and r
// is ncclSuccess or ncclInProgress, replaces each non-null comms[i] by a
// new handle (membership: `rank`+i / `n_ranks`, or asked from the real
// comm when -1; `comm_hash`: NCCL's commHash of comms[0], 0 if unknown).
// Logs the NCCL capabilities once and enables migration (plugin/
// rebuild.h). A full table leaves the real comm in place.
void VirtualizeCreated(NcclComm* comms, int n, int rank, int n_ranks,
                       NcclResult r, uint64_t comm_hash) noexcept;

// PITSTOP_MIGRATION_ROLE=joiner (read once; empty or unset: not a joiner;
// anything else is warned about on stderr and ignored).
bool MigrationJoiner() noexcept;
// A joiner's creating call: hands out a sandbox handle (no NCCL call; its
// comm hash is the one the job's communicator has, `comm_hash`) that the
// migration binds to the rebuilt communicator at the join. ncclSuccess, or
// ncclInvalidUsage when virtualisation is off (a joiner needs it) or the
// table is full.
NcclResult CreateSandbox(NcclComm* comm, int rank, int n_ranks,
                         uint64_t comm_hash) noexcept;

// Ends the use of an acquired handle: inside an open group an enqueued
// operation's hold lasts until the outermost ncclGroupEnd (the operation
// runs there), otherwise it ends now.
void EndUse(const void* handle, bool enqueued) noexcept;
// Around the real ncclGroupStart/End (r: what it returned).
void OnGroupStart(NcclResult r) noexcept;
void OnGroupEnd() noexcept;

// A handle that has no communicator: a sandbox (a joiner's, not joined
// yet: ncclInvalidUsage) or released (ncclInvalidArgument). Cold.
NcclResult RefusedHandle(const void* handle) noexcept;

// Runs `call` on the real communicator behind `comm`: a foreign pointer
// (not ours) unchanged, a released handle is ncclInvalidArgument. `enqueued`:
// the call queues an operation (collective, send/recv).
template <typename F>
NcclResult OnCommImpl(NcclComm comm, bool enqueued, F&& call) noexcept {
  if (!g_comm_table.IsHandle(comm)) return call(comm);
  const CommBinding* b = g_comm_table.Acquire(comm);
  if (b == nullptr) return RefusedHandle(comm);
  const NcclResult r = call(static_cast<NcclComm>(b->comm));
  // Counted after the call: a rebuild's switch point is a count at a
  // boundary, when nothing is in flight.
  if (enqueued) g_comm_table.CountEnqueued(comm);
  EndUse(comm, enqueued);
  return r;
}
// Shadow iterations (docs/migration.md "Shadow iterations"). True once a
// virtualised communicator was made with PITSTOP_SHADOW_RECORD set: only
// then do collectives leave the hot path to record their outputs.
extern std::atomic<bool> g_shadow_recording;
// Reads PITSTOP_SHADOW_RECORD / PITSTOP_SHADOW_COLLECTIVES (once) and sets
// g_shadow_recording when a directory is given. Cold (creating calls).
void EnableShadowRecording() noexcept;
// Cold: after `call` (a collective) returned ncclSuccess on the handle's
// communicator `b`, before it is counted: writes its output when it is one
// of the handle's first PITSTOP_SHADOW_COLLECTIVES.
void ShadowRecord(const void* handle, const ShadowCall& call,
                  const CommBinding& b) noexcept;
// Cold: a collective on a handle without a communicator. A sandbox handle
// with PITSTOP_SHADOW_DIR set answers it from the record (ncclSuccess) or
// refuses it (ncclInvalidUsage, counted); anything else: RefusedHandle.
NcclResult ShadowAnswer(const void* handle, const ShadowCall& call) noexcept;
// Cold: ncclCommCount / ncclCommUserRank on a sandbox handle in shadow mode
// answer its membership (the trainer asks before its steps); otherwise `r`.
NcclResult ShadowQuery(const void* handle, int* count, int* rank,
                       NcclResult r) noexcept;
// Shadow answers refused so far (no record, wrong size, bad checksum).
uint64_t ShadowMisses() noexcept;
// True inside ncclGroupStart/End on this thread.
bool InGroup() noexcept;

// A collective: OnComm, plus the shadow paths. `describe` builds the
// ShadowCall and runs only on them, so the hot path adds one relaxed load.
template <typename D, typename F>
NcclResult OnCollective(NcclComm comm, D&& describe, F&& call) noexcept {
  if (!g_comm_table.IsHandle(comm)) return call(comm);
  const CommBinding* b = g_comm_table.Acquire(comm);
  if (b == nullptr) return ShadowAnswer(comm, describe());
  const NcclResult r = call(static_cast<NcclComm>(b->comm));
  if (g_shadow_recording.load(std::memory_order_relaxed)) [[unlikely]] {
    if (r == abi::kNcclSuccess) ShadowRecord(comm, describe(), *b);
  }
  g_comm_table.CountEnqueued(comm);
  EndUse(comm, true);
  return r;
}

template <typename F>
NcclResult OnComm(NcclComm comm, F&& call) noexcept {
  return OnCommImpl(comm, true, call);
}
template <typename F>
NcclResult OnQuery(NcclComm comm, F&& call) noexcept {
  return OnCommImpl(comm, false, call);
}

// The internal rebuild API (not exported to applications): rebinds
// `handle` to `new_comm` (this process's rank `new_rank` of
// `new_n_ranks`) with the next epoch at a quiescent point. See
// CommTable::Swap for what is refused; on success the caller owns the old
// communicator and frees it (ncclCommDestroy, or ncclCommAbort when it
// failed; never both).
SwapOutcome SwapCommunicator(void* handle, void* new_comm, int new_rank,
                             int new_n_ranks) noexcept;
// The handle's current binding; false for a foreign or released handle.
bool DescribeHandle(void* handle, CommBinding* out) noexcept;

}  // namespace pitstop::plugin

#define PITSTOP_EXPORT extern "C" __attribute__((visibility("default")))

// Declares `real`, the pncclX entry point, or returns ncclSystemError.
// Counts the call for PITSTOP_STATS_FILE (plugin/stats.h) first.
#define PITSTOP_REAL(type, name)                                   \
  ::pitstop::plugin::stats::CountInterposed(                       \
      ::pitstop::plugin::stats::Interposed::name);                 \
  static std::atomic<void*> cache_##name{};                        \
  auto real = ::pitstop::plugin::Real<type>(#name, &cache_##name); \
  if (real == nullptr) return ::pitstop::abi::kNcclSystemError

#endif  // PITSTOP_PLUGIN_VIRTUAL_COMMS_H_
