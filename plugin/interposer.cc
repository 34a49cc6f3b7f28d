// LD_PRELOAD interposer over NCCL's public communicator API.
//
// Each ncclX defined here wins over libnccl's weak ncclX and forwards to the
// strong alias pncclX (found with dlsym; NCCL absent -> ncclSystemError, no
// crash). Around the forwarded call it tells the profiler side (same thread,
// NCCL runs profiler init inside comm creation) the parent communicator, and
// afterwards reports the CUDA device and aborts. With
// PITSTOP_VIRTUALIZE_COMMS=1 the application gets our handles instead of
// the real communicators (virtual_comms.h); the entry points that only use
// a communicator are in interposer_ops.cc. Keep this layer thin.
//
// When preloaded, a constructor points NCCL_PROFILER_PLUGIN at this very
// file unless the user chose another profiler.
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>

#include "pitstop/nic_plan.h"
#include "plugin/abi/profiler_common.h"
#include "plugin/nic_steering.h"
#include "plugin/plugin_sync.h"
#include "plugin/runtime.h"
#include "plugin/virtual_comms.h"

namespace pitstop::plugin {
namespace {

// ncclComm_t -> commHash, learned from profiler init inside creation.
Mutex g_mu;
std::map<NcclComm, uint64_t>* g_comms PLUGIN_GUARDED_BY(g_mu) = nullptr;

uint64_t HashOf(NcclComm comm) {
  MutexLock lock(&g_mu);
  if (g_comms == nullptr) return 0;
  auto it = g_comms->find(comm);
  return it == g_comms->end() ? 0 : it->second;
}

void Forget(NcclComm comm) {
  MutexLock lock(&g_mu);
  if (g_comms != nullptr) g_comms->erase(comm);
}

// What the interposer tells the agent about a failed creation call.
struct CallSite {
  const char* name;  // the NCCL API, e.g. "ncclCommInitRank"
  int n_ranks;       // -1 when the call does not say
  int rank;
};

// A creation call returned an error: a configuration fault of the job
// (NVIDIA/nccl#426), reported with NCCL's last error text.
void ReportFailure(const CallSite& site, NcclResult r, uint64_t parent_hash) {
  using LastErrorFn = const char* (*)(NcclComm);
  static std::atomic<void*> cache{};
  auto last_error = Real<LastErrorFn>("pncclGetLastError", &cache);
  try {
    InitFailure f;
    f.call = site.name;
    f.result = static_cast<int32_t>(r);
    if (last_error != nullptr) {
      if (const char* text = last_error(nullptr); text != nullptr) {
        f.error.assign(text, strnlen(text, 1024));
      }
    }
    f.n_ranks = site.n_ranks;
    f.rank = site.rank;
    f.parent_comm_hash = parent_hash;
    if (Runtime* rt = Runtime::GetOrCreate()) rt->ReportInitFailure(f);
  } catch (...) {
  }
}

// Runs `create` with the thread's InterposerCall set, then records which
// communicators it made and their CUDA devices, or reports its failure.
template <typename F>
NcclResult CreateRecorded(const CallSite& site, uint64_t parent_hash,
                          NcclComm* comms, int n, F&& create) {
  InterposerCall call;
  call.parent_comm_hash = parent_hash;
  InterposerCall*& slot = Runtime::ThreadInterposerCall();
  InterposerCall* prev = slot;
  slot = &call;
  const NcclResult r = create();
  slot = prev;
  if (r != abi::kNcclSuccess && r != abi::kNcclInProgress) {
    ReportFailure(site, r, parent_hash);
    return r;
  }
  if (comms == nullptr) return r;
  using CuDeviceFn = NcclResult (*)(NcclComm, int*);
  static std::atomic<void*> cache{};
  auto cu_device = Real<CuDeviceFn>("pncclCommCuDevice", &cache);
  try {
    for (int i = 0; i < n && i < static_cast<int>(call.created.size()); ++i) {
      if (comms[i] == nullptr) continue;
      const uint64_t hash = call.created[i];
      {
        MutexLock lock(&g_mu);
        if (g_comms == nullptr) g_comms = new std::map<NcclComm, uint64_t>();
        (*g_comms)[comms[i]] = hash;
      }
      CommInfo extra;
      extra.cuda_device = -1;
      extra.source = CommInfo::kInterposer;
      extra.parent_comm_hash = parent_hash;
      int dev = -1;
      if (cu_device != nullptr && r == abi::kNcclSuccess &&
          cu_device(comms[i], &dev) == abi::kNcclSuccess) {
        extra.cuda_device = dev;
      }
      if (Runtime* rt = Runtime::Get()) rt->UpdateComm(hash, extra);
    }
  } catch (...) {
  }
  return r;
}

// Runs `create` with the thread's InterposerCall set (and the node's NIC
// plan applied to it, nic_steering.h: `comm_hash` / `n_ranks` as known
// before the call, 0 = unknown), then records which communicators it made
// and their CUDA devices, or reports its failure.
template <typename F>
NcclResult Create(const CallSite& site, uint64_t parent_hash, NcclComm* comms,
                  int n, uint64_t comm_hash, int n_ranks, F&& create) {
  NicSteering nics = NicSteering::Begin(comm_hash, n_ranks);
  const NcclResult r = CreateRecorded(site, parent_hash, comms, n, create);
  nics.End(r == abi::kNcclInProgress);
  return r;
}

// A split or shrink child's commHash, as its profiler init reported it (0
// when none ran: no profiler, or NCCL_SPLIT_NOCOLOR).
uint64_t ChildHash(const NcclComm* child, NcclResult r) {
  if (child == nullptr || *child == nullptr) return 0;
  if (r != abi::kNcclSuccess && r != abi::kNcclInProgress) return 0;
  return HashOf(*child);
}

uint64_t HashOfId(const NcclUniqueId& id) {
  return nicplan::CommHashOfUniqueId(id.internal, sizeof(id.internal));
}

void MarkAbort(NcclComm comm) {
  const uint64_t hash = HashOf(comm);
  if (Runtime* rt = Runtime::Get(); rt != nullptr && hash != 0) {
    rt->AbortComm(hash);
  }
}

// When preloaded, make NCCL load this file as its profiler (unless the user
// set NCCL_PROFILER_PLUGIN).
__attribute__((constructor)) void OnLoad() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&OnLoad), &info) == 0 ||
      info.dli_fname == nullptr) {
    return;
  }
  const char* preload = std::getenv("LD_PRELOAD");
  if (preload == nullptr) return;
  const char* base = std::strrchr(info.dli_fname, '/');
  base = base != nullptr ? base + 1 : info.dli_fname;
  if (std::strstr(preload, base) == nullptr) return;
  Runtime::MarkPreloaded();
  setenv("NCCL_PROFILER_PLUGIN", info.dli_fname, /*overwrite=*/0);
}

}  // namespace
}  // namespace pitstop::plugin

