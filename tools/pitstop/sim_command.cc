// `pitstop sim`: the cluster simulator (docs/sim.md, docs/migration.md).
//
//   pitstop sim                          the default scenario
//                                        (degraded-node-migration)
//   pitstop sim --scenario straggler     a built-in scenario by name
//   pitstop sim --scenario my.yaml       a scenario file
//   pitstop sim --list                   built-in scenarios
//   pitstop sim --bench [--quick]        detection-quality benchmark
//
// The migration scenarios (real trainer processes) are in
// sim_migration_command.cc, which flags each kind of run takes in
// sim_flags.cc, Ctrl-C in sim_interrupt.cc.
//
// Exit codes: 0 pitstop's verdict matched what was injected (bench: ran),
// 1 it did not (a miss, a wrong suspect or a false fault), 2 usage/input
// error or the cluster could not start, 130 interrupted (SIGINT), 143
// stopped (SIGTERM).
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/sim/bench.h"
#include "src/sim/report.h"
#include "src/sim/runner.h"
#include "src/sim/scenario.h"
#include "src/sim/timeline.h"
#include "src/sim/torch_migration_scenario.h"
#include "src/sim/torch_scenario.h"
#include "tools/pitstop/commands.h"
#include "tools/pitstop/sim_args.h"
#include "tools/pitstop/sim_flags.h"
#include "tools/pitstop/sim_interrupt.h"
#include "tools/pitstop/sim_migration_command.h"
#include "tools/pitstop/sim_torch_command.h"

