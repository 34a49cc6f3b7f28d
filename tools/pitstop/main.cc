// pitstop: offline analysis, live replay and simulation.
//
//   pitstop analyze PATH...    read other tools' files, print the verdict
//   pitstop replay PATH...     the same data through real agents + controller
//   pitstop sim [--scenario]   fault-injection cluster simulator
//   pitstop diff A B           differential profiling of two Kineto traces
//   pitstop plan --topology F  flow path planning vs ECMP (docs/planning.md)
//   pitstop tuner-table [PATH] what the NCCL tuner on this node is told
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>

#include "pitstop/cli_errors.h"
#include "tools/pitstop/commands.h"

int main(int argc, char** argv) {
  CLI::App app(
      "pitstop: find the GPU, NIC, link or process that slows or stalls a "
      "distributed training job.",
      "pitstop");
  app.require_subcommand(1);
  int exit_code = 0;
  pitstop::tool::AddAnalyzeCommand(&app, &exit_code);
  pitstop::tool::AddReplayCommand(&app, &exit_code);
  pitstop::tool::AddSimCommand(&app, &exit_code);
  pitstop::tool::AddDiffCommand(&app, &exit_code);
  pitstop::tool::AddPlanCommand(&app, &exit_code);
  pitstop::tool::AddTunerTableCommand(&app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (const std::string unknown = pitstop::UnknownSubcommandError(app);
        !unknown.empty()) {
      std::cerr << unknown << std::endl;
      return 2;
    }
    return app.exit(e) == 0 ? 0 : 2;
  }
  return exit_code;
}