namespace pp = pitstop::plugin;
using pp::NcclComm;
using pp::NcclConfig;
using pp::NcclResult;
using pp::NcclUniqueId;

PITSTOP_EXPORT NcclResult ncclCommInitRank(NcclComm* comm, int nranks,
                                           NcclUniqueId id, int rank) noexcept {
  using Fn = NcclResult (*)(NcclComm*, int, NcclUniqueId, int);
  if (pp::MigrationJoiner()) {
    return pp::CreateSandbox(comm, rank, nranks, pp::HashOfId(id));
  }
  PITSTOP_REAL(Fn, pncclCommInitRank);
  const NcclResult r = pp::Create({"ncclCommInitRank", nranks, rank}, 0, comm,
                                  1, pp::HashOfId(id), nranks,
                                  [&] { return real(comm, nranks, id, rank); });
  pp::VirtualizeCreated(comm, 1, rank, nranks, r, pp::HashOfId(id));
  return r;
}

PITSTOP_EXPORT NcclResult ncclCommInitRankConfig(NcclComm* comm, int nranks,
                                                 NcclUniqueId id, int rank,
                                                 NcclConfig* config) noexcept {
  using Fn = NcclResult (*)(NcclComm*, int, NcclUniqueId, int, NcclConfig*);
  if (pp::MigrationJoiner()) {
    return pp::CreateSandbox(comm, rank, nranks, pp::HashOfId(id));
  }
  PITSTOP_REAL(Fn, pncclCommInitRankConfig);
  const NcclResult r = pp::Create(
      {"ncclCommInitRankConfig", nranks, rank}, 0, comm, 1, pp::HashOfId(id),
      nranks, [&] { return real(comm, nranks, id, rank, config); });
  pp::VirtualizeCreated(comm, 1, rank, nranks, r, pp::HashOfId(id));
  return r;
}

PITSTOP_EXPORT NcclResult ncclCommInitAll(NcclComm* comms, int ndev,
                                          const int* devlist) noexcept {
  using Fn = NcclResult (*)(NcclComm*, int, const int*);
  PITSTOP_REAL(Fn, pncclCommInitAll);
  const NcclResult r =
      pp::Create({"ncclCommInitAll", ndev, -1}, 0, comms, ndev, 0, ndev,
                 [&] { return real(comms, ndev, devlist); });
  pp::VirtualizeCreated(comms, ndev, 0, ndev, r, 0);
  return r;
}

