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
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/nccl/cpu/cpu_comm.h"
#include "src/nccl/cpu/nccl_api.h"
#include "src/nccl/cpu/reduce_ops.h"

namespace pitstop::cpunccl {
namespace {

struct CommState {
  std::mutex mu;
  std::unique_ptr<CpuComm> comm;  // set once init completed
  std::atomic<int> init_result{ncclInProgress};
  std::string init_error;  // guarded by mu
  bool aborted = false;    // guarded by mu
  std::thread init_thread;
};

}  // namespace
}  // namespace pitstop::cpunccl

struct ncclComm {
  std::shared_ptr<pitstop::cpunccl::CommState> state;
  bool revoked = false;
  bool finalized = false;
};

namespace pitstop::cpunccl {
namespace {

thread_local std::string t_last_error;

std::mutex g_live_mu;
std::set<ncclComm_t>* g_live = nullptr;  // guarded by g_live_mu

bool IsLive(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(g_live_mu);
  return g_live != nullptr && g_live->count(comm) != 0;
}
void AddLive(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(g_live_mu);
  if (g_live == nullptr) g_live = new std::set<ncclComm_t>();
  g_live->insert(comm);
}
bool RemoveLive(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(g_live_mu);
  return g_live != nullptr && g_live->erase(comm) != 0;
}

ncclResult_t Fail(ncclResult_t r, const std::string& msg) {
  t_last_error = msg;
  return r;
}

ncclResult_t FromStatus(const absl::Status& st) {
  if (st.ok()) return ncclSuccess;
  t_last_error = std::string(st.message());
  switch (st.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return ncclRemoteError;
    case absl::StatusCode::kInvalidArgument:
      return ncclInvalidArgument;
    case absl::StatusCode::kFailedPrecondition:
      return ncclInvalidUsage;
    default:
      return ncclInternalError;
  }
}

// The usable communicator behind a handle, waiting for a non-blocking init
// to finish. Sets *r and returns nullptr when there is none.
CpuComm* Ready(ncclComm_t comm, ncclResult_t* r, bool allow_revoked = false) {
  if (comm == nullptr || !IsLive(comm)) {
    *r = Fail(ncclInvalidArgument,
              "invalid communicator (NULL, destroyed "
              "or aborted)");
    return nullptr;
  }
  CommState* s = comm->state.get();
  if (s->init_thread.joinable()) s->init_thread.join();
  std::lock_guard<std::mutex> lock(s->mu);
  if (s->comm == nullptr) {
    *r = Fail(static_cast<ncclResult_t>(s->init_result.load()),
              "communicator init failed: " + s->init_error);
    return nullptr;
  }
  if (comm->revoked && !allow_revoked) {
    *r = Fail(ncclInvalidUsage, "communicator was revoked");
    return nullptr;
  }
  if (comm->finalized) {
    *r = Fail(ncclInvalidUsage, "communicator was finalized");
    return nullptr;
  }
  *r = ncclSuccess;
  return s->comm.get();
}

struct ParsedConfig {
  bool blocking = true;
  std::string name;
};

ncclResult_t ParseConfig(const ncclConfig_t* config, ParsedConfig* out) {
  if (config == nullptr) return ncclSuccess;
  if (config->magic != kConfigMagic) {
    return Fail(ncclInvalidArgument,
                "ncclConfig_t not initialised with NCCL_CONFIG_INITIALIZER "
                "(bad magic)");
  }
  if (config->size >= offsetof(ncclConfig_t, blocking) + sizeof(int) &&
      config->blocking != kConfigUndefInt) {
    out->blocking = config->blocking != 0;
  }
  if (config->size >= offsetof(ncclConfig_t, commName) + sizeof(void*) &&
      config->commName != nullptr) {
    out->name = config->commName;
  }
  return ncclSuccess;
}

uint64_t HashId(const ncclUniqueId& id) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a, like a commHash from the id
  for (char ch : id.internal) {
    h = (h ^ static_cast<uint8_t>(ch)) * 1099511628211ull;
  }
  return h;
}

// Starts (blocking or in the background) the init of a new communicator.
ncclResult_t StartComm(ncclComm_t* out, CommOptions options, bool blocking) {
  auto state = std::make_shared<CommState>();
  auto* handle = new ncclComm{state};
  auto run = [state, options] {
    auto c = CpuComm::Create(options);
    std::lock_guard<std::mutex> lock(state->mu);
    if (!c.ok()) {
      state->init_error = std::string(c.status().message());
      state->init_result.store(FromStatus(c.status()));
      return;
    }
    if (state->aborted) return;  // abandoned: drop it here
    state->comm = std::move(*c);
    state->init_result.store(ncclSuccess);
  };
  AddLive(handle);
  *out = handle;
  if (!blocking) {
    state->init_thread = std::thread(run);
    return ncclInProgress;
  }
  run();
  const auto r = static_cast<ncclResult_t>(state->init_result.load());
  if (r != ncclSuccess) {
    RemoveLive(handle);
    delete handle;
    *out = nullptr;
    return Fail(r, "communicator init failed: " + state->init_error);
  }
  return ncclSuccess;
}

// Wraps an already built child communicator (split, shrink) in a handle.
ncclResult_t Adopt(ncclComm_t* out, std::unique_ptr<CpuComm> comm) {
  auto state = std::make_shared<CommState>();
  state->comm = std::move(comm);
  state->init_result.store(ncclSuccess);
  *out = new ncclComm{state};
  AddLive(*out);
  return ncclSuccess;
}

ncclResult_t Release(ncclComm_t comm, bool abort) {
  if (comm == nullptr || !RemoveLive(comm)) {
    return Fail(ncclInvalidArgument,
                abort ? "ncclCommAbort: invalid communicator (NULL, "
                        "destroyed or already aborted)"
                      : "ncclCommDestroy: invalid communicator (NULL, "
                        "destroyed or aborted)");
  }
  CommState* s = comm->state.get();
  if (s->init_thread.joinable()) {
    if (abort) {
      {
        std::lock_guard<std::mutex> lock(s->mu);
        s->aborted = true;
      }
      s->init_thread.detach();  // it holds the state; ends at its timeout
    } else {
      s->init_thread.join();
    }
  }
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->comm.reset();
  }
  delete comm;
  return ncclSuccess;
}

