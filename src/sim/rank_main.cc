// pitstop-sim-rank: one emulated training process of `pitstop sim`.
//
//   pitstop-sim-rank --scenario RUN.yaml --rank R --start-ns T [--plugin P]
//
// Started by the coordinator with PITSTOP_AGENT_SOCKET, PITSTOP_HOST,
// PITSTOP_JOB_ID, RANK and LOCAL_RANK set. Exit 0 after a clean finalize,
// 1 at a planned crash (without finalize), 2 on bad input.
#include <CLI/CLI.hpp>
#include <iostream>

#include "src/sim/model.h"
#include "src/sim/rank_driver.h"
#include "src/sim/scenario.h"

int main(int argc, char** argv) {
  CLI::App app("pitstop-sim-rank: one emulated rank of `pitstop sim`",
               "pitstop-sim-rank");
  std::string scenario_path;
  pitstop::sim::RankDriverOptions options;
  app.add_option("--scenario", scenario_path, "resolved scenario YAML")
      ->required();
  app.add_option("--rank", options.rank, "global rank")->required();
  app.add_option("--start-ns", options.start_ns,
                 "CLOCK_MONOTONIC ns of plan time 0")
      ->required();
  app.add_option("--plugin", options.plugin,
                 "profiler plugin name or path (default: the built one)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  auto scenario = pitstop::sim::LoadScenarioFile(scenario_path);
  if (!scenario.ok()) {
    std::cerr << "pitstop-sim-rank: " << scenario.status() << "\n";
    return 2;
  }
  auto plan = pitstop::sim::BuildPlan(*scenario);
  if (!plan.ok()) {
    std::cerr << "pitstop-sim-rank: " << plan.status() << "\n";
    return 2;
  }
  const absl::Status st = pitstop::sim::RunRank(*plan, options);
  if (!st.ok()) {
    std::cerr << "pitstop-sim-rank " << options.rank << ": " << st << "\n";
    return 2;
  }
  return 0;
}
