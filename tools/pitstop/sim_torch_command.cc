#include "tools/pitstop/sim_torch_command.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/sim/torch_migration_scenario.h"
#include "src/sim/torch_scenario.h"
#include "tools/pitstop/sim_flags.h"
#include "tools/pitstop/sim_interrupt.h"

namespace pitstop::tool {
namespace {

// The options a run of a.scenario gets: the defaults, with the flags the
// command line gave.
sim::TorchScenarioOptions TorchOptions(const SimArgs& a, const CLI::App& cmd) {
  sim::TorchScenarioOptions o;
  o.scenario = a.scenario;
  auto given = [&cmd](const char* flag) { return cmd.count(flag) > 0; };
  if (given("--nodes")) o.nodes = a.migration.nodes;
  if (given("--ranks-per-node")) o.ranks_per_node = a.migration.ranks_per_node;
  if (given("--seed") && a.seed >= 0) o.seed = static_cast<uint64_t>(a.seed);
  if (given("--duration-s")) o.duration_s = a.duration_s;
  o.backend = a.torch_backend;
  o.work_dir = a.work_dir;
  o.keep_work_dir = a.keep_work_dir || a.keep_running;
  o.log_level = a.log_level;
  return o;
}

}  // namespace

void ListTorchScenarios(std::ostream& out) {
  for (const auto& [name, about] : sim::TorchScenarios()) {
    out << name << "\n    " << about << "\n";
  }
  out << sim::kTorchMigrationScenario << "\n    " << sim::kTorchMigrationAbout
      << "\n";
}

void AddTorchOptions(CLI::App* cmd, SimArgs* a) {
  cmd->add_option("--backend", a->torch_backend,
                  "torch scenarios: the job's process-group backend (the one "
                  "over the NCCL C API, whose collectives the library sees; "
                  "gloo runs the job with nothing for pitstop to see)")
      ->capture_default_str();
  cmd->add_option("--leaver-node", a->migration.leaver_node,
                  "torch-migration: the node whose ranks move to the standby "
                  "(default 1; 0 moves rank 0)");
  cmd->add_option("--fault", a->torch_migration_fault,
                  "torch-migration: a process SIGKILLed during the migration: "
                  "joiner-dies-in-sandbox, leaver-dies-in-transfer, "
                  "joiner-dies-after-switch (default none; docs/pytorch.md)");
}

int PrintTorchScenario(const SimArgs& a, const CLI::App& cmd,
                       std::ostream& out) {
  const sim::TorchScenarioOptions o = TorchOptions(a, cmd);
  if (const absl::Status st = sim::ValidateTorchOptions(o); !st.ok()) {
    std::cerr << "pitstop sim: " << st.message() << "\n";
    return 2;
  }
  const int world = o.nodes * o.ranks_per_node;
  const int rank = o.fault_rank >= 0 ? o.fault_rank : world - 1;
  out << "# " << o.scenario
      << ": the demo PyTorch job (tools/torch-job/train_lm.py) under "
         "torchrun\n# with pitstop LD_PRELOADed (docs/pytorch.md), not a "
         "YAML scenario: it takes the flags below.\n";
  auto line = [&out](const std::string& key, const auto& value,
                     const std::string& comment) {
    out << absl::StrFormat("%-28s # %s\n", absl::StrCat(key, ": ", value),
                           comment);
  };
  out << "scenario: " << o.scenario << "\n";
  line("nodes", o.nodes, "--nodes: one torchrun and one agent each");
  line("ranks_per_node", o.ranks_per_node,
       absl::StrCat("--ranks-per-node (", world, " ranks)"));
  line("backend", o.backend, "--backend");
  line("seed", o.seed, "--seed: the job's");
  line("eval_every", o.eval_every, "steps between evaluations (fixed)");
  line("ckpt_every", o.ckpt_every, "steps between checkpoints (fixed)");
  if (o.scenario == "torch-healthy") {
    line("duration_s", o.duration_s,
         o.duration_s > 0 ? "--duration-s: training time"
                          : "--duration-s; 0: 100 steps");
    return 0;
  }
  line("fault_rank", rank,
       absl::StrCat("node", rank / o.ranks_per_node, " GPU ",
                    rank % o.ranks_per_node, " (fixed: the last rank)"));
  line("warmup_steps", o.warmup_steps, "the fault comes after (fixed)");
  if (o.scenario == "torch-straggler") {
    line("stop_ms", o.stop_ms, "SIGSTOP this long ... (fixed)");
    line("period_ms", o.period_ms, "... of every period (fixed)");
  }
  line("observe_s", o.observe_s, "the longest wait for the verdict (fixed)");
  return 0;
}

int RunTorch(const SimArgs& a, const CLI::App& cmd) {
  sim::TorchScenarioOptions o = TorchOptions(a, cmd);
  const std::string rerun = SimRerunCommand(a, cmd);
  InterruptGuard guard;
  if (!a.quiet) {
    o.progress = [&guard](const std::string& line) {
      if (!guard.RunInterrupted()) std::cout << line << std::endl;
    };
  }
  o.cancelled = [&guard] { return guard.RunInterrupted(); };
  if (a.keep_running) {
    o.before_stop = [&guard, &rerun](const sim::TorchScenarioResult& r) {
      if (!guard.Disarm()) return;  // interrupted: nothing to keep up
      sim::PrintTorchReport(r, /*still_running=*/true, rerun, std::cout);
      std::cout.flush();
      while (!Interrupted()) usleep(200000);
    };
  }
  auto r = sim::RunTorchScenario(o);
  if (!guard.Disarm()) return ReportInterrupted();
  if (!r.ok()) {
    std::cerr << "pitstop sim: " << r.status().message() << "\n";
    return 2;
  }
  if (!a.keep_running) {
    sim::PrintTorchReport(**r, /*still_running=*/false, rerun, std::cout);
  }
  std::cout.flush();
  return (*r)->passed() ? 0 : 1;
}

namespace {

// torch-migration's options: the defaults, with the flags given.
sim::TorchMigrationOptions TorchMigrationOptionsOf(const SimArgs& a,
                                                   const CLI::App& cmd) {
  sim::TorchMigrationOptions o;
  auto given = [&cmd](const char* flag) { return cmd.count(flag) > 0; };
  if (given("--nodes")) o.nodes = a.migration.nodes;
  if (given("--ranks-per-node")) o.ranks_per_node = a.migration.ranks_per_node;
  if (given("--steps")) o.steps = a.migration.steps;
  if (given("--migrate-after-step")) {
    o.migrate_after_step = a.migration.migrate_after_step;
  }
  if (given("--switch-margin")) o.switch_margin = a.migration.switch_margin;
  if (given("--leaver-node")) o.leaver_node = a.migration.leaver_node;
  if (absl::StatusOr<sim::TorchMigrationFault> f =
          sim::ParseTorchMigrationFault(a.torch_migration_fault);
      f.ok()) {
    o.fault = *f;
  }
  if (given("--seed") && a.seed >= 0) o.seed = static_cast<uint64_t>(a.seed);
  o.work_dir = a.work_dir;
  o.keep_work_dir = a.keep_work_dir;
  o.log_level = a.log_level;
  return o;
}

}  // namespace

int PrintTorchMigration(const SimArgs& a, const CLI::App& cmd,
                        std::ostream& out) {
  const sim::TorchMigrationOptions o = TorchMigrationOptionsOf(a, cmd);
  absl::Status st = sim::ValidateTorchMigrationOptions(o);
  if (st.ok()) {
    st = sim::ParseTorchMigrationFault(a.torch_migration_fault).status();
  }
  if (!st.ok()) {
    std::cerr << "pitstop sim: " << st.message() << "\n";
    return 2;
  }
  out << "# torch-migration: the demo PyTorch job under torchrun, one node "
         "moved to the standby\n# (docs/pytorch.md), not a YAML scenario: "
         "it takes the flags below.\n";
  auto line = [&out](const std::string& key, const auto& value,
                     const std::string& comment) {
    out << absl::StrFormat("%-28s # %s\n", absl::StrCat(key, ": ", value),
                           comment);
  };
  line("nodes", o.nodes, "--nodes: one torchrun and one agent each");
  line("ranks_per_node", o.ranks_per_node, "--ranks-per-node");
  line("steps", o.steps, "--steps");
  line("migrate_after_step", o.migrate_after_step, "--migrate-after-step");
  line("switch_margin", o.switch_margin, "--switch-margin (collectives)");
  line("leaver_node", absl::StrCat("node", o.leaver_node), "--leaver-node");
  line("shadow_steps", o.shadow_steps, "each joiner's, in the sandbox (fixed)");
  line("seed", o.seed, "--seed: the job's");
  line("fault", sim::TorchMigrationFaultName(o.fault),
       "--fault: a process killed during the migration");
  return 0;
}

int RunTorchMigration(const SimArgs& a, const CLI::App& cmd) {
  sim::TorchMigrationOptions o = TorchMigrationOptionsOf(a, cmd);
  if (absl::Status st =
          sim::ParseTorchMigrationFault(a.torch_migration_fault).status();
      !st.ok()) {
    std::cerr << "pitstop sim: " << st.message() << "\n";
    return 2;
  }
  InterruptGuard guard;
  if (!a.quiet) {
    o.progress = [&guard](const std::string& line) {
      if (!guard.RunInterrupted()) std::cout << line << std::endl;
    };
  }
  o.cancelled = [&guard] { return guard.RunInterrupted(); };
  auto r = sim::RunTorchMigrationScenario(o);
  if (!guard.Disarm()) return ReportInterrupted();
  if (!r.ok()) {
    std::cerr << "pitstop sim: " << r.status().message() << "\n";
    return 2;
  }
  sim::PrintTorchMigrationReport(*r, std::cout);
  std::cout << "rerun: " << SimRerunCommand(a, cmd) << "\n";
  std::cout.flush();
  return r->passed ? 0 : 1;
}

}  // namespace pitstop::tool
