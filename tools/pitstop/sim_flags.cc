#include "tools/pitstop/sim_flags.h"

#include <CLI/CLI.hpp>
#include <filesystem>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "src/sim/torch_migration_scenario.h"
#include "src/sim/torch_scenario.h"
#include "tools/pitstop/sim_migration_command.h"

namespace pitstop::tool {
namespace {

// The runs a flag can mean something to (bits).
enum SimMode : unsigned {
  kEmulated = 1,        // a built-in detection scenario or a YAML file
  kDegradedNode = 2,    // degraded-node-migration
  kOtherMigration = 4,  // standby-migration, node-failure-migration
  kBench = 8,
  kTorchHealthy = 16,    // torch-healthy
  kTorchFault = 32,      // torch-straggler, torch-hang, ...
  kTorchMigration = 64,  // torch-migration
};
constexpr unsigned kMigration = kDegradedNode | kOtherMigration;
constexpr unsigned kTorch = kTorchHealthy | kTorchFault;
constexpr unsigned kScenarioRun =
    kEmulated | kMigration | kTorch | kTorchMigration;

constexpr char kForEmulated[] =
    "the emulated-rank detection scenarios (nic-degraded, straggler, ...; "
    "see --list) and YAML scenario files";
constexpr char kForMigration[] =
    "the migration scenarios (degraded-node-migration, standby-migration, "
    "node-failure-migration, torch-migration)";
constexpr char kForScenarioRun[] = "a scenario run, not --bench";
constexpr char kForTorch[] =
    "the torch scenarios (torch-straggler, torch-hang, torch-crash, "
    "torch-desync, torch-healthy)";
constexpr char kForSeed[] =
    "the emulated-rank detection scenarios, YAML scenario files and the "
    "torch scenarios (torch-migration too)";
constexpr char kForDuration[] =
    "the emulated-rank detection scenarios, YAML scenario files and "
    "torch-healthy";
constexpr char kForNodes[] =
    "the migration scenarios (degraded-node-migration, standby-migration, "
    "node-failure-migration, torch-migration) and the torch scenarios";

struct FlagRule {
  const char* flag;
  unsigned modes;
  const char* for_whom;
};

// -q and --log-level mean something to every run: not listed.
constexpr FlagRule kFlagRules[] = {
    {"--scenario", kScenarioRun, kForScenarioRun},
    {"--print", kScenarioRun, kForScenarioRun},
    {"--seed", kEmulated | kTorch | kTorchMigration, kForSeed},
    {"--duration-s", kEmulated | kTorchHealthy, kForDuration},
    {"--timeline", kEmulated, kForEmulated},
    {"--output", kEmulated, kForEmulated},
    {"--controller-config", kEmulated, kForEmulated},
    // torch-migration tears its deployment down when judged.
    {"--keep-running", kScenarioRun & ~kTorchMigration,
     "a scenario run other than torch-migration, not --bench"},
    {"--work-dir", kScenarioRun, kForScenarioRun},
    {"--keep-work-dir", kScenarioRun, kForScenarioRun},
    {"--nodes", kMigration | kTorch | kTorchMigration, kForNodes},
    {"--ranks-per-node", kMigration | kTorch | kTorchMigration, kForNodes},
    {"--steps", kMigration | kTorchMigration, kForMigration},
    {"--migrate-after-step", kMigration | kTorchMigration, kForMigration},
    {"--switch-margin", kMigration | kTorchMigration, kForMigration},
    {"--compute-ms", kMigration, kForMigration},
    {"--slow-factor", kDegradedNode, "degraded-node-migration only"},
    {"--backend", kTorch, kForTorch},
    {"--leaver-node", kTorchMigration, "torch-migration only"},
    {"--fault", kTorchMigration, "torch-migration only"},
    {"--quick", kBench, "--bench only"},
    {"--bench-out", kBench, "--bench only"},
};

unsigned ModeOf(const SimArgs& a) {
  if (a.bench) return kBench;
  if (a.scenario == "degraded-node-migration") return kDegradedNode;
  if (a.scenario == "torch-healthy") return kTorchHealthy;
  if (sim::IsTorchScenario(a.scenario)) return kTorchFault;
  if (a.scenario == sim::kTorchMigrationScenario) return kTorchMigration;
  return IsMigrationScenario(a.scenario) ? kOtherMigration : kEmulated;
}

// The path this binary was started as, relative to the working directory
// when it lies below it, so that the rerun line can be pasted as is.
std::string SelfCommand() {
  std::error_code ec;
  const std::filesystem::path self =
      std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "pitstop";
  const std::filesystem::path rel =
      std::filesystem::relative(self, std::filesystem::current_path(ec), ec);
  if (!ec && !rel.empty() && rel.native().rfind("..", 0) != 0) {
    return rel.string();
  }
  return self.string();
}

}  // namespace

absl::Status CheckSimFlags(const SimArgs& a, const CLI::App& cmd) {
  const unsigned mode = ModeOf(a);
  for (const FlagRule& rule : kFlagRules) {
    if ((rule.modes & mode) != 0 || cmd.count(rule.flag) == 0) continue;
    const std::string run =
        mode == kBench ? "with --bench" : absl::StrCat("for ", a.scenario);
    return absl::InvalidArgumentError(absl::StrCat(
        rule.flag, " does nothing ", run, "; it is for ", rule.for_whom));
  }
  return absl::OkStatus();
}

std::string ShellQuote(const std::string& word) {
  bool safe = !word.empty();
  for (const char c : word) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) &&
        std::string_view("_-./:=,+@%").find(c) == std::string_view::npos) {
      safe = false;
    }
  }
  if (safe) return word;
  std::string out = "'";
  for (const char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string SimRerunCommand(const SimArgs& a, const CLI::App& cmd) {
  std::string out =
      absl::StrCat(SelfCommand(), " sim --scenario ", ShellQuote(a.scenario));
  for (const CLI::Option* opt : cmd.get_options()) {
    const std::string name = opt->get_name();
    if (opt->count() == 0 || name == "--scenario") continue;
    absl::StrAppend(&out, " ", name);
    if (opt->get_expected_max() > 0 && !opt->results().empty()) {
      absl::StrAppend(&out, " ", ShellQuote(opt->results().back()));
    }
  }
  return out;
}

}  // namespace pitstop::tool
