// `pitstop sim`: placeholder until its issue lands.
#include <CLI/CLI.hpp>
#include <iostream>

#include "tools/pitstop/commands.h"

namespace pitstop::tool {

void AddSimCommand(CLI::App* app, int* exit_code) {
  CLI::App* cmd = app->add_subcommand("sim", "(not implemented yet)");
  cmd->allow_extras();
  cmd->callback([exit_code] {
    std::cerr << "pitstop sim: not implemented yet\n";
    *exit_code = 2;
  });
}

}  // namespace pitstop::tool
