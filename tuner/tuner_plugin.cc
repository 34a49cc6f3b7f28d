// libnccl-tuner-pitstop.so: NCCL's tuner tables ncclTunerPlugin_v4..v6
// (tuner/abi/tuner_abi.h). Each communicator's context remembers its id
// (v5+; v4 is told only the shape) and the last steering it read from the
// per-node table (include/pitstop/tuner_table.h). getCollInfo applies that
// steering to the communicators the table names and leaves every other
// communicator exactly as NCCL tuned it.
//
// Threads: init and finalize run on NCCL's communicator-init / destroy
// thread; getCollInfo on the thread that enqueues the communicator's
// collectives (one at a time per communicator: NCCL plans a communicator's
// group under its own lock). The process-wide state is atomics, plus a mutex
// taken only in init and when reopening the table.
//
// Hot path (getCollInfo): no lock, no allocation, no log and no syscall
// other than the clock, except (a) an open+mmap of the table when the agent
// replaced it, or at most once a second while there is none, and (b) one
// INFO line through NCCL's logger when a communicator's steering changes.
#include <time.h>

#include <atomic>
#include <cinttypes>
#include <cstdint>
#include <mutex>
#include <new>
#include <string>

#include "pitstop/tuner_table.h"
#include "tuner/abi/tuner_abi.h"
#include "tuner/steering.h"

