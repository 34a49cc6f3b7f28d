// Which of `pitstop sim`'s flags a run takes, and the command line that
// reruns it. Two kinds of scenario share the command: the emulated-rank
// detection scenarios (built-in YAML or a file) and the migration
// scenarios (real trainer processes, sim_migration_command.h); most flags
// mean something to one kind only.
#ifndef PITSTOP_TOOLS_PITSTOP_SIM_FLAGS_H_
#define PITSTOP_TOOLS_PITSTOP_SIM_FLAGS_H_

#include <string>

#include "absl/status/status.h"
#include "tools/pitstop/sim_args.h"

namespace CLI {
class App;
}

namespace pitstop::tool {

// InvalidArgument naming the first flag given that would change nothing
// for this run (a.bench, else a.scenario) and what takes it, e.g.
// "--timeline does nothing for degraded-node-migration; it is for the
// emulated-rank scenarios (...)". Not for --list, which takes none.
absl::Status CheckSimFlags(const SimArgs& a, const CLI::App& cmd);

// The command that reruns this one: the tool as it was started (a path the
// user can paste), `sim --scenario NAME` and every other flag given, in
// registration order, its value shell-quoted when needed.
std::string SimRerunCommand(const SimArgs& a, const CLI::App& cmd);

// `word` as one shell word: as is when it holds only safe characters, else
// in single quotes ('' for the empty string).
std::string ShellQuote(const std::string& word);

}  // namespace pitstop::tool

#endif  // PITSTOP_TOOLS_PITSTOP_SIM_FLAGS_H_
