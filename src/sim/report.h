// Human-readable report of a simulator run: what was injected, what
// pitstop found (class, suspects with host / GPU / NIC, evidence), how it
// scored, and how to look at it with pitstopctl.
#ifndef PITSTOP_SRC_SIM_REPORT_H_
#define PITSTOP_SRC_SIM_REPORT_H_

#include <ostream>
#include <string>

#include "nlohmann/json.hpp"
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

// How a run treats an injected fault, in the order it is decided: a
// deceptive normal expects no fault; one no traffic of the job can show is
// not observable (FaultTruth::not_observable says why); one that did not
// take effect (a hang that found no collective) is not scored either; the
// rest are expected and scored.
enum class TruthState {
  kDeceptiveNormal,
  kNotObservable,
  kDidNotTakeEffect,
  kExpected
};
TruthState StateOf(const FaultTruth& t);
// "deceptive_normal", "not_observable", "did_not_take_effect", "expected".
const char* TruthStateName(TruthState s);

// The report as JSON (`pitstop sim -o json`): the scenario, each injected
// fault with its state, the reason when not observable and its score, the
// faults pitstop raised, the false ones, and the verdict.
nlohmann::json ReportJson(const RunResult& result,
                          const ReportOptions& options);

}  // namespace pitstop::sim

#endif  // PITSTOP_SRC_SIM_REPORT_H_
