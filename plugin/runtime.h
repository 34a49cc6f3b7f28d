// Process-wide state of the in-process library: configuration, rings,
// recorder, communicator registry and exporter.
//
// NCCL's plugin ABI is a set of global C symbols, so this one object is
// global too (created at the first profiler init, never destroyed: gRPC and
// the exporter thread must not be torn down by static destructors while NCCL
// threads may still call us; the library is linked -z nodelete).
//
// Threads: InitComm/FinalizeComm from NCCL's init/destroy threads (locked);
// recorder() from any NCCL thread (lock-free).
#ifndef PITSTOP_PLUGIN_RUNTIME_H_
#define PITSTOP_PLUGIN_RUNTIME_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plugin/abi/profiler_common.h"
#include "plugin/comm_registry.h"
#include "plugin/config.h"
#include "plugin/exporter.h"
#include "plugin/plugin_sync.h"
#include "plugin/recorder.h"
#include "plugin/ring.h"

namespace pitstop::plugin {

class CommTable;
class Rebuilder;

// What the interposer knows about the communicator NCCL is creating on this
// thread (set around the forwarded pncclCommInit*/Split/Shrink call; the
// profiler init NCCL runs inside it reads it).
struct InterposerCall {
  uint64_t parent_comm_hash = 0;
  // Comm hashes of the communicators NCCL's profiler init saw in this call.
  std::vector<uint64_t> created;
};

// Totals for the stats file (plugin/stats.h).
struct RuntimeCounters {
  uint64_t ring_full = 0;
  uint64_t pool_exhausted = 0;
  uint64_t ignored = 0;
  uint64_t events_recorded = 0;  // records that went into the rings
  uint64_t export_dropped = 0;   // drained but not delivered (no agent)
  uint64_t records_sent = 0;     // written into an agent's ring
  int abi_version = 0;           // of the last profiler init
  uint32_t event_mask = 0;       // always-on set (PITSTOP_EVENT_MASK)
};

class Runtime {
 public:
  // The runtime, created on first use (the first profiler init). Null when
  // it cannot be allocated (NCCL then runs without us).
  static Runtime* GetOrCreate() noexcept;
  // The runtime if created, else null (hot path: one atomic load).
  static Runtime* Get() noexcept;

  // Profiler init, any version. Writes *context (null on failure).
  abi::NcclResult InitComm(void** context, int abi_version, uint64_t comm_hash,
                           int* activation_mask, const char* comm_name,
                           int n_nodes, int n_ranks, int rank,
                           abi::NcclLogger logfn) noexcept;
  abi::NcclResult FinalizeComm(void* context) noexcept;

  // Interposer: merge membership (parent, global rank, device) learned after
  // NCCL created the communicator; mark an abort/revoke.
  void UpdateComm(uint64_t comm_hash, const CommInfo& extra) noexcept;
  void AbortComm(uint64_t comm_hash) noexcept;
  // Interposer: a communicator creation call returned an error. Queued for
  // the agent (the exporter starts if no communicator started it: a
  // process whose first creation fails has none).
  void ReportInitFailure(const InitFailure& failure) noexcept;
  // Migration (plugin/rebuild.h): creates the rebuilder over the
  // interposer's handle table at the first call and starts the exporter,
  // whose connection brings the agent's directives (a migration joiner has
  // no communicator that would start it). Null when it cannot be made.
  Rebuilder* EnableMigration(CommTable* table) noexcept;
  // The rebuilder once enabled, else null (any thread).
  Rebuilder* rebuilder() noexcept {
    return rebuilder_.load(std::memory_order_acquire);
  }
  // Interposer: the library was LD_PRELOADed (reported as load_mode).
  static void MarkPreloaded() noexcept;
  static bool Preloaded() noexcept;
  // Since the process started (or forked), over every exporter it ran.
  // Any thread; not the hot path.
  RuntimeCounters Counters() noexcept;
  static InterposerCall*& ThreadInterposerCall() noexcept;

  Recorder* recorder() { return &recorder_; }
  // A warning through NCCL's logger (stderr before NCCL gave one).
  void LogWarn(const std::string& msg) noexcept { Log(abi::kNcclLogWarn, msg); }
  const PluginConfig& config() const { return config_; }
  // Stops the exporter with REASON_EXIT (process exit handler).
  void ShutdownAtExit() noexcept;

  // pthread_atfork handlers (registered when the runtime is created).
  // Prepare takes the locks so the child sees consistent state; Child
  // forgets the parent's exporter thread and connection (never joined),
  // its communicators and queued records: the child records nothing and
  // starts nothing until it creates a communicator of its own.
  // Not checked by -Wthread-safety: they also take and release the
  // registry's lock, which this header cannot name.
  void ForkPrepare() noexcept PLUGIN_ACQUIRE(lifecycle_mu_, mu_) PLUGIN_NO_TSA;
  void ForkParent() noexcept PLUGIN_RELEASE(lifecycle_mu_, mu_) PLUGIN_NO_TSA;
  void ForkChild() noexcept PLUGIN_RELEASE(lifecycle_mu_, mu_) PLUGIN_NO_TSA;

 private:
  Runtime();
  abi::NcclResult InitCommImpl(void** context, int abi_version,
                               uint64_t comm_hash, int* activation_mask,
                               const char* comm_name, int n_nodes, int n_ranks,
                               int rank, abi::NcclLogger logfn);
  void Log(abi::NcclLogLevel level, const std::string& msg) noexcept;
  void StartExporterLocked() PLUGIN_REQUIRES(mu_);
  // Stops the exporter (if any) with `reason` and keeps its counts.
  void StopExporter(GoodbyeReason reason) PLUGIN_REQUIRES(lifecycle_mu_);

  const PluginConfig config_;
  pid_t pid_;  // changed only in ForkChild
  RingSet rings_;
  Recorder recorder_;
  CommRegistry registry_;

  // Serialises exporter lifecycle: comm add + exporter start (InitComm)
  // against comm end + exporter stop and join (FinalizeComm, exit). Taken
  // before mu_; never on the hot path.
  Mutex lifecycle_mu_ PLUGIN_ACQUIRED_BEFORE(mu_);
  Mutex mu_;
  std::unique_ptr<Exporter> exporter_ PLUGIN_GUARDED_BY(mu_);
  abi::NcclLogger logfn_ PLUGIN_GUARDED_BY(mu_) = nullptr;
  bool warned_ PLUGIN_GUARDED_BY(mu_) = false;
  bool atexit_registered_ PLUGIN_GUARDED_BY(mu_) = false;
  int abi_version_ PLUGIN_GUARDED_BY(mu_) = 0;
  // Set in a forked child; the first init there drops what the parent's
  // stale handles may have recorded since.
  bool forked_ PLUGIN_GUARDED_BY(mu_) = false;
  // What stopped exporters dropped and sent (RuntimeCounters).
  uint64_t stopped_export_dropped_ PLUGIN_GUARDED_BY(mu_) = 0;
  uint64_t stopped_records_sent_ PLUGIN_GUARDED_BY(mu_) = 0;
  bool chain_loaded_ PLUGIN_GUARDED_BY(lifecycle_mu_) = false;
  // Created once (under lifecycle_mu_), never destroyed, like the runtime.
  std::atomic<Rebuilder*> rebuilder_{nullptr};
};

}  // namespace pitstop::plugin

#endif  // PITSTOP_PLUGIN_RUNTIME_H_
