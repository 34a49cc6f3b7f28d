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

struct MigrationScenarioResult;

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
  // degraded-node-migration (the README's main command): nothing asks for
  // the migration. From migrate_after_step on, one GPU of the leaver node
  // computes slow_factor x slower (its trainer's emulated GPU time);
  // detection must find it, policy ACT (the controller's default mode here)
  // must move the node to the standby, and the run, as a scheduler
  // watching WatchMigrations, starts the joiners. It also passes only if
  // the job ran at full speed again after the switch.
  bool degrade = false;
  // Emulated GPU time per step of every trainer (ms): what a slow GPU
  // stretches. 0 (the request scenarios): the steps are pure host work.
  double compute_ms = 0;
  double slow_factor = 3;
  int slow_local_rank = 1;  // the degraded GPU of the leaver node
  // Full speed: the median step after the switch at most this many times
  // the median before the fault.
  double full_speed_tolerance = 1.5;
  std::string work_dir;  // empty: a fresh directory under /tmp
  bool keep_work_dir = false;
  // Asked between the run's phases and before judging (null: never): true
  // ends the run with Cancelled, nothing judged and the work dir removed
  // (unless keep_work_dir). The caller also stops the run's processes so
  // that the phase in progress ends (pitstop sim on Ctrl-C).
  std::function<bool()> cancelled;
  std::string log_level = "info";
  std::function<void(const std::string&)> progress;  // null: silent
  // Called with the result and the controller's address once the run is
  // judged, while the deployment still runs (null: none); it may block,
  // for pitstop sim --keep-running.
  std::function<void(const MigrationScenarioResult&,
                     const std::string& controller_address)>
      before_stop;
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
  // longest - median; degraded-node: longest - the degraded median (the
  // speed the job had just before the switch)
  double downtime_ms = 0;
  double restart_ms = 0;   // full restart to its first step, same run
  int shadow_joiners = 0;  // joiners that ran their shadow iterations
  // Final ranks whose weights were compared with the undisturbed run's,
  // and of those the byte-identical ones.
  int weights_compared = 0;
  int weights_identical = 0;
  // degraded-node-migration: the fault that made policy ACT migrate, when
  // the GPU degraded (unix ns, seen by the sim at rank 0's step), and rank
  // 0's median step before the fault, degraded, and after the switch.
  v1::Fault fault;
  uint64_t degrade_unix_ns = 0;
  double before_fault_ms = 0;
  double degraded_ms = 0;
  double after_switch_ms = 0;
  bool full_speed = false;  // after_switch_ms within the tolerance
  // The options that explain the slowdown: each trainer's emulated GPU time
  // per step (ms) and how much longer the degraded GPU takes.
  double compute_ms = 0;
  double slow_factor = 0;
  // Every fault of the job at the end of the run (ListFaults, resolved
  // ones too).
  std::vector<v1::Fault> faults;
  std::string work_dir;
  // The work dir stays after the run: asked for, or the run failed (its
  // failures name logs there).
  bool work_dir_kept = false;
  std::string controller_address;  // gone once the run returned
};

// degraded-node-migration's knobs (degrade, emulated GPU time, a job long
// enough to outlast detection and the migration); the rest as above.
MigrationScenarioOptions DegradedNodeDefaults();

// InvalidArgument, saying which knob and why, for options no run can pass
// with (RunMigrationScenario checks first; a CLI can check before it
// starts anything).
absl::Status ValidateMigrationOptions(const MigrationScenarioOptions& o);

// NotFound when a binary is missing; Internal/DeadlineExceeded when the
// deployment cannot start. A run that went wrong is a result with
// passed=false and its failures.
absl::StatusOr<MigrationScenarioResult> RunMigrationScenario(
    const MigrationScenarioOptions& options);

void PrintMigrationReport(const MigrationScenarioResult& r, std::ostream& out);

}  // namespace pitstop::sim

#endif  // PITSTOP_SRC_SIM_MIGRATION_SCENARIO_H_
