// `pitstop diff A B`: differential profiling of two PyTorch profiler (Kineto)
// traces — two ranks of one step, or two time windows of one rank — per
// kernel, operator and Python function, largest differences first. See
// docs/importers.md ("pitstop diff").
//
// Exit codes: 0 the diff was printed, 2 usage or input error.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <string>

#include "src/importers/trace_diff.h"
#include "tools/pitstop/commands.h"

namespace pitstop::tool {
namespace {

struct DiffArgs {
  std::string a;
  std::string b;
  std::string window_a;
  std::string window_b;
  size_t top = 20;
  std::string output = "table";
  size_t name_width = 60;
};

absl::StatusOr<importers::TraceProfile> Load(const std::string& path,
                                             const std::string& window) {
  importers::TraceWindow w;
  if (!window.empty()) {
    absl::StatusOr<importers::TraceWindow> parsed =
        importers::ParseTraceWindow(window);
    if (!parsed.ok()) return parsed.status();
    w = *parsed;
  }
  return importers::ProfileTrace(path, w);
}

int RunDiff(const DiffArgs& args) {
  absl::StatusOr<importers::TraceProfile> a = Load(args.a, args.window_a);
  if (!a.ok()) {
    std::cerr << "pitstop diff: " << a.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<importers::TraceProfile> b = Load(args.b, args.window_b);
  if (!b.ok()) {
    std::cerr << "pitstop diff: " << b.status().message() << "\n";
    return 2;
  }
  importers::TraceDiff diff = importers::DiffProfiles(*a, *b);
  if (args.output == "json") {
    std::cout << importers::TraceDiffJson(*a, *b, diff, args.top)
                     .dump(2, ' ', false,
                           nlohmann::json::error_handler_t::replace)
              << "\n";
  } else {
    std::cout << importers::FormatTraceDiff(*a, *b, diff, args.top,
                                            args.name_width);
  }
  return 0;
}

}  // namespace

void AddDiffCommand(CLI::App* app, int* exit_code) {
  auto args = std::make_shared<DiffArgs>();
  CLI::App* cmd = app->add_subcommand(
      "diff",
      "Compare two PyTorch profiler (Kineto) traces: two ranks, or two time "
      "windows of one rank (give the same file twice with --window-a/-b). "
      "Per kernel, operator, Python function and CUDA runtime call: count, "
      "total, p50/p99 and their deltas (B - A), largest differences first. "
      "Exit code: 0 ok, 2 input error.");
  cmd->add_option("a", args->a, "Trace A (Chrome-trace JSON, .gz ok)")
      ->required();
  cmd->add_option("b", args->b, "Trace B (may be the same file as A)")
      ->required();
  cmd->add_option("--window-a", args->window_a,
                  "Only events of A starting in START:END ms after A's first "
                  "event (either side may be empty: 200:, :500)");
  cmd->add_option("--window-b", args->window_b, "The same for B");
  cmd->add_option("--top", args->top,
                  "How many differences to list (default 20; 0 = all)");
  cmd->add_option("--name-width", args->name_width,
                  "Shorten names in the table to this many characters "
                  "(default 60; JSON keeps them whole)")
      ->check(CLI::Range(8, 4096));
  cmd->add_option("-o,--output", args->output, "Output format: table or json")
      ->check(CLI::IsMember({"table", "json"}));
  cmd->callback([args, exit_code] { *exit_code = RunDiff(*args); });
}

}  // namespace pitstop::tool
