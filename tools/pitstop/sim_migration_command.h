// `pitstop sim`'s migration scenarios (degraded-node-migration, the
// default; standby-migration; node-failure-migration): real trainer
// processes over the CPU NCCL backend (src/sim/migration_scenario.h), not
// the emulated ranks of the YAML scenarios. Their knobs are flags, not a
// YAML file. Called from sim_command.cc on the command's thread.
#ifndef PITSTOP_TOOLS_PITSTOP_SIM_MIGRATION_COMMAND_H_
#define PITSTOP_TOOLS_PITSTOP_SIM_MIGRATION_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

#include "src/sim/migration_scenario.h"
#include "tools/pitstop/sim_args.h"

namespace CLI {
class App;
}

namespace pitstop::tool {

bool IsMigrationScenario(const std::string& name);
// In --list's order, the default first.
std::vector<std::string> MigrationScenarioNames();
// Each name and its description, as --list prints them.
void ListMigrationScenarios(std::ostream& out);

// Registers --nodes ... --slow-factor, bound to a->migration; their help
// names each scenario's default.
void AddMigrationOptions(CLI::App* cmd, SimArgs* a);

// The options a run of a.scenario gets: the scenario's defaults, with the
// knobs the command line gave.
sim::MigrationScenarioOptions EffectiveMigrationOptions(const SimArgs& a,
                                                        const CLI::App& cmd);

// --print: the effective options as YAML, each with the flag that sets it.
// Returns the exit code (0).
int PrintMigrationScenario(const SimArgs& a, const CLI::App& cmd,
                           std::ostream& out);

// Runs a.scenario; returns the exit code (0 passed, 1 failed, 2 could not
// run, 130 interrupted).
int RunMigration(const SimArgs& a, const CLI::App& cmd);

}  // namespace pitstop::tool

#endif  // PITSTOP_TOOLS_PITSTOP_SIM_MIGRATION_COMMAND_H_
