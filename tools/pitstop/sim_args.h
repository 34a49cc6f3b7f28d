// `pitstop sim`'s command line as parsed (sim_command.cc registers it), shared
// by the command's source files.
#ifndef PITSTOP_TOOLS_PITSTOP_SIM_ARGS_H_
#define PITSTOP_TOOLS_PITSTOP_SIM_ARGS_H_

#include <cstdint>
#include <string>

#include "src/sim/migration_scenario.h"

namespace pitstop::tool {

inline constexpr char kDefaultSimScenario[] = "degraded-node-migration";
// The torch scenarios' process-group backend (--backend).
inline constexpr char kDefaultTorchBackend[] = "pitstop_nccl";

struct SimArgs {
  std::string scenario = kDefaultSimScenario;
  bool list = false;
  bool print = false;
  bool bench = false;
  bool quick = false;
  std::string bench_out;
  int64_t seed = -1;
  double duration_s = 0;
  std::string timeline = "pitstop-sim-timeline.json";
  // The detection scenarios' report: "table" (text) or "json" (then the
  // progress lines go to stderr).
  std::string output = "table";
  bool keep_running = false;
  std::string work_dir;
  bool keep_work_dir = false;
  std::string log_level = "warn";
  std::string controller_config;
  bool quiet = false;
  // The migration scenarios' knobs as given; only those the command line
  // set count (EffectiveMigrationOptions), the rest are each scenario's.
  sim::MigrationScenarioOptions migration;
  // The torch scenarios' --backend (--nodes and --ranks-per-node are read
  // from `migration`).
  std::string torch_backend = kDefaultTorchBackend;
  // torch-migration's --fault (sim::TorchMigrationFault's names).
  std::string torch_migration_fault = "none";
};

}  // namespace pitstop::tool

#endif  // PITSTOP_TOOLS_PITSTOP_SIM_ARGS_H_
