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

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pitstop/sync.h"
#include "plugin/abi/profiler_common.h"
#include "plugin/comm_registry.h"
#include "plugin/config.h"
#include "plugin/exporter.h"
#include "plugin/recorder.h"
#include "plugin/ring.h"

namespace pitstop::plugin {

// What the interposer knows about the communicator NCCL is creating on this
// thread (set around the forwarded pncclCommInit*/Split/Shrink call; the
// profiler init NCCL runs inside it reads it).
struct InterposerCall {
  uint64_t parent_comm_hash = 0;
  // Comm hashes of the communicators NCCL's profiler init saw in this call.
  std::vector<uint64_t> created;
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
  // Interposer: the library was LD_PRELOADed (reported as load_mode).
  static void MarkPreloaded() noexcept;
  static InterposerCall*& ThreadInterposerCall() noexcept;

  Recorder* recorder() { return &recorder_; }
  const PluginConfig& config() const { return config_; }
  // Stops the exporter with REASON_EXIT (process exit handler).
  void ShutdownAtExit() noexcept;

 private:
  Runtime();
  abi::NcclResult InitCommImpl(void** context, int abi_version,
                               uint64_t comm_hash, int* activation_mask,
                               const char* comm_name, int n_nodes, int n_ranks,
                               int rank, abi::NcclLogger logfn);
  void Log(abi::NcclLogLevel level, const std::string& msg) noexcept;
  void StartExporterLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const PluginConfig config_;
  const pid_t pid_;
  RingSet rings_;
  Recorder recorder_;
  CommRegistry registry_;

  // Serialises exporter lifecycle: comm add + exporter start (InitComm)
  // against comm end + exporter stop and join (FinalizeComm, exit). Taken
  // before mu_; never on the hot path.
  Mutex lifecycle_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  Mutex mu_;
  std::unique_ptr<Exporter> exporter_ ABSL_GUARDED_BY(mu_);
  abi::NcclLogger logfn_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool warned_ ABSL_GUARDED_BY(mu_) = false;
  bool atexit_registered_ ABSL_GUARDED_BY(mu_) = false;
  int abi_version_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pitstop::plugin

#endif  // PITSTOP_PLUGIN_RUNTIME_H_
