// The simulator coordinator: runs one scenario end to end on loopback.
//
//   1. builds the Plan (model.h) and writes the resolved scenario for ranks;
//   2. starts a LocalCluster: pitstop-controller + one pitstop-agent per node;
//   3. starts one pitstop-sim-rank process per rank, all sharing one start
//      time on CLOCK_MONOTONIC, each pointed at its node's agent;
//   4. watches the controller's WatchFaults stream while the job runs,
//      printing progress; then collects ListFaults and scores the run.
//
// Call from one thread; it blocks for the scenario's duration plus start-up
// and drain (seconds).
#ifndef PITSTOP_SRC_SIM_RUNNER_H_
#define PITSTOP_SRC_SIM_RUNNER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/sim/model.h"
#include "src/sim/plan_watch.h"
#include "src/sim/score.h"

namespace pitstop::sim {

struct RunResult;

struct RunOptions {
  // Logs, sockets, database; empty = fresh dir under /tmp, removed after
  // unless keep_work_dir.
  std::string work_dir;
  bool keep_work_dir = false;
  std::string daemon_log_level = "warn";
  int agent_batch_ms = 200;
  std::string controller_config;  // optional YAML for the controller
  // Progress and fault lines go here (one call per line); null = silent.
  std::function<void(const std::string&)> progress;
  // Seconds between progress lines.
  double progress_period_s = 3;
  // After the ranks are done, how long to let the controller settle.
  double drain_s = 2;
  // Keep the cluster up after the run until `keep_running()` returns false
  // (polled every 200 ms); null = stop at once.
  std::function<bool()> keep_running;
  // Called with the scored result while the cluster is still up (before
  // keep_running is polled), e.g. to print the report.
  std::function<void(const RunResult&)> after_run;
  // Called once the cluster is up (e.g. to print its address).
  std::function<void(const std::string& controller_address,
                     const std::string& work_dir)>
      on_cluster_ready;
};

struct RunResult {
  Plan plan;
  std::vector<ObservedFault> faults;  // in order of first appearance
  RunScore score;                     // points into plan and faults
  std::string controller_address;
  std::string work_dir;
  int ranks_crashed = 0;                 // rank processes that died (planned)
  std::vector<std::string> rank_errors;  // unexpected rank exits
  // Scenarios with `planning:` (docs/planning.md): the live plan's epochs
  // as the controller made them, its newest state and each agent's table.
  std::vector<PlanEpoch> plan_epochs;
  v1::FlowPlan final_plan;
  std::vector<TunerTableView> tuner_tables;
  double wall_s = 0;
};

// NotFound if a binary is missing; Internal if the cluster fails to start.
// The returned RunResult must not be copied (score points into it); it is
// heap-allocated for that reason.
absl::StatusOr<std::unique_ptr<RunResult>> RunScenario(
    const Scenario& scenario, const RunOptions& options);

}  // namespace pitstop::sim

#endif  // PITSTOP_SRC_SIM_RUNNER_H_
