// The migration scenarios' report (migration_scenario.h).
#include <ostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/sim/migration_run.h"
#include "src/sim/migration_scenario.h"

namespace pitstop::sim {
namespace {

// The failures and where the logs are.
void PrintEnd(const MigrationScenarioResult& r, std::ostream& out) {
  for (const std::string& f : r.failures) out << "  FAILED: " << f << "\n";
  out << "  work dir                    " << r.work_dir
      << (r.work_dir_kept ? " (kept: the logs of every process)"
                          : " (removed; --keep-work-dir keeps it)")
      << "\n";
}

}  // namespace

void PrintMigrationReport(const MigrationScenarioResult& r, std::ostream& out) {
  const v1::Migration& m = r.migration;
  auto ms = [](uint64_t a, uint64_t b) {
    return a == 0 || b == 0 || b < a ? std::string("-")
                                     : absl::StrCat((b - a) / 1000000, " ms");
  };
  out << "\n== " << r.scenario << ": " << (r.passed ? "PASS" : "FAIL") << "\n";
  out << "  ranks                       " << r.ranks << "\n";
  if (!r.fault.fault_id().empty())
    migration_internal::PrintPolicyReport(r, out);
  out << "  faults of the job           "
      << migration_internal::DescribeFaults(r.faults) << "\n";
  if (m.migration_id().empty()) {
    out << "  migration                   none started\n";
    PrintEnd(r, out);
    return;
  }
  out << "  migration                   " << m.migration_id() << " "
      << m.leaver_host() << " -> " << m.joiner_host() << " ("
      << v1::MigrationState_Name(m.state()) << ")\n";
  if (!m.abort_reason().empty()) {
    out << "  aborted because             " << m.abort_reason() << "\n";
  }
  out << "  ids (joiner's library)      "
      << ms(m.prepare_unix_ns(), m.ids_unix_ns()) << "\n";
  out << "  prepare (ids to READY)      "
      << ms(m.ids_unix_ns() ? m.ids_unix_ns() : m.prepare_unix_ns(),
            m.ready_unix_ns())
      << "\n";
  out << "  switch (SWITCH_AT phase)    "
      << ms(m.ready_unix_ns(), m.switched_unix_ns())
      << " (training runs on until the agreed step; not downtime)\n";
  if (r.switch_step < 0) {
    out << "  switch step                 none: no joiner ran a step\n";
    PrintEnd(r, out);
    return;
  }
  out << "  switch step                 " << r.switch_step << " (seq "
      << m.switch_seq() << ")\n";
  out << absl::StrFormat(
      "  downtime                    %.1f ms (longest step around the switch "
      "%.1f ms - %s %.1f ms)\n",
      r.downtime_ms, r.longest_step_ms,
      r.scenario == "degraded-node-migration"
          ? "median step just before it (degraded)"
          : "median step",
      r.median_step_ms);
  out << "  final weights               " << r.weights_identical << " of "
      << r.weights_compared << " ranks byte-identical to the undisturbed run\n";
  out << "  shadow iterations           " << r.shadow_joiners
      << (r.shadow_joiners == 1 ? " joiner" : " joiners") << " warmed up on "
      << migration_internal::kShadowSteps << " recorded steps before joining\n";
  out << absl::StrFormat(
      "  full restart (same run)     %.1f ms (new processes + communicator + "
      "checkpoint load + first step; no detection or scheduling)\n",
      r.restart_ms);
  if (r.restart_ms > 0 && r.downtime_ms >= r.restart_ms) {
    // Seen on a machine with a load of 8 on 2 cores: one step around the
    // switch waited for the CPU. Say so rather than let the numbers pass.
    out << absl::StrFormat(
        "  note                        this downtime is %.1fx the local "
        "restart: on a loaded machine one step around the switch can wait "
        "for a CPU; run again, or compare several runs\n",
        r.downtime_ms / r.restart_ms);
  }
  PrintEnd(r, out);
}

}  // namespace pitstop::sim