// --- operations and groups ------------------------------------------------

enum class Kind {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kReduce,
  kSend,
  kRecv
};

struct Pending {
  CpuComm* comm = nullptr;
  Kind kind = Kind::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int root_or_peer = -1;
  OpInfo info;
  std::unique_ptr<emu::Op> prof;
  CpuComm::P2p p2p;
};

thread_local int t_group_depth = 0;
thread_local std::vector<Pending>* t_pending = nullptr;
thread_local ncclResult_t t_group_error = ncclSuccess;

const char* FuncName(Kind k) {
  switch (k) {
    case Kind::kAllReduce:
      return "AllReduce";
    case Kind::kAllGather:
      return "AllGather";
    case Kind::kReduceScatter:
      return "ReduceScatter";
    case Kind::kBroadcast:
      return "Broadcast";
    case Kind::kReduce:
      return "Reduce";
    case Kind::kSend:
      return "Send";
    case Kind::kRecv:
      return "Recv";
  }
  return "?";
}

absl::Status RunCollective(Pending& p) {
  CpuComm* c = p.comm;
  switch (p.kind) {
    case Kind::kAllReduce:
      return c->AllReduce(p.send, p.recv, p.count, p.type, p.op);
    case Kind::kAllGather:
      return c->AllGather(p.send, p.recv, p.count, p.type);
    case Kind::kReduceScatter:
      return c->ReduceScatter(p.send, p.recv, p.count, p.type, p.op);
    case Kind::kBroadcast:
      return c->Broadcast(p.send, p.recv, p.count, p.type, p.root_or_peer);
    case Kind::kReduce:
      return c->Reduce(p.send, p.recv, p.count, p.type, p.op, p.root_or_peer);
    default:
      return absl::InternalError("not a collective");
  }
}

