// `pitstop analyze PATH...`: reads other tools' files (Flight Recorder dumps,
// Kineto traces, NCCL Inspector logs), runs the controller's detectors on
// them in this process and prints the verdict. See docs/importers.md.
//
// Exit codes: 0 no fault found, 1 a fault was found, 2 usage or input error.
#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "src/importers/analysis.h"
#include "src/importers/importer.h"
#include "src/importers/timeline.h"
#include "tools/pitstop/commands.h"

namespace pitstop::tool {
namespace {

struct AnalyzeArgs {
  std::vector<std::string> paths;
  std::string output = "table";
  std::string timeline;
  std::string job_id = "imported";
  int ranks_per_node = 8;
  double tolerance_us = 500;
  bool quiet = false;
  bool verbose = false;
  uint64_t max_input_mib = importers::DecompressLimits{}.max_bytes >> 20;
  uint64_t max_gzip_ratio = importers::DecompressLimits{}.max_ratio;
};

int RunAnalyze(const AnalyzeArgs& a) {
  importers::ImportOptions opts;
  opts.job_id = a.job_id;
  opts.ranks_per_node = a.ranks_per_node;
  opts.kineto_match_tolerance_us = a.tolerance_us;
  opts.limits.max_bytes = a.max_input_mib << 20;
  opts.limits.max_ratio = a.max_gzip_ratio;
  if (!a.quiet) {
    opts.progress = [](const std::string& line) {
      std::cerr << "pitstop analyze: " << line << "\n";
    };
  }
  auto job = importers::ImportPaths(a.paths, opts);
  if (!job.ok()) {
    std::cerr << "pitstop analyze: " << job.status().message() << "\n";
    return 2;
  }
  auto result = importers::AnalyzeJob(*job, {});
  if (!result.ok()) {
    std::cerr << "pitstop analyze: detection failed: "
              << result.status().message() << "\n";
    return 2;
  }
  // A timeline that cannot be written is an error (exit 2), but the verdict
  // is still printed.
  int timeline_failed = 0;
  if (!a.timeline.empty()) {
    auto st = importers::WriteTimeline(*job, result->faults, a.timeline);
    if (!st.ok()) {
      std::cerr << "pitstop analyze: " << st.message() << "\n";
      timeline_failed = 2;
    } else if (!a.quiet) {
      std::cerr << "pitstop analyze: timeline written to " << a.timeline
                << " (open in ui.perfetto.dev or chrome://tracing)\n";
    }
  }
  if (a.output == "json") {
    std::cout << importers::VerdictJson(*job, result->faults, result->verdict)
                     .dump(2, ' ', false,
                           nlohmann::json::error_handler_t::replace)
              << "\n";
  } else {
    std::cout << importers::FormatVerdictTable(
        *job, result->faults, result->verdict, "pitstop analyze", a.verbose);
  }
  if (timeline_failed != 0) return timeline_failed;
  return result->faults.empty() ? 0 : 1;
}

}  // namespace

void AddAnalyzeCommand(CLI::App* app, int* exit_code) {
  auto args = std::make_shared<AnalyzeArgs>();
  CLI::App* cmd = app->add_subcommand(
      "analyze",
      "Read Flight Recorder dumps, Kineto traces or NCCL Inspector logs and "
      "print the verdict (fault class, suspects, victims, evidence) found by "
      "the controller's detectors. A directory of per-rank files is one job. "
      "Exit code: 0 no fault, 1 fault found, 2 input error.");
  cmd->add_option("paths", args->paths,
                  "Files or directories (one job; all of one format; .gz ok)")
      ->required();
  cmd->add_option("-o,--output", args->output, "Output format: table or json")
      ->check(CLI::IsMember({"table", "json"}));
  cmd->add_option("--timeline", args->timeline,
                  "Also write a merged multi-rank Chrome-trace/Perfetto JSON "
                  "timeline to this file");
  cmd->add_option("--job-id", args->job_id, "Job id to report under");
  cmd->add_option("--ranks-per-node", args->ranks_per_node,
                  "For sources without host names: rank r is on node "
                  "r / N (default 8)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--match-tolerance-us", args->tolerance_us,
                  "Kineto: kernels of different ranks are one collective when "
                  "their ends are this close (default 500 us)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-input-mib", args->max_input_mib,
                  "Most bytes one input file may decompress to, in MiB "
                  "(a gzip bomb stops here)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--max-gzip-ratio", args->max_gzip_ratio,
                  "Most decompressed bytes per compressed byte of a gzip "
                  "input, once 1 MiB is out (traces compress 10-20:1)")
      ->check(CLI::Range(uint64_t{2}, uint64_t{1} << 20))
      ->capture_default_str();
  cmd->add_flag("-v,--verbose", args->verbose,
                "List every fault (also those without suspects) and every "
                "note");
  cmd->add_flag("-q,--quiet", args->quiet, "No progress output on stderr");
  cmd->callback([args, exit_code] { *exit_code = RunAnalyze(*args); });
}

}  // namespace pitstop::tool
