// Configuration faults: communicator creation calls that returned an error
// (NVIDIA/nccl#426: ncclCommInitRank failing with ncclSystemError after
// "NET/IB : No device found" or "Call to connect returned Connection
// refused" during bootstrap). The job is misconfigured (network interface,
// HCA list, firewall, a peer that never started): one FAULT_CLASS_CONFIG
// fault per job, suspects the failing ranks at RANK level so that no
// hardware action (Slurm drain, migration) ever takes it for a machine's.
// Internal to pitstop_detect; not thread-safe (the engine serialises).
#ifndef PITSTOP_CONTROLLER_DETECT_CONFIG_FAULT_H_
#define PITSTOP_CONTROLLER_DETECT_CONFIG_FAULT_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "pitstop/v1/agent.pb.h"
#include "pitstop/v1/controller.pb.h"
#include "src/controller/detect/fault_tracker.h"

namespace pitstop::controller {

// Name of an ncclResult_t ("ncclSystemError"); "ncclResult N" if unknown.
std::string NcclResultName(int32_t result);

class ConfigFaults {
 public:
  // A RankLifecycle KIND_COMM_INIT_FAILED reported by `host`.
  void Add(absl::string_view host, const v1::RankLifecycle& l);
  // Process (host, pid) created a communicator: a failed one retried and
  // succeeded. Once every failed process of a job did, its fault resolves.
  void Created(absl::string_view host, uint32_t pid);
  // Whether (host, pid) reported a failed creation: its death or exit is
  // that fault's consequence, not a process fault of its own.
  bool Failed(absl::string_view host, uint32_t pid) const;
  // Raises or updates the fault of every job whose failures changed;
  // resolves recovered ones. Key "config/<job>".
  void Raise(FaultTracker* tracker);
  // Adds (host, pid)'s death to its job's fault as evidence (once).
  void NoteDeath(absl::string_view host, uint32_t pid);

 private:
  struct Failure {
    int32_t global_rank = -1;
    v1::CommInitFailure what;
    bool recovered = false;
    bool died = false;
  };
  struct Job {
    // (host, pid) -> what failed there (first failure kept).
    std::map<std::pair<std::string, uint32_t>, Failure> failures;
    bool changed = false;
  };
  static v1::Fault BuildFault(const std::string& job_id, const Job& job);

  std::map<std::string, Job> jobs_;
  // (host, pid) -> job, for Created / Failed.
  std::map<std::pair<std::string, uint32_t>, std::string> owner_;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_DETECT_CONFIG_FAULT_H_
