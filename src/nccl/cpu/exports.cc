// The CPU NCCL backend's C entry points: NCCL's export shape (a strong
// pnccl* symbol per function and a weak nccl* alias of it, so an
// LD_PRELOAD interposer's nccl* wins and reaches pnccl*), NCCL's argument
// checks, group semantics and the non-blocking init protocol
// (ncclInProgress, then ncclCommGetAsyncError).
//
// Handles are checked against a table of live communicators, so a call on
// a destroyed or aborted communicator returns ncclInvalidArgument instead of
// touching freed memory (NCCL would crash; tests of the interposer's rules
// want the error).
//
// Threads: any thread may call; one communicator is used by one thread at a
// time (NCCL's rule). Group state is per thread, like NCCL's.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/nccl/cpu/comm_handles.h"
#include "src/nccl/cpu/cpu_comm.h"
#include "src/nccl/cpu/groups.h"
#include "src/nccl/cpu/nccl_api.h"

namespace pc = pitstop::cpunccl;

#define PITSTOP_API extern "C" __attribute__((visibility("default")))

PITSTOP_API ncclResult_t pncclGetVersion(int* version) noexcept {
  if (version == nullptr) return ncclInvalidArgument;
  *version = pc::kReportedVersion;
  return ncclSuccess;
}

PITSTOP_API const char* pncclGetErrorString(ncclResult_t r) noexcept {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL "
             "developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

PITSTOP_API const char* pncclGetLastError(ncclComm_t) noexcept {
  return pc::LastError();
}

PITSTOP_API ncclResult_t pncclGetUniqueId(ncclUniqueId* id) noexcept {
  if (id == nullptr) return pc::Fail(ncclInvalidArgument, "id is NULL");
  auto made = pc::NewUniqueId();
  if (!made.ok()) return pc::FromStatus(made.status());
  *id = *made;
  return ncclSuccess;
}

PITSTOP_API ncclResult_t
pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                        ncclConfig_t* config) noexcept {
  if (comm == nullptr) return pc::Fail(ncclInvalidArgument, "comm is NULL");
  *comm = nullptr;
  pc::ParsedConfig cfg;
  if (ncclResult_t r = pc::ParseConfig(config, &cfg); r != ncclSuccess) {
    return r;
  }
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return pc::Fail(ncclInvalidArgument,
                    absl::StrCat("rank ", rank, " / nranks ", nranks));
  }
  auto decoded = pc::DecodeUniqueId(id);
  if (!decoded.ok()) return pc::FromStatus(decoded.status());
  pc::CommOptions o;
  o.n_ranks = nranks;
  o.rank = rank;
  o.store_dir = decoded->store_dir;
  o.prefix = absl::StrCat("c", absl::Hex(decoded->nonce));
  o.comm_hash = pc::HashId(id);
  if (ncclResult_t t = pc::ReadTopologyFile(o.comm_hash, rank);
      t != ncclSuccess) {
    return t;
  }
  o.name = cfg.name;
  o.timeout = pc::DefaultTimeout();
  return pc::StartComm(comm, o, cfg.blocking);
}

PITSTOP_API ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks,
                                           ncclUniqueId id, int rank) noexcept {
  return pncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

PITSTOP_API ncclResult_t
pncclCommInitRankScalable(ncclComm_t* comm, int nranks, int rank, int n_id,
                          ncclUniqueId* ids, ncclConfig_t* config) noexcept {
  if (n_id < 1 || ids == nullptr) {
    return pc::Fail(ncclInvalidArgument, "no unique ids");
  }
  return pncclCommInitRankConfig(comm, nranks, ids[0], rank, config);
}

PITSTOP_API ncclResult_t pncclCommGetAsyncError(ncclComm_t comm,
                                                ncclResult_t* result) noexcept {
  if (result == nullptr || comm == nullptr || !pc::IsLive(comm)) {
    return pc::Fail(ncclInvalidArgument, "invalid communicator or result");
  }
  pc::CommState* s = comm->state.get();
  const auto init = static_cast<ncclResult_t>(s->init_result.load());
  if (init != ncclSuccess) {
    *result = init;
    return ncclSuccess;
  }
  std::lock_guard<std::mutex> lock(s->mu);
  *result = s->comm != nullptr ? pc::FromStatus(s->comm->error()) : init;
  return ncclSuccess;
}

PITSTOP_API ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key,
                                        ncclComm_t* newcomm,
                                        ncclConfig_t* config) noexcept {
  if (newcomm == nullptr) return pc::Fail(ncclInvalidArgument, "newcomm NULL");
  *newcomm = nullptr;
  pc::ParsedConfig cfg;
  if (ncclResult_t r = pc::ParseConfig(config, &cfg); r != ncclSuccess) {
    return r;
  }
  ncclResult_t r;
  pc::CpuComm* c = pc::Ready(comm, &r);
  if (c == nullptr) return r;
  if (ncclResult_t t = pc::ReadTopologyFile(c->comm_hash(), c->rank());
      t != ncclSuccess) {
    return t;
  }
  auto child = c->Split(color, key, cfg.name);
  if (!child.ok()) return pc::FromStatus(child.status());
  if (*child == nullptr) return ncclSuccess;  // NCCL_SPLIT_NOCOLOR
  return pc::Adopt(newcomm, std::move(*child));
}

