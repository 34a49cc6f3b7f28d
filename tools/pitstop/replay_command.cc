// `pitstop replay PATH...`: the same input as `pitstop analyze`, through the
// live pipeline: real agents (one per node in the data) and a real
// controller on loopback, each rank's records sent through the in-process
// library's export path, paced in scaled time; the verdict is read back over
// the Controller API. See docs/importers.md.
//
// Exit codes: 0 no fault found, 1 a fault was found, 2 usage, input or
// daemon error.
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>
#include <vector>

#include "src/importers/analysis.h"
#include "src/importers/importer.h"
#include "src/importers/replay.h"
#include "src/importers/timeline.h"
#include "tools/pitstop/commands.h"

namespace pitstop::tool {
namespace {

struct ReplayArgs {
  std::vector<std::string> paths;
  std::string output = "table";
  std::string timeline;
  std::string job_id = "imported";
  int ranks_per_node = 8;
  double speed = 0;
  double max_seconds = 0.5;
  double settle_seconds = 4;
  bool keep = false;
  bool quiet = false;
  bool verbose = false;
};

int RunReplay(const ReplayArgs& a) {
  auto say = [&](const std::string& line) {
    if (!a.quiet) std::cerr << "pitstop replay: " << line << "\n";
  };
  importers::ImportOptions opts;
  opts.job_id = a.job_id;
  opts.ranks_per_node = a.ranks_per_node;
  opts.progress = say;
  auto job = importers::ImportPaths(a.paths, opts);
  if (!job.ok()) {
    std::cerr << "pitstop replay: " << job.status().message() << "\n";
    return 2;
  }
  importers::ReplayOptions ro;
  ro.speed = a.speed;
  ro.max_replay = absl::Seconds(a.max_seconds);
  ro.settle = absl::Seconds(a.settle_seconds);
  ro.keep_work_dir = a.keep;
  ro.progress = say;
  auto result = importers::ReplayJob(*job, ro);
  if (!result.ok()) {
    std::cerr << "pitstop replay: " << result.status().message() << "\n";
    return 2;
  }
  if (a.keep) say("daemon logs and database kept in " + result->work_dir);
  std::vector<int32_t> absent;
  for (const importers::ImportedRank& r : job->ranks) {
    if (r.absent) absent.push_back(r.global_rank);
  }
  importers::Verdict verdict =
      importers::VerdictFromFaults(result->faults, absent);
  verdict.log_ends = result->log_ends;
  if (!result->speed_note.empty()) job->notes.push_back(result->speed_note);
  // A timeline that cannot be written is an error (exit 2), but the verdict
  // is still printed.
  int timeline_failed = 0;
  if (!a.timeline.empty()) {
    auto st = importers::WriteTimeline(*job, result->faults, a.timeline);
    if (!st.ok()) {
      std::cerr << "pitstop replay: " << st.message() << "\n";
      timeline_failed = 2;
    }
  }
  if (a.output == "json") {
    nlohmann::json j = importers::VerdictJson(*job, result->faults, verdict);
    j["replay"] = {{"records_sent", result->records_sent},
                   {"nodes", result->nodes},
                   {"speed", result->speed}};
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
              << "\n";
  } else {
    std::cout << importers::FormatVerdictTable(*job, result->faults, verdict,
                                               "pitstop replay", a.verbose);
  }
  if (timeline_failed != 0) return timeline_failed;
  return result->faults.empty() ? 0 : 1;
}

}  // namespace

void AddReplayCommand(CLI::App* app, int* exit_code) {
  auto args = std::make_shared<ReplayArgs>();
  CLI::App* cmd = app->add_subcommand(
      "replay",
      "Replay Flight Recorder dumps, Kineto traces or NCCL Inspector logs "
      "through real agents (one per node in the data) and a real controller "
      "on loopback, paced in scaled time, and print the verdict read back "
      "over the Controller API. Exit code: 0 no fault, 1 fault found, 2 "
      "error. Needs pitstop-controller and pitstop-agent (found next to this "
      "binary in a build tree, or in $PITSTOP_BIN_DIR).");
  cmd->add_option("paths", args->paths,
                  "Files or directories (one job; all of one format; .gz ok)")
      ->required();
  cmd->add_option("-o,--output", args->output, "Output format: table or json")
      ->check(CLI::IsMember({"table", "json"}));
  cmd->add_option("--timeline", args->timeline,
                  "Also write a Chrome-trace/Perfetto JSON timeline here");
  cmd->add_option("--speed", args->speed,
                  "Data seconds per replay second (default: fit the data "
                  "into --max-seconds, never slower than real time)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option(
         "--max-seconds", args->max_seconds,
         "Longest replay when --speed is not given (default 0.5: the whole "
         "run falls in one or two detection windows)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--settle-seconds", args->settle_seconds,
                  "Detection time after the last record (default 4)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--job-id", args->job_id, "Job id to report under");
  cmd->add_option("--ranks-per-node", args->ranks_per_node,
                  "For sources without host names: rank r is on node "
                  "r / N (default 8)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--keep", args->keep,
                "Keep the daemons' logs and database (path printed)");
  cmd->add_flag("-v,--verbose", args->verbose,
                "List every fault (also those without suspects) and every "
                "note");
  cmd->add_flag("-q,--quiet", args->quiet, "No progress output on stderr");
  cmd->callback([args, exit_code] { *exit_code = RunReplay(*args); });
}

}  // namespace pitstop::tool
