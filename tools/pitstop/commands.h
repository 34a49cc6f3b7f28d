// Subcommands of the `pitstop` tool. Each Add*Command registers its CLI11
// subcommand and, when selected, runs it and stores the process exit code in
// *exit_code (0 ok, 1 fault found / checks failed where documented, 2 usage or
// input error).
#ifndef PITSTOP_TOOLS_PITSTOP_COMMANDS_H_
#define PITSTOP_TOOLS_PITSTOP_COMMANDS_H_

namespace CLI {
class App;
}

namespace pitstop::tool {

void AddAnalyzeCommand(CLI::App* app, int* exit_code);
void AddReplayCommand(CLI::App* app, int* exit_code);
void AddSimCommand(CLI::App* app, int* exit_code);
void AddDiffCommand(CLI::App* app, int* exit_code);
void AddPlanCommand(CLI::App* app, int* exit_code);
void AddTunerTableCommand(CLI::App* app, int* exit_code);

}  // namespace pitstop::tool

#endif  // PITSTOP_TOOLS_PITSTOP_COMMANDS_H_
