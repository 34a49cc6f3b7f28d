// `pitstop sim`: the fault-injection cluster simulator (docs/sim.md).
//
//   pitstop sim                          the default scenario
//                                        (degraded-node-migration)
//   pitstop sim --scenario straggler     a built-in scenario by name
//   pitstop sim --scenario my.yaml       a scenario file
//   pitstop sim --list                   built-in scenarios
//   pitstop sim --bench [--quick]        detection-quality benchmark
//
// Exit codes: 0 pitstop's verdict matched what was injected (bench: ran),
// 1 it did not (a miss, a wrong suspect or a false fault), 2 usage/input
// error or the cluster could not start.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <filesystem>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "src/sim/bench.h"
#include "src/sim/migration_scenario.h"
#include "src/sim/report.h"
#include "src/sim/runner.h"
#include "src/sim/scenario.h"
#include "src/sim/timeline.h"
#include "tools/pitstop/commands.h"

namespace pitstop::tool {
namespace {

std::atomic<bool> g_interrupted{false};

void OnInterrupt(int) { g_interrupted = true; }

struct SimArgs {
  std::string scenario = "degraded-node-migration";
  bool list = false;
  bool print = false;
  bool bench = false;
  bool quick = false;
  std::string bench_out;
  int64_t seed = -1;
  double duration_s = 0;
  std::string timeline = "pitstop-sim-timeline.json";
  bool keep_running = false;
  std::string work_dir;
  bool keep_work_dir = false;
  std::string log_level = "warn";
  std::string controller_config;
  bool quiet = false;
  sim::MigrationScenarioOptions migration;  // standby-migration's knobs
};

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
      std::cout << "[sim] " << s->name << ": " << a.duration_s
                << " s instead of " << was << " s; its schedule of deceptive "
                << "normals repeats every " << was << " s (" << copies
                << " times)" << std::endl;
    }
  }
  return s;
}

