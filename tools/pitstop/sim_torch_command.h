// `pitstop sim`'s torch scenarios (torch-straggler, torch-hang,
// torch-crash, torch-desync, torch-healthy): the demo PyTorch DDP job under
// torchrun with the library LD_PRELOADed and a fault made from outside
// (src/sim/torch_scenario.h, docs/pytorch.md). Their knobs are flags.
// Called from sim_command.cc on the command's thread.
#ifndef PITSTOP_TOOLS_PITSTOP_SIM_TORCH_COMMAND_H_
#define PITSTOP_TOOLS_PITSTOP_SIM_TORCH_COMMAND_H_

#include <ostream>

#include "tools/pitstop/sim_args.h"

namespace CLI {
class App;
}

namespace pitstop::tool {

// Each name and its description, as --list prints them.
void ListTorchScenarios(std::ostream& out);

// Registers --backend (a->torch_backend) and torch-migration's --leaver-node
// (a->migration.leaver_node).
void AddTorchOptions(CLI::App* cmd, SimArgs* a);

// --print: the settings the run would use. Returns the exit code (0, or 2
// for options no run can use).
int PrintTorchScenario(const SimArgs& a, const CLI::App& cmd,
                       std::ostream& out);

// Runs a.scenario; returns the exit code (0 passed, 1 failed, 2 could not
// run, 130 interrupted).
int RunTorch(const SimArgs& a, const CLI::App& cmd);

// Runs torch-migration (src/sim/torch_migration_scenario.h): --nodes,
// --ranks-per-node, --steps, --migrate-after-step, --switch-margin, --seed.
// Exit code as RunTorch's.
int RunTorchMigration(const SimArgs& a, const CLI::App& cmd);
// torch-migration's --print. Exit code as PrintTorchScenario's.
int PrintTorchMigration(const SimArgs& a, const CLI::App& cmd,
                        std::ostream& out);

}  // namespace pitstop::tool

#endif  // PITSTOP_TOOLS_PITSTOP_SIM_TORCH_COMMAND_H_
