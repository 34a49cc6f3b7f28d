// torch-migration's option checks and report (torch_migration_scenario.h).
#include <ostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/sim/torch_migration_scenario.h"

namespace pitstop::sim {

absl::Status ValidateTorchMigrationOptions(const TorchMigrationOptions& o) {
  if (o.nodes < 2 || o.ranks_per_node < 1) {
    return absl::InvalidArgumentError(
        "torch-migration: needs --nodes >= 2 (one node moves, one stays) and "
        "--ranks-per-node >= 1");
  }
  if (o.leaver_node < 0 || o.leaver_node >= o.nodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("torch-migration: --leaver-node ", o.leaver_node,
                     ": the job has nodes 0..", o.nodes - 1));
  }
  if (o.migrate_after_step < o.shadow_steps ||
      o.migrate_after_step + o.switch_margin + 10 > o.steps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "torch-migration: --migrate-after-step ", o.migrate_after_step,
        " must be >= the joiners' ", o.shadow_steps, " shadow steps, and ",
        "--steps ", o.steps, " must leave the switch margin (", o.switch_margin,
        ") and 10 steps after it"));
  }
  return absl::OkStatus();
}

void PrintTorchMigrationReport(const TorchMigrationResult& r,
                               std::ostream& out) {
  out << "== " << kTorchMigrationScenario << ": "
      << (r.passed ? "PASS" : "FAIL") << "\n";
  auto line = [&out](const std::string& k, const std::string& v) {
    out << absl::StrFormat("  %-26s  %s\n", k, v);
  };
  line("ranks", absl::StrCat(r.ranks, " (", r.joiners, " moved)"));
  line("migration",
       absl::StrCat(r.migration.migration_id(), " ", r.migration.leaver_host(),
                    " -> ", kTorchMigrationStandby, " (",
                    v1::MigrationState_Name(r.migration.state()), ")"));
  const v1::Migration& m = r.migration;
  auto ms = [](uint64_t a, uint64_t b) {
    return a == 0 || b == 0 || b < a ? std::string("-")
                                     : absl::StrCat((b - a) / 1000000, " ms");
  };
  line("ids (joiner's library)",
       absl::StrCat(ms(m.prepare_unix_ns(), m.ids_unix_ns()),
                    " (the joiners start: python and torch, until their "
                    "library reaches the agent)"));
  line("prepare (ids to READY)",
       ms(m.ids_unix_ns() ? m.ids_unix_ns() : m.prepare_unix_ns(),
          m.ready_unix_ns()));
  line("switch (SWITCH_AT phase)",
       absl::StrCat(ms(m.ready_unix_ns(), m.switched_unix_ns()),
                    " (training runs on until the agreed step; not downtime)"));
  if (r.switch_step >= 0) {  // a run whose ranks moved (no fault, or late)
    line("switch step", absl::StrCat(r.switch_step, " of ", r.steps, " (seq ",
                                     m.switch_seq(), ")"));
    line("downtime",
         absl::StrFormat("%.1f ms (rank %d's longest step around the switch "
                         "%.1f ms - median step %.1f ms)",
                         r.downtime_ms, r.probe_rank, r.longest_step_ms,
                         r.median_step_ms));
    line("leaver's poll (sends)",
         absl::StrFormat("%.1f ms; joiner's restore after its join %.1f ms",
                         r.leaver_poll_ms, r.joiner_restore_ms));
  }
  if (r.weights_compared > 0) {
    line("weights",
         absl::StrCat(r.weights_identical, "/", r.weights_compared,
                      " ranks bit-identical to the undisturbed run"));
  }
  line("wall time", absl::StrFormat("reference %.1f s, migrated run %.1f s",
                                    r.reference_s, r.migrated_s));
  if (r.victim_rank >= 0) {
    line("fault", absl::StrCat("rank ", r.victim_rank, " SIGKILLed; ",
                               r.migration.abort_reason().empty()
                                   ? "no abort"
                                   : "aborted: " + r.migration.abort_reason()));
    line("ended after the kill",
         absl::StrFormat("%.1f s (every process that was to end; the last: "
                         "%s)",
                         r.ended_after_kill_s,
                         r.last_to_end.empty() ? "-" : r.last_to_end));
    for (const std::string& e : r.stayer_errors) line("stayer's error", e);
  }
  for (const std::string& p : r.still_running) line("still running", p);
  for (const std::string& f : r.failures) line("FAILURE", f);
  if (r.work_dir_kept) line("work dir", r.work_dir);
}

}  // namespace pitstop::sim