namespace pitstop::tool {
namespace {

// NotFound naming every scenario --scenario takes, when `name` is none.
absl::Status CheckScenarioName(const std::string& name) {
  std::error_code ec;
  if (IsMigrationScenario(name) || sim::IsTorchScenario(name) ||
      name == sim::kTorchMigrationScenario ||
      std::filesystem::is_regular_file(name, ec) ||
      !sim::BuiltinScenarioText(name).empty()) {
    return absl::OkStatus();
  }
  if (absl::StrContains(name, "/") || absl::EndsWith(name, ".yaml") ||
      absl::EndsWith(name, ".yml")) {
    return absl::NotFoundError(absl::StrCat("no scenario file ", name));
  }
  std::vector<std::string> known = MigrationScenarioNames();
  for (const auto& [n, about] : sim::TorchScenarios()) known.push_back(n);
  known.push_back(sim::kTorchMigrationScenario);
  for (const std::string& n : sim::BuiltinScenarioNames()) known.push_back(n);
  return absl::NotFoundError(absl::StrCat(
      "no scenario '", name, "' (built-in: ", absl::StrJoin(known, ", "),
      "; or a YAML scenario file; --list describes them)"));
}

// Progress lines: stdout, or stderr when stdout carries the JSON report.
std::ostream& Progress(const SimArgs& a) {
  return a.output == "json" ? std::cerr : std::cout;
}

absl::StatusOr<sim::Scenario> ResolveScenario(const SimArgs& a) {
  std::error_code ec;
  absl::StatusOr<sim::Scenario> s =
      std::filesystem::is_regular_file(a.scenario, ec)
          ? sim::LoadScenarioFile(a.scenario)
          : sim::BuiltinScenario(a.scenario);
  if (!s.ok()) return s;
  if (a.seed >= 0) s->seed = static_cast<uint64_t>(a.seed);
  if (a.duration_s > 0) {
    const double was = s->duration_s;
    const int copies = sim::ExtendScenario(&*s, a.duration_s);
    if (copies > 1 && !a.quiet) {
      Progress(a) << "[sim] " << s->name << ": " << a.duration_s
                  << " s instead of " << was << " s; its schedule of deceptive "
                  << "normals repeats every " << was << " s (" << copies
                  << " times)" << std::endl;
    }
  }
  return s;
}

int ListScenarios() {
  ListMigrationScenarios(std::cout);
  ListTorchScenarios(std::cout);
  for (const std::string& name : sim::BuiltinScenarioNames()) {
    auto s = sim::BuiltinScenario(name);
    std::cout << name << "\n    "
              << (s.ok() ? s->description : s.status().ToString()) << "\n";
  }
  std::cout << "\nRun one: pitstop sim --scenario NAME; show it: pitstop sim "
               "--scenario NAME --print (a detection scenario's YAML, a "
               "migration scenario's settings)\n";
  return 0;
}

// The emulated-rank scenario's report, its timeline written first.
void FinishEmulated(const SimArgs& a, const std::string& rerun,
                    const sim::RunResult& r, bool still_running) {
  sim::ReportOptions ro;
  if (!a.timeline.empty()) {
    const absl::Status st = sim::WriteTimeline(r.plan, r.faults, a.timeline);
    if (st.ok()) {
      ro.timeline_path = std::filesystem::absolute(a.timeline).string();
    } else {
      std::cerr << "pitstop sim: " << st.message() << "\n";
    }
  }
  ro.cluster_still_running = still_running;
  ro.rerun_command = rerun;
  if (a.output == "json") {
    std::cout << sim::ReportJson(r, ro).dump(
                     2, ' ', false, nlohmann::json::error_handler_t::replace)
              << "\n";
  } else {
    sim::PrintReport(r, ro, std::cout);
  }
  std::cout.flush();
}

int RunEmulated(const SimArgs& a, const CLI::App& cmd) {
  auto scenario = ResolveScenario(a);
  if (!scenario.ok()) {
    std::cerr << "pitstop sim: " << scenario.status().message() << "\n";
    return 2;
  }
  const std::string rerun = SimRerunCommand(a, cmd);
  InterruptGuard guard;
  sim::RunOptions opts;
  opts.work_dir = a.work_dir;
  opts.keep_work_dir = a.keep_work_dir || a.keep_running;
  opts.daemon_log_level = a.log_level;
  opts.controller_config = a.controller_config;
  if (!a.quiet) {
    opts.progress = [&guard, &a](const std::string& line) {
      if (!guard.RunInterrupted()) Progress(a) << line << std::endl;
    };
  }
  opts.on_cluster_ready = [&a](const std::string& addr,
                               const std::string& dir) {
    if (a.quiet) return;
    Progress(a) << "[sim] controller at " << addr << ", logs and database in "
                << dir << std::endl;
  };
  if (a.keep_running) {
    opts.keep_running = [] { return !Interrupted(); };
  }
  // With --keep-running the report is printed while the cluster is up.
  opts.after_run = [&](const sim::RunResult& r) {
    if (guard.Disarm() && a.keep_running) FinishEmulated(a, rerun, r, true);
  };
  auto result = sim::RunScenario(*scenario, opts);
  if (!guard.Disarm()) return ReportInterrupted();
  if (!result.ok()) {
    std::cerr << "pitstop sim: " << result.status().message() << "\n";
    return 2;
  }
  if (!a.keep_running) FinishEmulated(a, rerun, **result, false);
  return (*result)->score.ok() && (*result)->rank_errors.empty() ? 0 : 1;
}

int PrintScenario(const SimArgs& a, const CLI::App& cmd) {
  if (IsMigrationScenario(a.scenario)) {
    return PrintMigrationScenario(a, cmd, std::cout);
  }
  if (sim::IsTorchScenario(a.scenario)) {
    return PrintTorchScenario(a, cmd, std::cout);
  }
  if (a.scenario == sim::kTorchMigrationScenario) {
    return PrintTorchMigration(a, cmd, std::cout);
  }
  auto s = ResolveScenario(a);
  if (!s.ok()) {
    std::cerr << "pitstop sim: " << s.status().message() << "\n";
    return 2;
  }
  std::cout << sim::ScenarioToYaml(*s);
  return 0;
}

int RunBench(const SimArgs& a) {
  sim::BenchOptions bo;
  bo.quick = a.quick;
  bo.markdown_path = a.bench_out;
  bo.daemon_log_level = a.log_level;
  if (!a.quiet) {
    bo.progress = [](const std::string& line) {
      std::cout << line << std::endl;
    };
  }
  return sim::RunBench(bo, std::cout);
}

// The command's callback: --list, else the checks, then --print, --bench
// or the run.
int RunSimCommand(const SimArgs& a, const CLI::App& cmd) {
  if (a.list) return ListScenarios();
  absl::Status st = a.bench ? absl::OkStatus() : CheckScenarioName(a.scenario);
  if (st.ok()) st = CheckSimFlags(a, cmd);
  if (!st.ok()) {
    std::cerr << "pitstop sim: " << st.message() << "\n";
    return 2;
  }
  if (a.print) return PrintScenario(a, cmd);
  if (a.bench) return RunBench(a);
  if (IsMigrationScenario(a.scenario)) return RunMigration(a, cmd);
  if (sim::IsTorchScenario(a.scenario)) return RunTorch(a, cmd);
  if (a.scenario == sim::kTorchMigrationScenario) {
    return RunTorchMigration(a, cmd);
  }
  return RunEmulated(a, cmd);
}

constexpr char kSimDescription[] =
    "Cluster simulator on loopback. The default scenario, "
    "degraded-node-migration, runs a real training job: 16 processes (4 "
    "nodes x 4 GPUs) of a deterministic data-parallel trainer over a CPU "
    "NCCL backend with the pitstop library loaded, a real pitstop-agent per "
    "node, a free standby node and a real pitstop-controller in policy ACT. "
    "A GPU of node1 degrades; pitstop finds it and moves node1's ranks to "
    "the standby without restarting the job; it passes when the job is back "
    "at full speed and its weights are bit-identical to an undisturbed run. "
    "standby-migration (an operator asks for the move) and "
    "node-failure-migration (node1's processes die) run the same job. The "
    "torch scenarios (torch-straggler, torch-hang, torch-crash, "
    "torch-desync, torch-healthy) run a real PyTorch DDP job under torchrun "
    "with the library LD_PRELOADed and make the fault for real. The "
    "detection scenarios (nic-degraded, straggler, ...; --list) drive "
    "emulated ranks through the real library and daemons with faults "
    "injected on schedule, print what pitstop found, score it against what "
    "was injected and write a Perfetto timeline.";

void AddScenarioOptions(CLI::App* cmd, SimArgs* a) {
  cmd->add_option("-s,--scenario", a->scenario,
                  "built-in scenario name (see --list) or a YAML file "
                  "(format: docs/sim.md)")
      ->capture_default_str();
  cmd->add_flag("--list", a->list, "list the built-in scenarios and exit");
  cmd->add_flag("--print", a->print,
                "print the scenario and exit: a detection scenario's YAML "
                "(resolved), a migration scenario's settings");
  cmd->add_option("--seed", a->seed,
                  "detection scenarios: override the scenario's random seed; "
                  "torch scenarios: the job's seed (default 1)");
  cmd->add_option(
      "--duration-s", a->duration_s,
      "detection scenarios: override the run length (s); a scenario of "
      "deceptive normals only (soak) repeats its schedule to fill it: "
      "--scenario soak --duration-s 3600 is the one-hour soak; "
      "torch-healthy: seconds of training (default: 100 steps)");
  cmd->add_option("--timeline", a->timeline,
                  "detection scenarios: Perfetto/Chrome trace JSON to write; "
                  "empty = none")
      ->capture_default_str();
  cmd->add_option("-o,--output", a->output,
                  "detection scenarios: the report as a table (text) or json "
                  "(progress lines then go to stderr)")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  cmd->add_option("--controller-config", a->controller_config,
                  "detection scenarios: YAML config for pitstop-controller "
                  "(detection settings)");
}

void AddRunOptions(CLI::App* cmd, SimArgs* a) {
  cmd->add_flag("--keep-running", a->keep_running,
                "keep the controller up after the run (for pitstopctl) "
                "until Ctrl-C");
  cmd->add_option("--work-dir", a->work_dir,
                  "directory for logs, sockets and the database (default: "
                  "a fresh /tmp/pitstop-sim-*, removed afterwards)");
  cmd->add_flag("--keep-work-dir", a->keep_work_dir,
                "do not remove the work directory (daemon and rank logs)");
  cmd->add_option("--log-level", a->log_level, "log level of the daemons")
      ->capture_default_str();
  cmd->add_flag("-q,--quiet", a->quiet, "no progress lines");
}

void AddBenchOptions(CLI::App* cmd, SimArgs* a) {
  cmd->add_flag("--bench", a->bench,
                "run the detection-quality benchmark (every fault kind x "
                "seeds x two cluster sizes, plus clean runs; ~15 min)");
  cmd->add_flag("--quick", a->quick,
                "with --bench: one seed, the small cluster only (~5 min)");
  cmd->add_option("--bench-out", a->bench_out,
                  "with --bench: also write the Markdown report here");
}

}  // namespace

void AddSimCommand(CLI::App* app, int* exit_code) {
  // Every flag is bound to a member of the static SimArgs: the callback
  // runs after this function returned, so a local would be gone by then.
  static SimArgs a;
  CLI::App* cmd = app->add_subcommand("sim", kSimDescription);
  AddScenarioOptions(cmd, &a);
  AddRunOptions(cmd, &a);
  AddMigrationOptions(cmd, &a);
  AddTorchOptions(cmd, &a);
  AddBenchOptions(cmd, &a);
  cmd->callback([exit_code, cmd] { *exit_code = RunSimCommand(a, *cmd); });
}

}  // namespace pitstop::tool
