// `pitstop sim --scenario torch-migration` (docs/pytorch.md "The
// torch-migration scenario"): the demo PyTorch DDP job under torchrun on
// emulated nodes plus a standby, one node moved to the standby mid-run
// through the library's standby migration, judged like the C++ trainer's
// standby-migration scenario.
//
// 1. A real controller and agents (node0..node<N-1>, the standby spare0),
//    all with --migration-data-plane library.
// 2. A reference run: the same job without pitstop, to its end.
// 3. The migrated run: the job with the library preloaded, communicators
//    virtualised, every rank recording its first collectives for the
//    joiners' shadow steps. After `migrate_after_step` steps the scenario
//    calls MigrateNode node<leaver> --to spare0 (what `pitstopctl migrate`
//    calls) and starts each moved rank's joiner: the leaver's command line
//    and environment (read from /proc, as a launcher on the standby would
//    be given them) with the standby's agent, PITSTOP_MIGRATION_ROLE=joiner
//    and the shadow directory. This scenario plays the launcher; the
//    issue's Slurm / Kubernetes / plain launchers are not built.
// 4. Judged: the migration COMMITTED, every torchrun and joiner exited 0,
//    every final rank's weights digest equals the reference's, every rank's
//    loss log holds steps 1..N exactly once in order; the downtime (the
//    lowest staying rank's longest step around the switch less its median)
//    is printed.
//
// Thread-compatible: one caller.
#ifndef PITSTOP_SRC_SIM_TORCH_MIGRATION_SCENARIO_H_
#define PITSTOP_SRC_SIM_TORCH_MIGRATION_SCENARIO_H_

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pitstop/v1/controller.pb.h"

namespace pitstop::sim {

inline constexpr char kTorchMigrationScenario[] = "torch-migration";
inline constexpr char kTorchMigrationStandby[] = "spare0";
inline constexpr char kTorchMigrationAbout[] =
    "the PyTorch DDP job under torchrun (pitstop LD_PRELOADed, communicators "
    "virtualised) on 2 nodes x 2 ranks plus a standby; mid-run node1 is "
    "moved to the standby (MigrateNode): its ranks hand their model, "
    "optimizer and RNG state to joiners that built their process group and "
    "DDP in the sandbox; passes when the final weights are bit-identical to "
    "an undisturbed run and every step ran once";

// A failure made during the migration (docs/pytorch.md "When a migration
// meets a failure"): one process SIGKILLed at a chosen moment, and what
// the run must show instead of a committed migration.
enum class TorchMigrationFault {
  kNone,
  // The highest moved rank's joiner, once its library made the migration's
  // ids (it warms up in the sandbox): the migration aborts naming the
  // joiner and the job trains on unaffected (final weights bit-identical
  // to an undisturbed run, every step once, every torchrun exits 0).
  kJoinerDiesInSandbox,
  // The highest moved rank's leaver, once SWITCH_AT went out (before it
  // sent its state at the switch step): the migration aborts naming the
  // leaver, every process ends promptly, the stayers' errors name a dead
  // rank. (The stayers cannot train on: recovery of a torch job from a
  // replica is not built.)
  kLeaverDiesInTransfer,
  // The highest moved rank's joiner, right after it joined: every process
  // ends promptly and the stayers' errors name it (a node failure on the
  // new communicator; recovery from a replica is not built for torch).
  kJoinerDiesAfterSwitch,
};
absl::string_view TorchMigrationFaultName(TorchMigrationFault f);
absl::StatusOr<TorchMigrationFault> ParseTorchMigrationFault(
    absl::string_view name);

struct TorchMigrationOptions {
  int nodes = 2;
  int ranks_per_node = 2;
  int steps = 200;
  int migrate_after_step = 10;
  // Collectives between the progress READY reported and the switch point
  // (the controller's --migrate-switch-margin; one all-reduce per step).
  int switch_margin = 20;
  // The node whose ranks move. Node 0 works too: its torchrun agent, which
  // hosts the job's store, waits for the other node's before it exits, and
  // a rank-0 joiner reads the job's NCCL id from the store.
  int leaver_node = 1;
  // Steps each joiner runs in the sandbox before joining: DDP builds its
  // buckets again after the first step (a broadcast from rank 0), so a
  // joiner must have gone through two steps to issue the job's collectives
  // afterwards; 3 leaves one spare. Needs records of the first
  // collectives (PITSTOP_SHADOW_COLLECTIVES, 16 by default).
  int shadow_steps = 3;
  uint64_t seed = 1;
  TorchMigrationFault fault = TorchMigrationFault::kNone;
  std::string work_dir;  // empty: a fresh temporary directory
  bool keep_work_dir = false;
  std::string log_level = "warn";
  std::function<void(const std::string&)> progress;  // null: silent
  std::function<bool()> cancelled;                   // null: never
};

struct TorchMigrationResult {
  bool passed = false;
  std::vector<std::string> failures;
  v1::Migration migration;
  int ranks = 0;
  int steps = 0;
  int joiners = 0;
  int switch_step = -1;  // the first step a joiner ran (1-based, as logged)
  int weights_compared = 0;
  int weights_identical = 0;
  int probe_rank = 0;          // the lowest rank that stays
  double longest_step_ms = 0;  // probe_rank's, around the switch
  double median_step_ms = 0;   // probe_rank's, the whole run
  double downtime_ms = 0;
  // From the processes' own lines (pitstop.torch.migration), the largest
  // over the moved ranks: a leaver's poll that sent its state, a joiner's
  // restore of the small state (RNGs, hyper-parameters) after its join.
  double leaver_poll_ms = -1;
  double joiner_restore_ms = -1;
  // With a fault: the rank whose process was killed, how long after the
  // kill the job's last process (torchrun or joiner) ended, and the
  // stayers' collective errors (from their torchrun logs).
  int victim_rank = -1;
  double ended_after_kill_s = -1;
  std::string last_to_end;  // "torchrun" or "the joiner of rank R"
  // What was still running when the scenario stopped waiting (kEndBound
  // after the kill, or a run's deadline) and killed it: one line per
  // process, with its state and each thread's wait channel from /proc.
  std::vector<std::string> still_running;
  std::vector<std::string> stayer_errors;
  double reference_s = 0;  // wall time of the undisturbed run
  double migrated_s = 0;   // wall time of the migrated run
  std::string work_dir;
  bool work_dir_kept = false;
};

absl::Status ValidateTorchMigrationOptions(const TorchMigrationOptions& o);

// Runs the scenario. An error when it could not run (a daemon, torchrun or
// the backend missing); a run that ran is judged in the result.
absl::StatusOr<TorchMigrationResult> RunTorchMigrationScenario(
    const TorchMigrationOptions& options);

void PrintTorchMigrationReport(const TorchMigrationResult& r,
                               std::ostream& out);

}  // namespace pitstop::sim

#endif  // PITSTOP_SRC_SIM_TORCH_MIGRATION_SCENARIO_H_