// The migration scenarios run real trainer processes over the CPU NCCL
// backend (src/sim/migration_scenario.h), not the emulated ranks.
constexpr const char* kMigrationScenarios[][2] = {
    {"degraded-node-migration",
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
    {"node-failure-migration",
     "the same job; node1's trainer processes are killed mid-run: the "
     "others' all-reduce fails, pitstop moves the dead ranks to the standby "
     "with the state of data-parallel replicas and every rank redoes the "
     "failed step; passes when the weights are bit-identical"}};

bool IsMigrationScenario(const std::string& name) {
  for (const auto& s : kMigrationScenarios) {
    if (name == s[0]) return true;
  }
  return false;
}

// The migration scenarios' "inspect" lines (the emulated ones print
// theirs in PrintReport).
void PrintMigrationInspect(const sim::MigrationScenarioResult& r,
                           const std::string& controller, bool still_running,
                           const std::string& scenario) {
  const std::string ctl =
      absl::StrCat(sim::PitstopctlCommand(), " --controller ", controller);
  std::cout << "\n== inspect ==\n";
  if (still_running) {
    std::cout << "  the controller is still running (Ctrl-C to stop):\n";
  } else {
    std::cout << "  (the cluster has been stopped; add --keep-running to keep "
                 "the controller up and run these)\n";
  }
  std::cout << "    " << ctl << " migrations\n";
  std::cout << "    " << ctl << " standby\n";
  std::cout << "    " << ctl << " faults --all\n";
  if (!r.fault.fault_id().empty()) {
    std::cout << "    " << ctl << " fault show " << r.fault.fault_id() << "\n";
  }
  std::cout << "  rerun: pitstop sim --scenario " << scenario << "\n";
  std::cout.flush();
}

int RunMigration(const SimArgs& a, const CLI::App& cmd) {
  sim::MigrationScenarioOptions o = a.migration;
  o.node_failure = a.scenario == "node-failure-migration";
  if (a.scenario == "degraded-node-migration") {
    // Its own defaults where the command line is silent: the job must
    // outlast detection (a few 1 s windows) and the migration.
    const sim::MigrationScenarioOptions d = sim::DegradedNodeDefaults();
    o.degrade = true;
    if (cmd.count("--steps") == 0) o.steps = d.steps;
    if (cmd.count("--migrate-after-step") == 0) {
      o.migrate_after_step = d.migrate_after_step;
    }
    if (cmd.count("--switch-margin") == 0) o.switch_margin = d.switch_margin;
    if (cmd.count("--compute-ms") == 0) o.compute_ms = d.compute_ms;
  }
  o.work_dir = a.work_dir;
  o.keep_work_dir = a.keep_work_dir || a.keep_running;
  o.log_level = a.log_level;
  if (!a.quiet) {
    o.progress = [](const std::string& line) {
      std::cout << line << std::endl;
    };
  }
  signal(SIGINT, OnInterrupt);
  if (a.keep_running) {
    o.before_stop = [&a](const sim::MigrationScenarioResult& r,
                         const std::string& controller) {
      sim::PrintMigrationReport(r, std::cout);
      PrintMigrationInspect(r, controller, /*still_running=*/true, a.scenario);
      while (!g_interrupted.load()) sleep(1);
    };
  }
  auto r = sim::RunMigrationScenario(o);
  if (!r.ok()) {
    std::cerr << "pitstop sim: " << r.status().message() << "\n";
    return 2;
  }
  if (!a.keep_running) {
    sim::PrintMigrationReport(*r, std::cout);
    PrintMigrationInspect(*r, r->controller_address, false, a.scenario);
  }
  return r->passed ? 0 : 1;
}

int ListScenarios() {
  for (const std::string& name : sim::BuiltinScenarioNames()) {
    auto s = sim::BuiltinScenario(name);
    std::cout << name << "\n    "
              << (s.ok() ? s->description : s.status().ToString()) << "\n";
  }
  for (const auto& m : kMigrationScenarios) {
    std::cout << m[0] << "\n    " << m[1] << "\n";
  }
  std::cout << "\nRun one: pitstop sim --scenario NAME; show its YAML: "
               "pitstop sim --scenario NAME --print\n";
  return 0;
}

int RunOne(const SimArgs& a) {
  auto scenario = ResolveScenario(a);
  if (!scenario.ok()) {
    std::cerr << "pitstop sim: " << scenario.status().message() << "\n";
    return 2;
  }
  sim::RunOptions opts;
  opts.work_dir = a.work_dir;
  opts.keep_work_dir = a.keep_work_dir || a.keep_running;
  opts.daemon_log_level = a.log_level;
  opts.controller_config = a.controller_config;
  if (!a.quiet) {
    opts.progress = [](const std::string& line) {
      std::cout << line << std::endl;
    };
  }
  opts.on_cluster_ready = [&a](const std::string& addr,
                               const std::string& dir) {
    if (a.quiet) return;
    std::cout << "[sim] controller at " << addr << ", logs and database in "
              << dir << std::endl;
  };
  signal(SIGINT, OnInterrupt);
  if (a.keep_running) {
    opts.keep_running = [] { return !g_interrupted.load(); };
  }
  // The report must be printed while the cluster is still up when asked to
  // keep it running, so print from the runner's keep-running hook.
  std::string timeline_path;
  std::unique_ptr<sim::RunResult> early;
  std::error_code ec;
  std::string self_path = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) {
    self_path = "pitstop";
  } else {
    const std::filesystem::path rel = std::filesystem::relative(
        self_path, std::filesystem::current_path(ec), ec);
    if (!ec && !rel.empty() && rel.native().rfind("..", 0) != 0) {
      self_path = rel.string();
    }
  }
  auto finish = [&](const sim::RunResult& r, bool still_running) {
    if (!a.timeline.empty()) {
      const absl::Status st = sim::WriteTimeline(r.plan, r.faults, a.timeline);
      if (st.ok()) {
        timeline_path = std::filesystem::absolute(a.timeline).string();
      } else {
        std::cerr << "pitstop sim: " << st.message() << "\n";
      }
    }
    sim::ReportOptions ro;
    ro.timeline_path = timeline_path;
    ro.cluster_still_running = still_running;
    // The path this binary was started as, so the line can be pasted as is.
    ro.rerun_command = absl::StrCat(self_path, " sim --scenario ", a.scenario);
    sim::PrintReport(r, ro, std::cout);
    std::cout.flush();
  };
  opts.after_run = [&](const sim::RunResult& r) {
    if (a.keep_running) finish(r, /*still_running=*/true);
  };
  auto result = sim::RunScenario(*scenario, opts);
  if (!result.ok()) {
    std::cerr << "pitstop sim: " << result.status().message() << "\n";
    return 2;
  }
  if (!a.keep_running) finish(**result, /*still_running=*/false);
  return (*result)->score.ok() && (*result)->rank_errors.empty() ? 0 : 1;
}

}  // namespace

