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

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "pitstop/v1/agent.pb.h"
#include "pitstop/v1/controller.pb.h"
#include "src/controller/detect/fault_tracker.h"

namespace pitstop::controller {

// Name of an ncclResult_t ("ncclSystemError"); "ncclResult N" if unknown.
std::string NcclResultName(int32_t result);

// The table's shares (round 21, R21-3: it had only a cluster-wide cap of
// 1024 jobs, never emptied, and one node's processes naming 1024 made-up
// jobs in their environments filled it for good: every other job's
// failed creations were dropped without a fault or a count).
// Jobs in the table; each is charged to the host whose report created it.
inline constexpr size_t kMaxConfigJobs = 1024;
inline constexpr size_t kMaxConfigJobsPerHost = 16;
// Failed processes remembered per job, and per host within a job (a host
// runs a few hundred ranks at most); more are refused (a job of 10^5 ranks
// that all fail says the same thing with 4096 of them).
inline constexpr size_t kMaxFailuresPerJob = 4096;
inline constexpr size_t kMaxFailuresPerHostJob = 256;
// A job whose failures changed nothing for this long is forgotten (its
// fault stays as raised) and its host's share given back.
inline constexpr int64_t kConfigJobExpiryNs = int64_t{3600} * 1'000'000'000;

class ConfigFaults {
 public:
  // A RankLifecycle KIND_COMM_INIT_FAILED reported by `host` at `now_ns`
  // (monotonic). ResourceExhausted naming the share when the job or the
  // failure would take the cluster, `host` or (host, job) past it; counted
  // in refused().
  absl::Status Add(absl::string_view host, const v1::RankLifecycle& l,
                   int64_t now_ns);
  // Process (host, pid) created a communicator: a failed one retried and
  // succeeded. Once every failed process of a job did, its fault resolves.
  void Created(absl::string_view host, uint32_t pid);
  // Whether (host, pid) reported a failed creation: its death or exit is
  // that fault's consequence, not a process fault of its own.
  bool Failed(absl::string_view host, uint32_t pid) const;
  // Raises or updates the fault of every job whose failures changed;
  // resolves recovered ones. Key "config/<job>".
  // Jobs unchanged for kConfigJobExpiryNs before `now_ns` are forgotten
  // first.
  void Raise(FaultTracker* tracker, int64_t now_ns);
  // Failures refused by a share.
  uint64_t refused() const { return refused_; }
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
    // Failures per reporting host.
    std::map<std::string, size_t> per_host;
    std::string creator;  // charged for the job's place in the table
    int64_t last_change_ns = 0;
    bool changed = false;
  };
  static v1::Fault BuildFault(const std::string& job_id, const Job& job);
  absl::Status Refuse(std::string why);
  void Expire(int64_t now_ns);

  std::map<std::string, Job> jobs_;
  // Jobs each host's reports created.
  std::map<std::string, size_t> jobs_per_host_;
  uint64_t refused_ = 0;
  // (host, pid) -> job, for Created / Failed.
  std::map<std::pair<std::string, uint32_t>, std::string> owner_;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_DETECT_CONFIG_FAULT_H_
