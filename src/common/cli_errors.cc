#include "pitstop/cli_errors.h"

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pitstop {

std::string UnknownSubcommandError(const CLI::App& app) {
  // The innermost command the user named: the chain of parsed subcommands.
  const CLI::App* cmd = &app;
  std::string path = app.get_name();
  for (;;) {
    const std::vector<const CLI::App*> parsed =
        cmd->get_subcommands([](const CLI::App* sub) { return sub->parsed(); });
    if (parsed.empty()) break;
    cmd = parsed.front();
    absl::StrAppend(&path, path.empty() ? "" : " ", cmd->get_name());
  }
  const std::vector<const CLI::App*> subs =
      cmd->get_subcommands([](const CLI::App*) { return true; });
  if (subs.empty() || cmd->get_require_subcommand_min() == 0) return "";
  // The first word left over is what the user meant as the subcommand; a
  // leftover option ("--frob") is an option error, worded well by CLI11.
  std::string word;
  for (const std::string& arg : cmd->remaining()) {
    if (!arg.empty() && arg[0] != '-') {
      word = arg;
      break;
    }
  }
  if (word.empty()) return "";
  std::vector<std::string> names;
  for (const CLI::App* sub : subs) names.push_back(sub->get_name());
  return absl::StrCat(
      path.empty() ? "" : absl::StrCat(path, ": "), "unknown command '", word,
      "'; commands: ", absl::StrJoin(names, ", "), " (--help explains each)");
}

}  // namespace pitstop
