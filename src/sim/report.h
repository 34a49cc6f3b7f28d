// Human-readable report of a simulator run: what was injected, what
// pitstop found (class, suspects with host / GPU / NIC, evidence), how it
// scored, and how to look at it with pitstopctl.
#ifndef PITSTOP_SRC_SIM_REPORT_H_
#define PITSTOP_SRC_SIM_REPORT_H_

#include <ostream>
#include <string>

#include "src/sim/runner.h"

namespace pitstop::sim {

struct ReportOptions {
  std::string timeline_path;  // empty: none written
  bool cluster_still_running = false;
  std::string rerun_command;
};

// The pitstopctl path as a user can type it from the current directory
// (relative when it is below it); bare "pitstopctl" when it is not found.
std::string PitstopctlCommand();

// One fault as the report's "== pitstop found ==" lists it: id, class,
// state, when first seen, summary, suspects, victims, evidence (first 4).
void PrintObservedFault(const ObservedFault& o, std::ostream& out);

void PrintReport(const RunResult& result, const ReportOptions& options,
                 std::ostream& out);

}  // namespace pitstop::sim

#endif  // PITSTOP_SRC_SIM_REPORT_H_