PITSTOP_API ncclResult_t pncclCommShrink(ncclComm_t comm, int* exclude_ranks,
                                         int exclude_count, ncclComm_t* newcomm,
                                         ncclConfig_t* config,
                                         int shrink_flags) noexcept {
  if (newcomm == nullptr) return pc::Fail(ncclInvalidArgument, "newcomm NULL");
  *newcomm = nullptr;
  if (exclude_count < 0 || (exclude_count > 0 && exclude_ranks == nullptr)) {
    return pc::Fail(ncclInvalidArgument, "bad exclude list");
  }
  if (shrink_flags != 0 && shrink_flags != pc::kShrinkAbort) {
    return pc::Fail(ncclInvalidArgument,
                    absl::StrCat("unknown shrink flags ", shrink_flags));
  }
  pc::ParsedConfig cfg;
  if (ncclResult_t r = pc::ParseConfig(config, &cfg); r != ncclSuccess) {
    return r;
  }
  ncclResult_t r;
  pc::CpuComm* c = pc::Ready(comm, &r, /*allow_revoked=*/true);
  if (c == nullptr) return r;
  std::vector<int> excluded(exclude_ranks, exclude_ranks + exclude_count);
  auto child = c->Shrink(excluded, cfg.name);
  if (!child.ok()) return pc::FromStatus(child.status());
  return pc::Adopt(newcomm, std::move(*child));
}

PITSTOP_API ncclResult_t pncclCommFinalize(ncclComm_t comm) noexcept {
  ncclResult_t r;
  pc::CpuComm* c = pc::Ready(comm, &r);
  if (c == nullptr) return r;
  // Operations are synchronous, so nothing is outstanding; the barrier
  // makes sure every peer is done with this communicator before any closes
  // its connections.
  r = pc::FromStatus(c->Barrier());
  comm->finalized = true;
  return r;
}

PITSTOP_API ncclResult_t pncclCommDestroy(ncclComm_t comm) noexcept {
  return pc::Release(comm, /*abort=*/false);
}

PITSTOP_API ncclResult_t pncclCommAbort(ncclComm_t comm) noexcept {
  return pc::Release(comm, /*abort=*/true);
}

PITSTOP_API ncclResult_t pncclCommRevoke(ncclComm_t comm,
                                         int revoke_flags) noexcept {
  if (revoke_flags != 0) {
    return pc::Fail(ncclInvalidArgument, "revokeFlags must be 0");
  }
  ncclResult_t r;
  if (pc::Ready(comm, &r, /*allow_revoked=*/true) == nullptr) return r;
  comm->revoked = true;
  return ncclSuccess;
}

PITSTOP_API ncclResult_t pncclCommCount(const ncclComm_t comm,
                                        int* count) noexcept {
  ncclResult_t r;
  pc::CpuComm* c = pc::Ready(comm, &r, true);
  if (c == nullptr || count == nullptr)
    return c == nullptr ? r : ncclInvalidArgument;
  *count = c->size();
  return ncclSuccess;
}

PITSTOP_API ncclResult_t pncclCommUserRank(const ncclComm_t comm,
                                           int* rank) noexcept {
  ncclResult_t r;
  pc::CpuComm* c = pc::Ready(comm, &r, true);
  if (c == nullptr || rank == nullptr)
    return c == nullptr ? r : ncclInvalidArgument;
  *rank = c->rank();
  return ncclSuccess;
}

// The "device" is the rank's index among the ranks on its host.
PITSTOP_API ncclResult_t pncclCommCuDevice(const ncclComm_t comm,
                                           int* dev) noexcept {
  ncclResult_t r;
  pc::CpuComm* c = pc::Ready(comm, &r, true);
  if (c == nullptr || dev == nullptr)
    return c == nullptr ? r : ncclInvalidArgument;
  *dev = c->local_rank();
  return ncclSuccess;
}

PITSTOP_API ncclResult_t pncclGroupStart() noexcept { return pc::GroupStart(); }

PITSTOP_API ncclResult_t pncclGroupEnd() noexcept { return pc::GroupEnd(); }

PITSTOP_API ncclResult_t pncclAllReduce(const void* send, void* recv,
                                        size_t count, ncclDataType_t type,
                                        ncclRedOp_t op, ncclComm_t comm,
                                        void* /*stream*/) noexcept {
  return pc::Enqueue(
      comm, pc::Coll(pc::Kind::kAllReduce, send, recv, count, type, op, -1));
}

PITSTOP_API ncclResult_t pncclAllGather(const void* send, void* recv,
                                        size_t send_count, ncclDataType_t type,
                                        ncclComm_t comm,
                                        void* /*stream*/) noexcept {
  return pc::Enqueue(comm, pc::Coll(pc::Kind::kAllGather, send, recv,
                                    send_count, type, ncclSum, -1));
}