namespace pitstop::tuner {
namespace {

namespace pa = ::pitstop::abi;
using pa::NcclResult;

constexpr int64_t kReopenIntervalNs = 1'000'000'000;
// Readers replaced by a newer table stay mapped (another thread may still
// be reading them); after this many reopenings the tuner keeps the last.
constexpr int kMaxReaders = 64;

int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// Process-wide state. Never destroyed: the library is linked -z nodelete
// and NCCL may call in from threads still running at exit.
struct Global {
  std::mutex mu;  // open / reopen only
  std::atomic<TunerTableReader*> reader{nullptr};
  std::atomic<int64_t> next_open_ns{0};
  std::atomic<bool> load_logged{false};
  int readers_opened = 0;  // guarded by mu
  // Every reader opened, kept mapped for good: a thread in getCollInfo may
  // still read a replaced one. Guarded by mu.
  TunerTableReader* readers[kMaxReaders] = {};
  std::string path;        // guarded by mu; resolved at first init
  std::string last_error;  // guarded by mu
};

Global& G() {
  static Global* g = new Global;
  return *g;
}

TunerTableReader* Usable(TunerTableReader* r) noexcept {
  return r != nullptr && !r->retired() ? r : nullptr;
}

// Opens the table when there is none or the agent replaced it. A failed
// open is retried at most once a second from getCollInfo, and at every
// communicator init (not a hot path). A replaced table whose successor
// cannot be opened is not used (its plan is stale): NCCL's tuning.
TunerTableReader* RefreshReader(bool at_init) noexcept {
  Global& g = G();
  if (!at_init && NowNs() < g.next_open_ns.load(std::memory_order_relaxed)) {
    return Usable(g.reader.load(std::memory_order_acquire));
  }
  try {
    std::lock_guard<std::mutex> lock(g.mu);
    TunerTableReader* cur = Usable(g.reader.load(std::memory_order_acquire));
    if (cur != nullptr) return cur;  // another thread reopened it
    if (g.readers_opened >= kMaxReaders) {
      g.next_open_ns.store(INT64_MAX, std::memory_order_relaxed);
      g.last_error = "the table was replaced too often; NCCL's tuning";
      return nullptr;
    }
    if (g.path.empty()) g.path = ResolveTablePath("");
    std::string error;
    std::unique_ptr<TunerTableReader> r =
        TunerTableReader::Open(g.path, &error);
    if (r == nullptr) {
      g.last_error = error;
      g.next_open_ns.store(NowNs() + kReopenIntervalNs,
                           std::memory_order_relaxed);
      return nullptr;
    }
    TunerTableReader* fresh = r.release();
    g.readers[g.readers_opened++] = fresh;
    g.reader.store(fresh, std::memory_order_release);
    g.next_open_ns.store(0, std::memory_order_relaxed);
    return fresh;
  } catch (...) {
    return nullptr;
  }
}

TunerTableReader* CurrentReader(bool at_init = false) noexcept {
  TunerTableReader* r = Usable(G().reader.load(std::memory_order_acquire));
  return r != nullptr ? r : RefreshReader(at_init);
}

struct Context {
  uint64_t comm_id = 0;  // 0: v4, match by shape
  uint32_t n_ranks = 0;
  uint32_t n_nodes = 0;
  pa::NcclLogger log = nullptr;
  // The last lookup: valid while the reader and its generation are these.
  const TunerTableReader* seen_reader = nullptr;
  uint64_t seen_generation = 0;
  bool steered = false;
  Steering steering;
  // What the log last said, so a change is logged once.
  bool logged_steered = false;
  uint64_t logged_epoch = 0;
};

void LogLoad(pa::NcclLogger log) noexcept {
  Global& g = G();
  if (log == nullptr || g.load_logged.exchange(true)) return;
  try {
    std::lock_guard<std::mutex> lock(g.mu);
    if (Usable(g.reader.load()) != nullptr) {
      log(pa::kNcclLogInfo, pa::kNcclLogSubsysInit | pa::kNcclLogSubsysTuning,
          __FILE__, __LINE__,
          "PITSTOP/Tuner: loaded; steering table %s (communicators it does "
          "not name keep NCCL's tuning)",
          g.path.c_str());
    } else {
      log(pa::kNcclLogInfo, pa::kNcclLogSubsysInit | pa::kNcclLogSubsysTuning,
          __FILE__, __LINE__,
          "PITSTOP/Tuner: loaded; no steering table yet (%s); NCCL's tuning "
          "until the agent writes one",
          g.last_error.c_str());
    }
  } catch (...) {
  }
}

void LogChange(Context* ctx) noexcept {
  if (ctx->log == nullptr) return;
  if (ctx->steered == ctx->logged_steered &&
      (!ctx->steered || ctx->steering.plan_epoch == ctx->logged_epoch)) {
    return;
  }
  ctx->logged_steered = ctx->steered;
  ctx->logged_epoch = ctx->steering.plan_epoch;
  const Steering& s = ctx->steering;
  if (ctx->steered) {
    ctx->log(pa::kNcclLogInfo, pa::kNcclLogSubsysTuning, __FILE__, __LINE__,
             "PITSTOP/Tuner: comm 0x%" PRIx64 " steered by plan epoch %" PRIu64
             ": channels %d..%d (0 = NCCL's), algorithm mask 0x%x, protocol "
             "mask 0x%x",
             s.comm_id, s.plan_epoch, s.min_channels, s.max_channels,
             s.algo_mask, s.proto_mask);
  } else {
    ctx->log(pa::kNcclLogInfo, pa::kNcclLogSubsysTuning, __FILE__, __LINE__,
             "PITSTOP/Tuner: comm 0x%" PRIx64
             " no longer steered; NCCL's tuning",
             ctx->comm_id);
  }
}

// Brings ctx's cached steering up to date with the table.
void Refresh(Context* ctx) noexcept {
  TunerTableReader* r = CurrentReader();
  if (r == nullptr) {
    ctx->steered = false;
    ctx->seen_reader = nullptr;
    LogChange(ctx);
    return;
  }
  uint64_t gen = r->generation();
  if (r == ctx->seen_reader && gen == ctx->seen_generation) return;
  Steering s;
  TunerTableReader::Result res =
      ctx->comm_id != 0 ? r->Lookup(ctx->comm_id, &s)
                        : r->LookupShape(ctx->n_ranks, ctx->n_nodes, &s);
  if (res == TunerTableReader::Result::kBusy) return;  // retry next call
  ctx->seen_reader = r;
  ctx->seen_generation = gen;
  ctx->steered = res == TunerTableReader::Result::kFound;
  if (ctx->steered) ctx->steering = s;
  LogChange(ctx);
}

Context* NewContext(uint64_t comm_id, size_t n_ranks, size_t n_nodes,
                    pa::NcclLogger log) noexcept {
  auto* ctx = new (std::nothrow) Context;
  if (ctx == nullptr) return nullptr;
  ctx->comm_id = comm_id;
  ctx->n_ranks = static_cast<uint32_t>(n_ranks);
  ctx->n_nodes = static_cast<uint32_t>(n_nodes);
  ctx->log = log;
  CurrentReader(/*at_init=*/true);
  LogLoad(log);
  return ctx;
}

NcclResult InitV4(size_t n_ranks, size_t n_nodes, pa::NcclLogger log,
                  void** context) noexcept {
  if (context == nullptr) return pa::kNcclInvalidArgument;
  *context = NewContext(0, n_ranks, n_nodes, log);
  return *context != nullptr ? pa::kNcclSuccess : pa::kNcclSystemError;
}

NcclResult InitV5(void** context, uint64_t comm_id, size_t n_ranks,
                  size_t n_nodes, pa::NcclLogger log, pa::NvlDomainInfoV5*,
                  pa::TunerConstantsV5*) noexcept {
  if (context == nullptr) return pa::kNcclInvalidArgument;
  // commId 0 would match nothing; fall back to the shape as v4 does.
  *context = NewContext(comm_id, n_ranks, n_nodes, log);
  return *context != nullptr ? pa::kNcclSuccess : pa::kNcclSystemError;
}

NcclResult GetCollInfo(void* context, pa::NcclFunc, size_t, int,
                       float** coll_cost_table, int num_algo, int num_proto,
                       int, int* n_channels) noexcept {
  auto* ctx = static_cast<Context*>(context);
  if (ctx == nullptr) return pa::kNcclSuccess;  // NCCL's tuning
  Refresh(ctx);
  if (!ctx->steered) return pa::kNcclSuccess;
  ApplySteering(ctx->steering, reinterpret_cast<float*>(coll_cost_table),
                num_algo, num_proto, n_channels);
  return pa::kNcclSuccess;
}

NcclResult Finalize(void* context) noexcept {
  delete static_cast<Context*>(context);
  return pa::kNcclSuccess;
}

NcclResult GetChunkSize(void*, pa::NcclFunc, size_t, int, int, int,
                        size_t*) noexcept {
  return pa::kNcclSuccess;  // NCCL's chunk size
}

}  // namespace
}  // namespace pitstop::tuner

namespace pt = ::pitstop::tuner;
namespace pa = ::pitstop::abi;

extern "C" {

__attribute__((visibility("default"))) pa::TunerV6 ncclTunerPlugin_v6 = {
    "pitstop", pt::InitV5, pt::GetCollInfo, pt::Finalize, pt::GetChunkSize};

__attribute__((visibility("default"))) pa::TunerV5 ncclTunerPlugin_v5 = {
    "pitstop", pt::InitV5, pt::GetCollInfo, pt::Finalize};

__attribute__((visibility("default"))) pa::TunerV4 ncclTunerPlugin_v4 = {
    "pitstop", pt::InitV4, pt::GetCollInfo, pt::Finalize};

}  // extern "C"