// Runs one group: posts every send and receive, runs the collectives in
// call order, then waits for the point-to-point transfers. Returns the
// first error.
ncclResult_t RunGroup(std::vector<Pending>& ops) {
  absl::Status first;
  auto note = [&](const absl::Status& st) {
    if (first.ok() && !st.ok()) first = st;
  };
  for (Pending& p : ops) {
    if (p.kind != Kind::kSend && p.kind != Kind::kRecv) continue;
    const size_t bytes = p.count * DataTypeSize(p.type);
    auto posted = p.kind == Kind::kSend
                      ? p.comm->PostSend(p.send, bytes, p.root_or_peer)
                      : p.comm->PostRecv(p.recv, bytes, p.root_or_peer);
    if (posted.ok()) {
      p.p2p = std::move(*posted);
    } else {
      note(posted.status());
    }
  }
  for (Pending& p : ops) {
    if (p.kind == Kind::kSend || p.kind == Kind::kRecv) continue;
    if (p.prof == nullptr) {
      note(RunCollective(p));
      continue;
    }
    absl::Status st;
    p.comm->profiler()->Run(p.prof.get(), p.info,
                            [&] { st = RunCollective(p); });
    note(st);
  }
  for (Pending& p : ops) {
    if (p.kind != Kind::kSend && p.kind != Kind::kRecv) continue;
    if (p.prof == nullptr) {
      note(p.comm->Wait(p.p2p));
      continue;
    }
    absl::Status st;
    p.comm->profiler()->Run(p.prof.get(), p.info,
                            [&] { st = p.comm->Wait(p.p2p); });
    note(st);
  }
  ops.clear();  // profiler ops end before their communicator can go
  return FromStatus(first);
}

ncclResult_t Enqueue(ncclComm_t handle, Pending p) {
  ncclResult_t r;
  CpuComm* comm = Ready(handle, &r);
  if (comm == nullptr) {
    if (t_group_depth > 0 && t_group_error == ncclSuccess) t_group_error = r;
    return r;
  }
  const size_t es = DataTypeSize(p.type);
  if (es == 0) {
    return Fail(ncclInvalidArgument,
                absl::StrCat("invalid datatype ", static_cast<int>(p.type)));
  }
  p.comm = comm;
  const bool p2p = p.kind == Kind::kSend || p.kind == Kind::kRecv;
  p.info.p2p = p2p;
  p.info.func = FuncName(p.kind);
  p.info.count = p.count;
  p.info.datatype = DataTypeName(p.type);
  p.info.root = p2p ? -1 : p.root_or_peer;
  p.info.peer = p2p ? p.root_or_peer : -1;
  p.info.seq_number = comm->NextSeq(p.info.func);
  p.info.bytes = p.count * es;
  p.info.proxy_peer = p2p ? p.root_or_peer : (comm->rank() + 1) % comm->size();
  p.info.proxy_send = p.kind != Kind::kRecv;
  if (comm->profiler() != nullptr) p.prof = comm->profiler()->Begin(p.info);
  if (t_group_depth > 0) {
    if (t_pending == nullptr) t_pending = new std::vector<Pending>();
    t_pending->push_back(std::move(p));
    return ncclSuccess;
  }
  std::vector<Pending> one;
  one.push_back(std::move(p));
  return RunGroup(one);
}

Pending Coll(Kind kind, const void* send, void* recv, size_t count,
             ncclDataType_t type, ncclRedOp_t op, int root) {
  Pending p;
  p.kind = kind;
  p.send = send;
  p.recv = recv;
  p.count = count;
  p.type = type;
  p.op = op;
  p.root_or_peer = root;
  return p;
}

}  // namespace
}  // namespace pitstop::cpunccl

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
  return pc::t_last_error.c_str();
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

PITSTOP_API ncclResult_t pncclGroupStart() noexcept {
  if (pc::t_group_depth++ == 0) pc::t_group_error = ncclSuccess;
  return ncclSuccess;
}

PITSTOP_API ncclResult_t pncclGroupEnd() noexcept {
  if (pc::t_group_depth == 0) {
    return pc::Fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  }
  if (--pc::t_group_depth > 0) return ncclSuccess;
  ncclResult_t r = pc::t_group_error;
  if (pc::t_pending != nullptr && !pc::t_pending->empty()) {
    const ncclResult_t run = pc::RunGroup(*pc::t_pending);
    if (r == ncclSuccess) r = run;
  }
  pc::t_group_error = ncclSuccess;
  return r;
}

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
