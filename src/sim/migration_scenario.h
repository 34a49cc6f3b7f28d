// `pitstop sim --scenario standby-migration` (docs/migration.md, "The
// standby-migration scenario"): the whole migration path on real processes
// and real collectives. A real controller and one agent per emulated node
// (migration.data_plane library) plus a standby agent; the deterministic
// data-parallel trainer (pitstop-dp-trainer) on nodes x ranks_per_node
// processes over the CPU NCCL backend with the pitstop library
// LD_PRELOADed and communicators virtualised. Mid-run the scenario asks the
// controller (MigrateNode, as pitstopctl migrate does) to move one node's
// ranks to the standby, starts the joiner processes there in sandbox mode,
// and lets the control plane and the library do the rest.
//
// It passes only if the migration COMMITTED, every process exited 0, the
// final weights of every final rank are byte-identical to an undisturbed
// run of the same job, and every global rank ran every step exactly once
// (the leaver's steps, then the joiner's; with node_failure the step that
// failed is redone: migration_judge.h). It measures the downtime
// (longest step around the switch less the median step) and, in the same
// run, a full restart from a checkpoint.
//
// Thread-compatible: one caller.
#ifndef PITSTOP_SRC_SIM_MIGRATION_SCENARIO_H_
#define PITSTOP_SRC_SIM_MIGRATION_SCENARIO_H_

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pitstop/v1/controller.pb.h"

namespace pitstop::sim {

struct MigrationScenarioOptions {
  int nodes = 4;           // training nodes (plus one standby)
  int ranks_per_node = 4;  // 16 ranks by default
  int steps = 600;
  // The migration is requested once rank 0 finished this many steps.
  int migrate_after_step = 150;
  int leaver_node = 1;  // never node 0: rank 0's step times are the probe
  int hidden = 32;
  int batch = 8;
  // Collectives between the progress READY reported and the switch point:
  // room for SWITCH_AT's round trip (controller -> agent -> library).
  int switch_margin = 100;
  // node-failure-migration: the leaver node's processes are killed at
  // migrate_after_step instead; the stayers' collectives fail, they wait in
  // pitstop_trainer_recover, the migration (from_replica) brings joiners in
  // with the state of data-parallel replicas, and every rank redoes the
  // step that failed.
  bool node_failure = false;
  std::string work_dir;  // empty: a fresh directory under /tmp
  bool keep_work_dir = false;
  std::string log_level = "info";
  std::function<void(const std::string&)> progress;  // null: silent
};

struct MigrationScenarioResult {
  std::string scenario;  // standby-migration | node-failure-migration
  bool passed = false;
  std::vector<std::string> failures;  // why not, one line each
  v1::Migration migration;
  int ranks = 0;
  int switch_step = -1;        // first step the joiners ran
  double median_step_ms = 0;   // rank 0, migrated run
  double longest_step_ms = 0;  // rank 0, steps switch-2 .. switch+2
  double downtime_ms = 0;      // longest - median
  double restart_ms = 0;       // full restart to its first step, same run
  int shadow_joiners = 0;      // joiners that ran their shadow iterations
  std::string work_dir;
};

// NotFound when a binary is missing; Internal/DeadlineExceeded when the
// deployment cannot start. A run that went wrong is a result with
// passed=false and its failures.
absl::StatusOr<MigrationScenarioResult> RunMigrationScenario(
    const MigrationScenarioOptions& options);

void PrintMigrationReport(const MigrationScenarioResult& r, std::ostream& out);

}  // namespace pitstop::sim

#endif  // PITSTOP_SRC_SIM_MIGRATION_SCENARIO_H_