PITSTOP_EXPORT NcclResult
ncclCommInitRankScalable(NcclComm* comm, int nranks, int myrank, int n_id,
                         NcclUniqueId* ids, NcclConfig* config) noexcept {
  using Fn =
      NcclResult (*)(NcclComm*, int, int, int, NcclUniqueId*, NcclConfig*);
  PITSTOP_REAL(Fn, pncclCommInitRankScalable);
  const uint64_t hash = n_id > 0 && ids != nullptr ? pp::HashOfId(ids[0]) : 0;
  if (pp::MigrationJoiner())
    return pp::CreateSandbox(comm, myrank, nranks, hash);
  const NcclResult r = pp::Create(
      {"ncclCommInitRankScalable", nranks, myrank}, 0, comm, 1, hash, nranks,
      [&] { return real(comm, nranks, myrank, n_id, ids, config); });
  pp::VirtualizeCreated(comm, 1, myrank, nranks, r, hash);
  return r;
}

// Split and shrink run on the parent's real communicator; the child gets a
// handle of its own (membership asked from NCCL).
PITSTOP_EXPORT NcclResult ncclCommSplit(NcclComm comm, int color, int key,
                                        NcclComm* newcomm,
                                        NcclConfig* config) noexcept {
  using Fn = NcclResult (*)(NcclComm, int, int, NcclComm*, NcclConfig*);
  PITSTOP_REAL(Fn, pncclCommSplit);
  return pp::OnQuery(comm, [&](NcclComm parent) {
    const NcclResult r = pp::Create(
        {"ncclCommSplit", -1, -1}, pp::HashOf(parent), newcomm, 1, 0, 0,
        [&] { return real(parent, color, key, newcomm, config); });
    pp::VirtualizeCreated(newcomm, 1, -1, -1, r, pp::ChildHash(newcomm, r));
    return r;
  });
}

PITSTOP_EXPORT NcclResult ncclCommShrink(NcclComm comm, int* exclude_ranks,
                                         int exclude_count, NcclComm* newcomm,
                                         NcclConfig* config,
                                         int shrink_flags) noexcept {
  using Fn = NcclResult (*)(NcclComm, int*, int, NcclComm*, NcclConfig*, int);
  PITSTOP_REAL(Fn, pncclCommShrink);
  return pp::OnQuery(comm, [&](NcclComm parent) {
    const NcclResult r = pp::Create(
        {"ncclCommShrink", -1, -1}, pp::HashOf(parent), newcomm, 1, 0, 0, [&] {
          return real(parent, exclude_ranks, exclude_count, newcomm, config,
                      shrink_flags);
        });
    pp::VirtualizeCreated(newcomm, 1, -1, -1, r, pp::ChildHash(newcomm, r));
    return r;
  });
}

PITSTOP_EXPORT NcclResult ncclCommFinalize(NcclComm comm) noexcept {
  using Fn = NcclResult (*)(NcclComm);
  PITSTOP_REAL(Fn, pncclCommFinalize);
  return pp::OnQuery(comm, [&](NcclComm c) { return real(c); });
}

// A sandbox handle (a migration joiner's, never joined) has no communicator:
// destroying or aborting it only releases it.
// Destroy and abort release the handle before the real call, so a
// concurrent rebuild can no longer swap the communicator out and free it a
// second time; a released handle is ncclInvalidArgument and never reaches
// NCCL (an aborted communicator is gone: destroying it would be a
// use-after-free).
PITSTOP_EXPORT NcclResult ncclCommDestroy(NcclComm comm) noexcept {
  using Fn = NcclResult (*)(NcclComm);
  if (pp::g_comm_table.ReleaseSandbox(comm)) return pitstop::abi::kNcclSuccess;
  PITSTOP_REAL(Fn, pncclCommDestroy);
  if (pp::g_comm_table.IsHandle(comm)) {
    comm = static_cast<NcclComm>(pp::g_comm_table.Unbind(comm));
    if (comm == nullptr) return pitstop::abi::kNcclInvalidArgument;
  }
  const NcclResult r = real(comm);
  pp::Forget(comm);
  return r;
}

PITSTOP_EXPORT NcclResult ncclCommAbort(NcclComm comm) noexcept {
  using Fn = NcclResult (*)(NcclComm);
  if (pp::g_comm_table.ReleaseSandbox(comm)) return pitstop::abi::kNcclSuccess;
  PITSTOP_REAL(Fn, pncclCommAbort);
  if (pp::g_comm_table.IsHandle(comm)) {
    comm = static_cast<NcclComm>(pp::g_comm_table.Unbind(comm));
    if (comm == nullptr) return pitstop::abi::kNcclInvalidArgument;
  }
  pp::MarkAbort(comm);
  const NcclResult r = real(comm);
  pp::Forget(comm);
  return r;
}

PITSTOP_EXPORT NcclResult ncclCommRevoke(NcclComm comm,
                                         int revoke_flags) noexcept {
  using Fn = NcclResult (*)(NcclComm, int);
  PITSTOP_REAL(Fn, pncclCommRevoke);
  const NcclResult r = pp::OnQuery(comm, [&](NcclComm c) {
    pp::MarkAbort(c);
    return real(c, revoke_flags);
  });
  if (r == pitstop::abi::kNcclSuccess) pp::g_comm_table.MarkRevoked(comm);
  return r;
}
