// Internal to the torch-migration scenario (torch_migration_scenario.h):
// the failures it can make during the migration, when each is made, what a
// run with one must show, and the readers of the run's logs. Only
// torch_migration_*.cc include this.
//
// Thread-compatible: one caller.
#ifndef PITSTOP_SRC_SIM_TORCH_MIGRATION_FAULTS_H_
#define PITSTOP_SRC_SIM_TORCH_MIGRATION_FAULTS_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pitstop/v1/controller.grpc.pb.h"
#include "src/sim/migration_judge.h"
#include "src/sim/torch_migration_scenario.h"

namespace pitstop::sim::torch_migration_internal {

// How long every process of the job may take to end after a kill that ends
// the job: far below the process group's timeout (30 min) and the CPU
// backend's (300 s), which is where a blocked stayer would end, and far
// above a loaded machine's process exits.
inline constexpr absl::Duration kEndBound = absl::Seconds(60);

// Waits for `fault`'s moment in migration `id` and SIGKILLs `victim`:
//   joiner-dies-in-sandbox: once the joiner's library made the migration's
//     ids (it is up, warming up in the sandbox);
//   leaver-dies-in-transfer: once SWITCH_AT went out (the leaver sends its
//     state at the switch step, a switch margin later);
//   joiner-dies-after-switch: once `joiner_log` says it joined.
// The kill's time (MonotonicNowNs), or an error when the moment never came
// (the migration ended first, or 3 minutes passed).
absl::StatusOr<int64_t> KillAtTheMoment(TorchMigrationFault fault,
                                        v1::Controller::Stub* stub,
                                        const std::string& id, pid_t victim,
                                        const std::string& joiner_log,
                                        const std::function<bool()>& cancelled);

// The training lines of a losses-rank<R>.jsonl as (step index, ms): the
// job logs step S+1 after running step S (0-based, as the judge counts).
StepLogLines LossLog(const std::string& path);

// The largest number that follows `key` in `text` (-1 when none).
double LargestAfter(const std::string& text, const std::string& key);

// The collective errors in a torchrun log: the lines the pitstop_nccl
// backend raises ("pitstop_nccl allreduce failed on rank R of N: ...").
std::vector<std::string> CollectiveErrors(const std::string& log);

// What a run with `o.fault` must show, given the migration as it ended and
// the stayers' collective errors; each failure is passed to `fail`.
void JudgeFault(const TorchMigrationOptions& o, const TorchMigrationResult& r,
                const std::function<void(const std::string&)>& fail);

}  // namespace pitstop::sim::torch_migration_internal

#endif  // PITSTOP_SRC_SIM_TORCH_MIGRATION_FAULTS_H_
