// The detection-quality benchmark: every fault kind x seeds x two cluster
// sizes, plus clean runs (with and without deceptive normals) and one
// 64-rank run, each a full RunScenario on loopback. Reports recall,
// localisation, false faults per hour and detection latency p50/p90 as a
// Markdown table (docs/detection-quality.md holds the last one).
#ifndef PITSTOP_SRC_SIM_BENCH_H_
#define PITSTOP_SRC_SIM_BENCH_H_

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "src/sim/scenario.h"

namespace pitstop::sim {

struct BenchOptions {
  bool quick = false;         // one seed, small cluster, no 64-rank run
  std::string markdown_path;  // also write the report here
  std::string daemon_log_level = "warn";
  std::function<void(const std::string&)> progress;
};

struct BenchCase {
  std::string label;  // "slow_nic 4x4 seed 2"
  std::string size;   // "4x4"
  Scenario scenario;
  // The table's row ("concurrent", "slow_link /2"); empty: the first
  // fault's kind, "clean" or "deceptive normals".
  std::string row;
};

// The benchmark's scenarios, generated from seeds (targets drawn per seed).
std::vector<BenchCase> BenchCases(bool quick);

struct RunResult;

// What the benchmark counts over its runs, and its Markdown report: per
// fault kind and cluster the runs, detections, localisations, false
// faults and latencies; recall and localisation over the scored
// injections (an injection no traffic of its job can show is not scored:
// it is listed under "Not observable", never as a miss); false faults per
// hour of clean running.
class BenchTally {
 public:
  BenchTally();
  ~BenchTally();
  void Add(const BenchCase& c, const RunResult& r);
  void AddFailed();  // a case that could not run
  int failed() const;
  std::string Markdown(double minutes) const;

  struct Counts;  // defined in bench.cc

 private:
  std::unique_ptr<Counts> counts_;
};

// Runs every case and prints the Markdown report to `out`. Returns the exit
// code: 0 when every case ran (whatever the scores), 2 if one could not.
int RunBench(const BenchOptions& options, std::ostream& out);

}  // namespace pitstop::sim

#endif  // PITSTOP_SRC_SIM_BENCH_H_
