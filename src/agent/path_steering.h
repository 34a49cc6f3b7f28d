// The agent's side of a flow plan (docs/planning.md, "How a plan reaches
// NCCL"): keeps the newest PathDirective per job and writes the node's
// tuner table (include/pitstop/tuner_table.h), one entry per communicator
// whose planned path is degraded, which libnccl-tuner-pitstop.so reads in
// every training process of the node, and the node's NIC plan
// (include/pitstop/nic_plan.h, `<table>.nics`): per communicator the NICs
// its planned flows leave through, which the interposer applies when a
// communicator is next created.
//
// The table file is created at the first directive (a node that never gets
// a plan creates none). Thread-safe: OnDirective from the upstream reader
// thread, the accessors from any thread.
#ifndef PITSTOP_SRC_AGENT_PATH_STEERING_H_
#define PITSTOP_SRC_AGENT_PATH_STEERING_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "pitstop/nic_plan.h"
#include "pitstop/sync.h"
#include "pitstop/tuner_table.h"
#include "pitstop/v1/agent.pb.h"

namespace pitstop::agent {

// The table entries of `directives` (newest per job): degraded
// communicators only; kFlagShapeUnique when no other communicator of the
// directives has the same (n_ranks, n_nodes).
std::vector<tuner::Steering> SteeringOf(
    const std::map<std::string, v1::PathDirective>& directives);

// The NIC plan lines of `directives`: every communicator with planned
// NICs, degraded or not; unique_shape as in SteeringOf.
std::vector<nicplan::NicPlanEntry> NicPlanOf(
    const std::map<std::string, v1::PathDirective>& directives);

class PathSteering {
 public:
  // `table_path`: "" = $PITSTOP_TUNER_TABLE, else the default path.
  explicit PathSteering(std::string table_path);

  // Applies `d` unless an equal or newer epoch of its job was applied (a
  // repeat after a reconnect: OK, nothing rewritten). Internal naming the
  // table's path when it cannot be created or written.
  absl::Status OnDirective(const v1::PathDirective& d);

  // Newest applied epoch of `job` (0: none).
  uint64_t epoch(const std::string& job) const;
  std::string table_path() const;
  std::string nic_plan_path() const { return nic_plan_path_; }

 private:
  const std::string table_path_;
  const std::string nic_plan_path_;
  mutable Mutex mu_;
  std::map<std::string, v1::PathDirective> directives_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<tuner::TunerTableWriter> writer_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pitstop::agent

#endif  // PITSTOP_SRC_AGENT_PATH_STEERING_H_
