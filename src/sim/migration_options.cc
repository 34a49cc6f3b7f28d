// The migration scenarios' options: which are valid, and the defaults of
// degraded-node-migration (migration_scenario.h).
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/sim/migration_scenario.h"

namespace pitstop::sim {
namespace {

// degraded-node-migration: what a job must outlast after its GPU degrades,
// on this machine (docs/migration.md: confirmed +4.8 s, committed +6.3 s
// at 16 ranks), with room for a loaded one.
constexpr double kDetectAndMigrateMs = 8000;

}  // namespace

absl::Status ValidateMigrationOptions(const MigrationScenarioOptions& o) {
  if (o.nodes < 2 || o.leaver_node < 1 || o.leaver_node >= o.nodes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the migration scenarios need >= 2 nodes (got ", o.nodes,
        "): node 0 stays (rank 0's step times are the probe) and node ",
        o.leaver_node, " moves"));
  }
  if (o.ranks_per_node < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ranks per node must be >= 1 (got ", o.ranks_per_node, ")"));
  }
  if (o.switch_margin < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "switch margin must be >= 1 collective (got ", o.switch_margin, ")"));
  }
  if (o.compute_ms < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "emulated GPU time must be >= 0 ms per step (got ", o.compute_ms, ")"));
  }
  if (o.migrate_after_step < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "migrate-after-step must be >= 1 (got ", o.migrate_after_step, ")"));
  }
  // (degraded-node: the stricter minimum below.)
  if (!o.degrade && o.migrate_after_step + o.switch_margin + 10 >= o.steps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the migration needs steps past migrate-after-step + switch margin "
        "+ 10 (",
        o.migrate_after_step, " + ", o.switch_margin, " + 10 >= steps ",
        o.steps,
        "); give --steps >= ", o.migrate_after_step + o.switch_margin + 11));
  }
  if (o.degrade &&
      (o.node_failure || o.compute_ms <= 0 || o.slow_factor <= 1 ||
       o.slow_local_rank < 0 || o.slow_local_rank >= o.ranks_per_node)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "degraded-node-migration needs emulated GPU time (compute-ms > 0, "
        "got ",
        o.compute_ms, "), slow factor > 1 (got ", o.slow_factor,
        ") and at least ", o.slow_local_rank + 1, " ranks per node (GPU ",
        o.slow_local_rank, " of the leaver node degrades; got ",
        o.ranks_per_node, ")"));
  }
  if (o.degrade) {
    // Detection confirms after ~5 s (1 s windows, 3 of 5), the migration
    // takes ~2 s more, and a degraded step lasts at least slow_factor x
    // compute_ms: the job must outlast that after the GPU degrades.
    const int needed =
        static_cast<int>(
            std::ceil(kDetectAndMigrateMs / (o.slow_factor * o.compute_ms))) +
        o.switch_margin + 20;
    if (o.steps - o.migrate_after_step < needed) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "degraded-node-migration: the job must run at least %d steps after "
          "the GPU degrades at step %d (detection ~5 s and the migration ~2 s "
          "at %.0f ms or more per degraded step, + the switch margin); give "
          "--steps >= %d",
          needed, o.migrate_after_step, o.slow_factor * o.compute_ms,
          o.migrate_after_step + needed));
    }
  }
  return absl::OkStatus();
}

MigrationScenarioOptions DegradedNodeDefaults() {
  MigrationScenarioOptions o;
  o.degrade = true;
  o.compute_ms = 10;
  // At 16 ranks on 2 cores a step is ~50 ms: 150 healthy steps, then
  // detection (~6 s) and the migration (~2 s) take ~150 degraded ones.
  o.steps = 700;
  o.migrate_after_step = 150;
  o.switch_margin = 20;
  return o;
}

}  // namespace pitstop::sim
