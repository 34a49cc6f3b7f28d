// The step-log rules a migrated run is judged by (migration_scenario.h).
// A trainer's --step-log has one "step S ms T" line per completed step; a
// step whose collective failed is not logged, a redone step is logged when
// it completes.
#ifndef PITSTOP_SRC_SIM_MIGRATION_JUDGE_H_
#define PITSTOP_SRC_SIM_MIGRATION_JUDGE_H_

#include <string>
#include <utility>
#include <vector>

namespace pitstop::sim {

// (step, ms) in log order.
using StepLogLines = std::vector<std::pair<int, double>>;

// Parses a --step-log file's text.
StepLogLines ParseStepLog(const std::string& text);

// Standby migration: the leaver ran [0, switch), its joiner [switch,
// steps); a stayer's `joined` is empty and it ran [0, steps). Every step
// exactly once, in order. "" or why not.
std::string CheckMovedOnce(const StepLogLines& before,
                           const StepLogLines& joined, int steps);

// Node failure, a stayer: [0, failed) then [redo, steps), where failed is
// redo or redo + 1 (it may have finished step redo before a peer died in
// it; that result was rolled back). "" or why not.
std::string CheckRecoveredStayer(const StepLogLines& log, int redo, int steps);

// Node failure, a moved rank: the dead process logged [0, D) with
// D >= redo - 1 (killed after a step's collective, before its log line),
// its joiner ran exactly [redo, steps). "" or why not.
std::string CheckRecoveredMoved(const StepLogLines& dead,
                                const StepLogLines& joined, int redo,
                                int steps);

// The longest step numbered switch-2 .. switch+2 (every line of it) and the
// median of all lines, in ms.
std::pair<double, double> LongestAroundAndMedian(const StepLogLines& log,
                                                 int switch_step);

// The median time of the lines of steps [first, last), in ms; 0 when
// there is none.
double MedianStepMs(const StepLogLines& log, int first, int last);

}  // namespace pitstop::sim

#endif  // PITSTOP_SRC_SIM_MIGRATION_JUDGE_H_
