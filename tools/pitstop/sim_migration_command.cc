#include "tools/pitstop/sim_migration_command.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/sim/report.h"
#include "tools/pitstop/sim_flags.h"
#include "tools/pitstop/sim_interrupt.h"

namespace pitstop::tool {
namespace {

constexpr char kDegraded[] = "degraded-node-migration";
constexpr char kNodeFailure[] = "node-failure-migration";

constexpr const char* kMigrationScenarios[][2] = {
    {kDegraded,
     "the default: 16 ranks of the deterministic trainer on 4 nodes + 1 "
     "standby; a GPU of node1 degrades mid-run, pitstop finds it and policy "
     "ACT moves node1's ranks to the standby with nobody asking; passes when "
     "the job runs at full speed again, its weights bit-identical to an "
     "undisturbed run"},
    {"standby-migration",
     "16 ranks of the deterministic trainer on 4 nodes + 1 standby; node1's "
     "ranks move to the standby mid-run (TrainMover); passes when the final "
     "weights are bit-identical to an undisturbed run and every step ran "
     "once; prints the downtime and a full restart's cost"},
    {kNodeFailure,
     "the same job; node1's trainer processes are killed mid-run: the "
     "others' all-reduce fails, pitstop moves the dead ranks to the standby "
     "with the state of data-parallel replicas and every rank redoes the "
     "failed step; passes when the weights are bit-identical"}};

// "default: 700 for degraded-node-migration, 600 for the others", or one
// value when both agree.
template <typename T>
std::string DefaultText(T degraded, T others) {
  if (degraded == others) return absl::StrCat("default: ", degraded);
  return absl::StrCat("default: ", degraded, " for ", kDegraded, ", ", others,
                      " for standby-migration and node-failure-migration");
}

// What happens at migrate_after_step, for --print.
std::string AtStep(const sim::MigrationScenarioOptions& o) {
  const std::string node = absl::StrCat("node", o.leaver_node);
  if (o.degrade) {
    return absl::StrCat("from this step GPU ", o.slow_local_rank, " of ", node,
                        " (rank ",
                        o.leaver_node * o.ranks_per_node + o.slow_local_rank,
                        ") computes slow_factor x slower");
  }
  if (o.node_failure) {
    return absl::StrCat("after this step ", node,
                        "'s trainer processes are killed");
  }
  return absl::StrCat("after this step the sim asks to move ", node,
                      " to the standby");
}

// The lines to explore the run with pitstopctl, and the rerun command.
void PrintMigrationInspect(const sim::MigrationScenarioResult& r,
                           const std::string& controller, bool still_running,
                           const std::string& rerun) {
  const std::string ctl =
      absl::StrCat(sim::PitstopctlCommand(), " --controller ", controller);
  std::cout << "\n== inspect ==\n";
  if (still_running) {
    std::cout << "  the controller is still running (Ctrl-C to stop):\n";
  } else {
    std::cout << "  (the cluster has been stopped; add --keep-running to keep "
                 "the controller up and run these)\n";
  }
  // The run's migration has finished: without --all the list is empty.
  std::cout << "    " << ctl << " migrations --all\n";
  std::cout << "    " << ctl << " standby\n";
  std::cout << "    " << ctl << " faults --all\n";
  if (!r.fault.fault_id().empty()) {
    std::cout << "    " << ctl << " fault show " << r.fault.fault_id() << "\n";
  }
  std::cout << "  rerun: " << rerun << "\n";
  std::cout.flush();
}

}  // namespace

bool IsMigrationScenario(const std::string& name) {
  for (const auto& s : kMigrationScenarios) {
    if (name == s[0]) return true;
  }
  return false;
}

std::vector<std::string> MigrationScenarioNames() {
  std::vector<std::string> out;
  for (const auto& s : kMigrationScenarios) out.emplace_back(s[0]);
  return out;
}

void ListMigrationScenarios(std::ostream& out) {
  for (const auto& s : kMigrationScenarios) {
    out << s[0] << "\n    " << s[1] << "\n";
  }
}

void AddMigrationOptions(CLI::App* cmd, SimArgs* a) {
  const sim::MigrationScenarioOptions d = sim::DegradedNodeDefaults();
  const sim::MigrationScenarioOptions o;
  sim::MigrationScenarioOptions* m = &a->migration;
  cmd->add_option("--nodes", m->nodes,
                  absl::StrCat("migration scenarios: training nodes, one "
                               "standby added (",
                               DefaultText(d.nodes, o.nodes),
                               "); torch scenarios: nodes, one torchrun "
                               "each (default: 2)"))
      ->check(CLI::Range(2, 64));
  cmd->add_option(
         "--ranks-per-node", m->ranks_per_node,
         absl::StrCat("migration scenarios: trainer processes per "
                      "node (",
                      DefaultText(d.ranks_per_node, o.ranks_per_node),
                      "); torch scenarios: ranks per torchrun (default: 2)"))
      ->check(CLI::Range(1, 64));
  cmd->add_option("--steps", m->steps,
                  absl::StrCat("migration scenarios: SGD steps of the job (",
                               DefaultText(d.steps, o.steps), ")"));
  cmd->add_option(
      "--migrate-after-step", m->migrate_after_step,
      absl::StrCat("migration scenarios: once rank 0 finished this many "
                   "steps, the GPU degrades (degraded-node-migration), the "
                   "migration is asked for (standby-migration) or the node's "
                   "processes are killed (node-failure-migration) (",
                   DefaultText(d.migrate_after_step, o.migrate_after_step),
                   ")"));
  cmd->add_option(
      "--switch-margin", m->switch_margin,
      absl::StrCat("migration scenarios: collectives between the progress "
                   "the ranks reported with READY and the switch point, room "
                   "for SWITCH_AT to reach every rank (",
                   DefaultText(d.switch_margin, o.switch_margin), ")"));
  cmd->add_option(
      "--compute-ms", m->compute_ms,
      absl::StrCat("migration scenarios: emulated GPU time per step in ms, "
                   "what a degraded GPU stretches; 0: none (",
                   DefaultText(d.compute_ms, o.compute_ms), ")"));
  cmd->add_option("--slow-factor", m->slow_factor,
                  absl::StrCat("degraded-node-migration only: how much slower "
                               "the degraded GPU computes (default: ",
                               d.slow_factor, ")"))
      ->check(CLI::Range(1.1, 1000.0));
}

sim::MigrationScenarioOptions EffectiveMigrationOptions(const SimArgs& a,
                                                        const CLI::App& cmd) {
  sim::MigrationScenarioOptions o = a.scenario == kDegraded
                                        ? sim::DegradedNodeDefaults()
                                        : sim::MigrationScenarioOptions();
  o.node_failure = a.scenario == kNodeFailure;
  const sim::MigrationScenarioOptions& m = a.migration;
  auto given = [&cmd](const char* flag) { return cmd.count(flag) > 0; };
  if (given("--nodes")) o.nodes = m.nodes;
  if (given("--ranks-per-node")) o.ranks_per_node = m.ranks_per_node;
  if (given("--steps")) o.steps = m.steps;
  if (given("--migrate-after-step")) {
    o.migrate_after_step = m.migrate_after_step;
  }
  if (given("--switch-margin")) o.switch_margin = m.switch_margin;
  if (given("--compute-ms")) o.compute_ms = m.compute_ms;
  if (given("--slow-factor")) o.slow_factor = m.slow_factor;
  o.work_dir = a.work_dir;
  o.keep_work_dir = a.keep_work_dir || a.keep_running;
  o.log_level = a.log_level;
  return o;
}

int PrintMigrationScenario(const SimArgs& a, const CLI::App& cmd,
                           std::ostream& out) {
  const sim::MigrationScenarioOptions o = EffectiveMigrationOptions(a, cmd);
  out << "# " << a.scenario
      << ": real trainer processes over the CPU NCCL backend\n"
         "# (docs/migration.md), not a YAML scenario: it takes the flags "
         "below.\n"
         "# The settings this command line gives it:\n";
  auto line = [&out](const std::string& key, const auto& value,
                     const std::string& comment) {
    out << absl::StrFormat("%-24s # %s\n", absl::StrCat(key, ": ", value),
                           comment);
  };
  out << "scenario: " << a.scenario << "\n";
  line("nodes", o.nodes, "--nodes; plus one standby node");
  line("ranks_per_node", o.ranks_per_node,
       absl::StrCat("--ranks-per-node (", o.nodes * o.ranks_per_node,
                    " trainer processes)"));
  line("steps", o.steps, "--steps");
  line("migrate_after_step", o.migrate_after_step,
       absl::StrCat("--migrate-after-step: ", AtStep(o)));
  line("switch_margin", o.switch_margin, "--switch-margin");
  line("compute_ms", o.compute_ms, "--compute-ms: emulated GPU time per step");
  if (o.degrade) line("slow_factor", o.slow_factor, "--slow-factor");
  line("leaver_node", absl::StrCat("node", o.leaver_node),
       "moves to the standby (fixed)");
  if (o.degrade) {
    line("detection_mode", "act",
         "policy ACT: a confirmed hardware fault moves its node (fixed)");
  }
  return 0;
}

int RunMigration(const SimArgs& a, const CLI::App& cmd) {
  sim::MigrationScenarioOptions o = EffectiveMigrationOptions(a, cmd);
  const std::string rerun = SimRerunCommand(a, cmd);
  InterruptGuard guard;
  if (!a.quiet) {
    o.progress = [&guard](const std::string& line) {
      if (!guard.RunInterrupted()) std::cout << line << std::endl;
    };
  }
  if (a.keep_running) {
    o.before_stop = [&guard, &rerun](const sim::MigrationScenarioResult& r,
                                     const std::string& controller) {
      if (!guard.Disarm()) return;  // interrupted: nothing to keep up
      sim::PrintMigrationReport(r, std::cout);
      PrintMigrationInspect(r, controller, /*still_running=*/true, rerun);
      while (!Interrupted()) usleep(200000);
    };
  }
  o.cancelled = [&guard] { return guard.RunInterrupted(); };
  auto r = sim::RunMigrationScenario(o);
  if (!guard.Disarm()) return ReportInterrupted();
  if (!r.ok()) {
    std::cerr << "pitstop sim: " << r.status().message() << "\n";
    return 2;
  }
  if (!a.keep_running) {
    sim::PrintMigrationReport(*r, std::cout);
    PrintMigrationInspect(*r, r->controller_address, false, rerun);
  }
  return r->passed ? 0 : 1;
}

}  // namespace pitstop::tool