PITSTOP_API ncclResult_t pncclReduceScatter(const void* send, void* recv,
                                            size_t recv_count,
                                            ncclDataType_t type, ncclRedOp_t op,
                                            ncclComm_t comm,
                                            void* /*stream*/) noexcept {
  return pc::Enqueue(comm, pc::Coll(pc::Kind::kReduceScatter, send, recv,
                                    recv_count, type, op, -1));
}

PITSTOP_API ncclResult_t pncclBroadcast(const void* send, void* recv,
                                        size_t count, ncclDataType_t type,
                                        int root, ncclComm_t comm,
                                        void* /*stream*/) noexcept {
  return pc::Enqueue(comm, pc::Coll(pc::Kind::kBroadcast, send, recv, count,
                                    type, ncclSum, root));
}

PITSTOP_API ncclResult_t pncclBcast(void* buff, size_t count,
                                    ncclDataType_t type, int root,
                                    ncclComm_t comm, void* stream) noexcept {
  return pncclBroadcast(buff, buff, count, type, root, comm, stream);
}

PITSTOP_API ncclResult_t pncclReduce(const void* send, void* recv, size_t count,
                                     ncclDataType_t type, ncclRedOp_t op,
                                     int root, ncclComm_t comm,
                                     void* /*stream*/) noexcept {
  return pc::Enqueue(
      comm, pc::Coll(pc::Kind::kReduce, send, recv, count, type, op, root));
}

PITSTOP_API ncclResult_t pncclSend(const void* buf, size_t count,
                                   ncclDataType_t type, int peer,
                                   ncclComm_t comm, void* /*stream*/) noexcept {
  return pc::Enqueue(comm, pc::Coll(pc::Kind::kSend, buf, nullptr, count, type,
                                    ncclSum, peer));
}

PITSTOP_API ncclResult_t pncclRecv(void* buf, size_t count, ncclDataType_t type,
                                   int peer, ncclComm_t comm,
                                   void* /*stream*/) noexcept {
  return pc::Enqueue(comm, pc::Coll(pc::Kind::kRecv, nullptr, buf, count, type,
                                    ncclSum, peer));
}

PITSTOP_API ncclResult_t pncclMemAlloc(void** ptr, size_t size) noexcept {
  if (ptr == nullptr) return ncclInvalidArgument;
  *ptr = std::malloc(size > 0 ? size : 1);
  return *ptr != nullptr ? ncclSuccess : ncclSystemError;
}

PITSTOP_API ncclResult_t pncclMemFree(void* ptr) noexcept {
  std::free(ptr);
  return ncclSuccess;
}

// NCCL's shape: the nccl* names are weak aliases of the pnccl* ones.
#define PITSTOP_WEAK_ALIAS(name)                    \
  extern "C" __attribute__((weak, alias("p" #name), \
                            visibility("default"))) decltype(p##name) name;
PITSTOP_WEAK_ALIAS(ncclGetVersion)
PITSTOP_WEAK_ALIAS(ncclGetErrorString)
PITSTOP_WEAK_ALIAS(ncclGetLastError)
PITSTOP_WEAK_ALIAS(ncclGetUniqueId)
PITSTOP_WEAK_ALIAS(ncclCommInitRank)
PITSTOP_WEAK_ALIAS(ncclCommInitRankConfig)
PITSTOP_WEAK_ALIAS(ncclCommInitRankScalable)
PITSTOP_WEAK_ALIAS(ncclCommGetAsyncError)
PITSTOP_WEAK_ALIAS(ncclCommSplit)
PITSTOP_WEAK_ALIAS(ncclCommShrink)
PITSTOP_WEAK_ALIAS(ncclCommFinalize)
PITSTOP_WEAK_ALIAS(ncclCommDestroy)
PITSTOP_WEAK_ALIAS(ncclCommAbort)
PITSTOP_WEAK_ALIAS(ncclCommRevoke)
PITSTOP_WEAK_ALIAS(ncclCommCount)
PITSTOP_WEAK_ALIAS(ncclCommUserRank)
PITSTOP_WEAK_ALIAS(ncclCommCuDevice)
PITSTOP_WEAK_ALIAS(ncclGroupStart)
PITSTOP_WEAK_ALIAS(ncclGroupEnd)
PITSTOP_WEAK_ALIAS(ncclAllReduce)
PITSTOP_WEAK_ALIAS(ncclAllGather)
PITSTOP_WEAK_ALIAS(ncclReduceScatter)
PITSTOP_WEAK_ALIAS(ncclBroadcast)
PITSTOP_WEAK_ALIAS(ncclBcast)
PITSTOP_WEAK_ALIAS(ncclReduce)
PITSTOP_WEAK_ALIAS(ncclSend)
PITSTOP_WEAK_ALIAS(ncclRecv)
PITSTOP_WEAK_ALIAS(ncclMemAlloc)
PITSTOP_WEAK_ALIAS(ncclMemFree)
