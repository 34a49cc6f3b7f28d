#include "plugin/runtime.h"

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "plugin/chain.h"
#include "plugin/rebuild.h"
#include "plugin/stats.h"

namespace pitstop::plugin {
namespace {

std::atomic<Runtime*> g_runtime{nullptr};
std::atomic<bool> g_preloaded{false};
// Exporters of the parent abandoned in forked children (Runtime::ForkChild).
Exporter* g_abandoned[8] = {};
Mutex g_create_mu;

constexpr char kLibraryVersion[] = "0.1.0";

void ExitHandler() {
  if (Runtime* rt = Runtime::Get()) rt->ShutdownAtExit();
}

void ChainLog(const std::string& msg) {
  if (Runtime* rt = Runtime::Get()) rt->LogWarn(msg);
}

// pthread_atfork's three handlers: the locks Prepare takes are released by
// Parent or Child, a hand-off -Wthread-safety cannot follow.
void AtForkPrepare() PLUGIN_NO_TSA {
  if (Runtime* rt = Runtime::Get()) rt->ForkPrepare();
}
void AtForkParent() PLUGIN_NO_TSA {
  if (Runtime* rt = Runtime::Get()) rt->ForkParent();
}
void AtForkChild() PLUGIN_NO_TSA {
  if (Runtime* rt = Runtime::Get()) rt->ForkChild();
}

// NCCL version via the public API when libnccl is in the process.
uint32_t NcclVersion() {
  using GetVersionFn = int (*)(int*);
  auto fn =
      reinterpret_cast<GetVersionFn>(dlsym(RTLD_DEFAULT, "pncclGetVersion"));
  int v = 0;
  if (fn != nullptr && fn(&v) == 0 && v > 0) return static_cast<uint32_t>(v);
  return 0;
}

}  // namespace

Runtime* Runtime::Get() noexcept {
  return g_runtime.load(std::memory_order_acquire);
}

Runtime* Runtime::GetOrCreate() noexcept {
  if (Runtime* rt = Get()) return rt;
  MutexLock lock(&g_create_mu);
  if (Runtime* rt = Get()) return rt;
  Runtime* rt = nullptr;
  try {
    rt = new Runtime();
  } catch (...) {
    // Out of memory for the rings or pools: NCCL runs on without us; the
    // next init tries again.
    std::fprintf(stderr,
                 "pitstop: cannot allocate the profiler runtime; profiling "
                 "disabled\n");
    return nullptr;
  }
  CpuClock::Calibrate(rt->config().use_tsc);
  // Registered before the runtime is published, so no fork can see it
  // without the handlers. Never unregistered: the library is never unloaded.
  pthread_atfork(AtForkPrepare, AtForkParent, AtForkChild);
  g_runtime.store(rt, std::memory_order_release);
  return rt;
}

void Runtime::MarkPreloaded() noexcept { g_preloaded.store(true); }

bool Runtime::Preloaded() noexcept { return g_preloaded.load(); }

RuntimeCounters Runtime::Counters() noexcept {
  RuntimeCounters c;
  c.ring_full = rings_.TotalFullDrops() + rings_.no_ring_drops();
  c.pool_exhausted = recorder_.pool_exhausted();
  c.ignored = recorder_.ignored();
  c.events_recorded = rings_.TotalPublished();
  c.event_mask = config_.event_mask;
  MutexLock lock(&mu_);
  c.export_dropped = stopped_export_dropped_;
  c.records_sent = stopped_records_sent_;
  if (exporter_ != nullptr) {
    c.export_dropped += exporter_->export_dropped();
    c.records_sent += exporter_->records_sent();
  }
  c.abi_version = abi_version_;
  return c;
}

void Runtime::StopExporter(GoodbyeReason reason) {
  std::unique_ptr<Exporter> exporter;
  {
    MutexLock lock(&mu_);
    exporter = std::move(exporter_);
  }
  if (exporter == nullptr) return;
  exporter->Stop(reason);
  MutexLock lock(&mu_);
  stopped_export_dropped_ += exporter->export_dropped();
  stopped_records_sent_ += exporter->records_sent();
}

InterposerCall*& Runtime::ThreadInterposerCall() noexcept {
  static thread_local InterposerCall* call = nullptr;
  return call;
}

Runtime::Runtime()
    : config_(ReadPluginConfig()),
      pid_(getpid()),
      rings_(config_.max_rings, config_.ring_capacity),
      recorder_(&rings_, pid_),
      registry_(config_.event_mask, config_.deep_event_mask) {}

void Runtime::Log(abi::NcclLogLevel level, const std::string& msg) noexcept {
  abi::NcclLogger fn = nullptr;
  {
    MutexLock lock(&mu_);
    fn = logfn_;
  }
  if (fn != nullptr) {
    fn(level, abi::kNcclLogSubsysInit | abi::kNcclLogSubsysProfile, __FILE__,
       __LINE__, "pitstop: %s", msg.c_str());
  } else {
    std::fprintf(stderr, "pitstop: %s\n", msg.c_str());
  }
}

void Runtime::StartExporterLocked() {
  if (exporter_ != nullptr) return;
  ExporterOptions o;
  // Re-read so a process can point a restarted exporter elsewhere (tests).
  // An invalid value was already warned about by ReadPluginConfig.
  const char* socket = std::getenv("PITSTOP_AGENT_SOCKET");
  o.socket_path = (socket != nullptr && ValidAgentSocketPath(socket))
                      ? socket
                      : config_.agent_socket;
  o.flush_interval_ms = config_.flush_interval_ms;
  o.ring_bytes = config_.shm_ring_bytes;
  // A batch must fit half the shared ring; encoded records stay well under
  // 256 bytes each.
  o.max_batch_records = static_cast<uint32_t>(
      std::min<uint64_t>(4096, config_.shm_ring_bytes / 2 / 256));
  o.finalize_timeout_ms = config_.finalize_timeout_ms;
  o.reconnect_max_ms = config_.reconnect_max_ms;
  Hello& h = o.hello;
  h.host = config_.host;
  h.pid = static_cast<uint32_t>(pid_);
  h.job_id = config_.job_id;
  h.library_version = kLibraryVersion;
  h.nccl_version = NcclVersion();
  h.load_mode = g_preloaded.load() ? "both" : "profiler";
  h.global_rank = config_.global_rank;
  o.on_tick = [this] {
    // A chained profiler may change its mask at any time (NVIDIA's example
    // does); NCCL's mask must keep containing it.
    if (Chain* chain = Chain::Get()) {
      chain->RefreshMask();
      registry_.SetExtraMask(chain->mask());
    }
    if (Rebuilder* r = rebuilder()) r->Tick();
  };
  o.on_directives = [this](std::vector<MigrationDirective>* d) {
    if (Rebuilder* r = rebuilder()) r->OnDirectives(d);
  };
  o.take_acks = [this](std::vector<MigrationAck>* out) {
    if (Rebuilder* r = rebuilder()) r->TakeAcks(out);
  };
  o.drop_source = [this](Drops* d) {
    d->ring_full = rings_.TotalFullDrops() + rings_.no_ring_drops();
    d->pool_exhausted = recorder_.pool_exhausted();
    d->ignored = recorder_.ignored();
    d->events_recorded = rings_.TotalPublished();
  };
  exporter_ = Exporter::Start(std::move(o), &rings_, &registry_);
  if (!atexit_registered_) {
    // Stops the exporter (flush + goodbye) when the process exits.
    atexit_registered_ = true;
    std::atexit(ExitHandler);
  }
}

abi::NcclResult Runtime::InitComm(void** context, int abi_version,
                                  uint64_t comm_hash, int* activation_mask,
                                  const char* comm_name, int n_nodes,
                                  int n_ranks, int rank,
                                  abi::NcclLogger logfn) noexcept {
  if (context == nullptr) return abi::kNcclInvalidArgument;
  *context = nullptr;
  // Any exception (out of memory building strings or the registry entry)
  // fails this init cleanly: NCCL continues without profiling the comm.
  try {
    return InitCommImpl(context, abi_version, comm_hash, activation_mask,
                        comm_name, n_nodes, n_ranks, rank, logfn);
  } catch (...) {
    *context = nullptr;
    return abi::kNcclSystemError;
  }
}

abi::NcclResult Runtime::InitCommImpl(void** context, int abi_version,
                                      uint64_t comm_hash, int* activation_mask,
                                      const char* comm_name, int n_nodes,
                                      int n_ranks, int rank,
                                      abi::NcclLogger logfn) {
  std::vector<std::string> warnings;
  {
    MutexLock lock(&mu_);
    if (logfn != nullptr) logfn_ = logfn;
    if (!warned_) {
      warned_ = true;
      warnings = config_.warnings;
    }
  }
  for (const auto& w : warnings) Log(abi::kNcclLogWarn, w);
  // v3 init carries no communicator data; everything else must be sane.
  if (abi_version >= 4 && (n_ranks <= 0 || rank < 0 || rank >= n_ranks)) {
    Log(abi::kNcclLogWarn, "init with rank " + std::to_string(rank) + " of " +
                               std::to_string(n_ranks) +
                               " ranks; profiling disabled for this comm");
    return abi::kNcclInvalidArgument;
  }
  {
    CommInfo info;
    info.comm_hash = comm_hash;
    if (comm_name != nullptr) info.comm_name = comm_name;
    info.n_ranks = n_ranks;
    info.n_nodes = n_nodes;
    info.rank = rank;
    info.host = config_.host;
    info.pid = static_cast<uint32_t>(pid_);
    info.cuda_device = config_.local_rank;
    info.job_id = config_.job_id;
    info.profiler_abi_version = static_cast<uint32_t>(abi_version);
    info.source = CommInfo::kProfilerInit;
    if (InterposerCall* call = ThreadInterposerCall()) {
      info.source = CommInfo::kInterposer;
      info.parent_comm_hash = call->parent_comm_hash;
      call->created.push_back(comm_hash);
    }
    if (config_.global_rank >= 0 && n_ranks > 0 && rank >= 0 &&
        rank < n_ranks && n_ranks <= 65536) {
      // Only our own entry is known here; the agent joins the members'.
      info.global_ranks.assign(n_ranks, -1);
      info.global_ranks[rank] = config_.global_rank;
    }
    // Serialised with FinalizeComm's stop of the exporter, so at most one
    // exporter ever drains the rings and a new comm always has one.
    MutexLock lifecycle(&lifecycle_mu_);
    if (!chain_loaded_ && !config_.chain_plugin.empty()) {
      chain_loaded_ = true;  // once per process, whatever the outcome
      Chain::Load(config_.chain_plugin, abi_version, ChainLog);
    }
    CommContext* ctx = nullptr;
    {
      MutexLock lock(&mu_);
      if (forked_) {
        // First communicator of a forked child: nothing the parent's
        // handles recorded since the fork belongs to it.
        forked_ = false;
        rings_.DiscardAfterFork();
      }
      abi_version_ = abi_version;
      ctx = registry_.Add(info, activation_mask, NowCpuNs());
    }
    if (Chain* chain = Chain::Get()) {
      // Same arguments as NCCL gave us; its mask joins NCCL's. Outside mu_:
      // a failing chained plugin is logged (Log takes mu_).
      uint32_t chained_mask = 0;
      chain->Init(&ctx->chain_ctx, comm_hash, comm_name, n_nodes, n_ranks, rank,
                  logfn, &chained_mask);
      registry_.SetExtraMask(chained_mask);
    }
    *context = ctx;
    MutexLock lock(&mu_);
    StartExporterLocked();
  }
  return abi::kNcclSuccess;
}

abi::NcclResult Runtime::FinalizeComm(void* context) noexcept {
  if (context == nullptr) return abi::kNcclSuccess;
  try {
    // Held across the stop (bounded by PITSTOP_FINALIZE_TIMEOUT_MS): an init
    // on another thread waits, then starts a fresh exporter.
    MutexLock lifecycle(&lifecycle_mu_);
    auto* ctx = static_cast<CommContext*>(context);
    if (Chain* chain = Chain::Get(); chain != nullptr && ctx->chain_ctx) {
      void* chained = ctx->chain_ctx;
      ctx->chain_ctx = nullptr;
      chain->Finalize(chained);
    }
    const int live = registry_.End(ctx, kCommFinalize, NowCpuNs());
    if (live == 0) {
      StopExporter(kGoodbyeFinalize);
      // Everything recorded so far is drained: a process that ends without
      // running exit handlers still leaves its counts.
      stats::WriteStatsFile();
    }
  } catch (...) {
    return abi::kNcclSystemError;
  }
  return abi::kNcclSuccess;
}

void Runtime::UpdateComm(uint64_t comm_hash, const CommInfo& extra) noexcept {
  try {
    registry_.Update(comm_hash, extra, NowCpuNs());
  } catch (...) {
  }
}

void Runtime::AbortComm(uint64_t comm_hash) noexcept {
  try {
    if (CommContext* ctx = registry_.Find(comm_hash)) {
      registry_.End(ctx, kCommAbort, NowCpuNs());
    }
  } catch (...) {
  }
}

void Runtime::ReportInitFailure(const InitFailure& failure) noexcept {
  try {
    InitFailure f = failure;
    f.time_cpu_ns = NowCpuNs();
    registry_.AddInitFailure(std::move(f));
    MutexLock lifecycle(&lifecycle_mu_);
    MutexLock lock(&mu_);
    StartExporterLocked();
  } catch (...) {
  }
}

Rebuilder* Runtime::EnableMigration(CommTable* table) noexcept {
  try {
    MutexLock lifecycle(&lifecycle_mu_);
    if (rebuilder_.load() == nullptr) {
      NcclOps ops;
      std::string missing;
      LoadRealNcclOps(&ops, &missing);
      rebuilder_.store(
          new Rebuilder(table, ops, missing, [] { return NowCpuNs(); }));
    }
    MutexLock lock(&mu_);
    StartExporterLocked();
  } catch (...) {
  }
  return rebuilder();
}

void Runtime::ShutdownAtExit() noexcept {
  MutexLock lifecycle(&lifecycle_mu_);
  StopExporter(kGoodbyeExit);
}

void Runtime::ForkPrepare() noexcept {
  lifecycle_mu_.Lock();
  // The exporter is paused between ticks before mu_ is taken: a tick may
  // log (mu_) or expire activations (the registry's lock). lifecycle_mu_
  // keeps the exporter from being started or stopped meanwhile.
  Exporter* exporter = nullptr;
  {
    MutexLock lock(&mu_);
    exporter = exporter_.get();
  }
  if (exporter != nullptr) exporter->PauseForFork();
  mu_.Lock();
  registry_.ForkPrepare();
}

void Runtime::ForkParent() noexcept {
  registry_.ForkParent();
  if (exporter_ != nullptr) exporter_->ResumeAfterFork();
  mu_.Unlock();
  lifecycle_mu_.Unlock();
}

void Runtime::ForkChild() noexcept {
  // Only this thread exists now. The exporter's thread is gone: its object
  // and connection are leaked, never joined or flushed (the parent still
  // owns the connection; our copy of the socket is closed).
  if (exporter_ != nullptr) {
    exporter_->AbandonAfterFork();
    // Kept reachable (not a leak to LeakSanitizer), never destroyed: its
    // std::thread names a thread that does not exist here.
    Exporter* e = exporter_.release();
    for (auto& slot : g_abandoned) {
      if (slot == nullptr) {
        slot = e;
        break;
      }
    }
  }
  pid_ = getpid();
  stopped_export_dropped_ = 0;
  stopped_records_sent_ = 0;
  recorder_.ResetAfterFork(pid_);
  rings_.DiscardAfterFork();
  forked_ = true;
  registry_.ForkChild();
  mu_.Unlock();
  lifecycle_mu_.Unlock();
}

}  // namespace pitstop::plugin