void AddSimCommand(CLI::App* app, int* exit_code) {
  static SimArgs a;
  CLI::App* cmd = app->add_subcommand(
      "sim",
      "Fault-injection cluster simulator: emulated ranks drive the real "
      "in-process library through the NCCL profiler ABI into real "
      "pitstop-agent processes (one per emulated node) and a real "
      "pitstop-controller on loopback, with faults injected on schedule; "
      "prints what pitstop found and scores it against what was injected.");
  cmd->add_option("-s,--scenario", a.scenario,
                  "built-in scenario name (see --list) or a YAML file "
                  "(format: docs/sim.md)")
      ->capture_default_str();
  cmd->add_flag("--list", a.list, "list the built-in scenarios and exit");
  // Every flag is bound to a member of the static SimArgs: the callback
  // runs after this function returned, so a local would be gone by then.
  cmd->add_flag("--print", a.print,
                "print the scenario's YAML (resolved) and exit");
  cmd->add_option("--seed", a.seed, "override the scenario's random seed");
  cmd->add_option(
      "--duration-s", a.duration_s,
      "override the scenario's run length (s); a scenario of deceptive "
      "normals only (soak) repeats its schedule to fill it: "
      "--scenario soak --duration-s 3600 is the one-hour soak");
  cmd->add_option("--timeline", a.timeline,
                  "Perfetto/Chrome trace JSON to write; empty = none")
      ->capture_default_str();
  cmd->add_flag("--keep-running", a.keep_running,
                "keep the controller up after the run (for pitstopctl) "
                "until Ctrl-C");
  cmd->add_option("--work-dir", a.work_dir,
                  "directory for logs, sockets and the database (default: "
                  "a fresh /tmp/pitstop-sim-*, removed afterwards)");
  cmd->add_flag("--keep-work-dir", a.keep_work_dir,
                "do not remove the work directory (daemon and rank logs)");
  cmd->add_option("--log-level", a.log_level, "log level of the daemons")
      ->capture_default_str();
  cmd->add_option("--controller-config", a.controller_config,
                  "YAML config for pitstop-controller (detection settings)");
  cmd->add_flag("-q,--quiet", a.quiet, "no progress lines");
  // The migration scenarios only (the emulated ones have their YAML).
  cmd->add_option("--nodes", a.migration.nodes,
                  "migration scenarios: training nodes (one standby is added)")
      ->capture_default_str()
      ->check(CLI::Range(2, 64));
  cmd->add_option("--ranks-per-node", a.migration.ranks_per_node,
                  "migration scenarios: trainer processes per node")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option(
         "--steps", a.migration.steps,
         "migration scenarios: SGD steps of the job (degraded-node-migration: "
         "700 unless given)")
      ->capture_default_str();
  cmd->add_option("--migrate-after-step", a.migration.migrate_after_step,
                  "migration scenarios: once rank 0 finished this many "
                  "steps, the migration is asked for, the node killed, or "
                  "the GPU degrades (degraded-node-migration: 150 unless "
                  "given)")
      ->capture_default_str();
  cmd->add_option("--switch-margin", a.migration.switch_margin,
                  "migration scenarios (degraded-node-migration: 20 unless "
                  "given): collectives between the progress the "
                  "ranks reported with READY and the switch point (room for "
                  "SWITCH_AT to reach every rank)")
      ->capture_default_str();
  cmd->add_option("--compute-ms", a.migration.compute_ms,
                  "migration scenarios: emulated GPU time per step (ms; "
                  "degraded-node-migration's default: 10)");
  cmd->add_option("--slow-factor", a.migration.slow_factor,
                  "degraded-node-migration: how much slower the degraded "
                  "GPU computes")
      ->capture_default_str()
      ->check(CLI::Range(1.1, 1000.0));
  cmd->add_flag("--bench", a.bench,
                "run the detection-quality benchmark (every fault kind x "
                "seeds x two cluster sizes, plus clean runs; ~15 min)");
  cmd->add_flag("--quick", a.quick,
                "with --bench: one seed, the small cluster only (~5 min)");
  cmd->add_option("--bench-out", a.bench_out,
                  "with --bench: also write the Markdown report here");
  cmd->callback([exit_code, cmd] {
    if (a.list) {
      *exit_code = ListScenarios();
      return;
    }
    if (a.print) {
      auto s = ResolveScenario(a);
      if (!s.ok()) {
        std::cerr << "pitstop sim: " << s.status().message() << "\n";
        *exit_code = 2;
        return;
      }
      std::cout << sim::ScenarioToYaml(*s);
      *exit_code = 0;
      return;
    }
    if (a.bench) {
      sim::BenchOptions bo;
      bo.quick = a.quick;
      bo.markdown_path = a.bench_out;
      bo.daemon_log_level = a.log_level;
      bo.progress = [](const std::string& line) {
        std::cout << line << std::endl;
      };
      *exit_code = sim::RunBench(bo, std::cout);
      return;
    }
    *exit_code =
        IsMigrationScenario(a.scenario) ? RunMigration(a, *cmd) : RunOne(a);
  });
}

}  // namespace pitstop::tool
