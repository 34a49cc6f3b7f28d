// `pitstop analyze`: placeholder until its issue lands.
#include <CLI/CLI.hpp>
#include <iostream>

#include "tools/pitstop/commands.h"

namespace pitstop::tool {

void AddAnalyzeCommand(CLI::App* app, int* exit_code) {
  CLI::App* cmd = app->add_subcommand("analyze", "(not implemented yet)");
  cmd->allow_extras();
  cmd->callback([exit_code] {
    std::cerr << "pitstop analyze: not implemented yet\n";
    *exit_code = 2;
  });
}

}  // namespace pitstop::tool
