#include "src/sim/migration_judge.h"

#include <algorithm>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace pitstop::sim {
namespace {

// Lines [from, to) of `log` number the steps first, first+1, ...; "" or the
// first line that does not.
std::string Consecutive(const StepLogLines& log, size_t from, size_t to,
                        int first) {
  for (size_t i = from; i < to; ++i) {
    const int want = first + static_cast<int>(i - from);
    if (log[i].first != want) {
      return absl::StrCat("line ", i + 1, " is step ", log[i].first,
                          ", expected ", want);
    }
  }
  return "";
}

}  // namespace

StepLogLines ParseStepLog(const std::string& text) {
  StepLogLines steps;
  std::istringstream in(text);
  std::string word;
  int step = 0;
  double ms = 0;
  while (in >> word >> step >> word >> ms) steps.emplace_back(step, ms);
  return steps;
}

std::string CheckMovedOnce(const StepLogLines& before,
                           const StepLogLines& joined, int steps) {
  StepLogLines all = before;
  all.insert(all.end(), joined.begin(), joined.end());
  if (static_cast<int>(all.size()) != steps) {
    return absl::StrCat(all.size(), " steps logged, not ", steps);
  }
  return Consecutive(all, 0, all.size(), 0);
}

std::string CheckRecoveredStayer(const StepLogLines& log, int redo, int steps) {
  size_t failed = 0;
  while (failed < log.size() && log[failed].first == static_cast<int>(failed)) {
    ++failed;
  }
  if (static_cast<int>(failed) == steps && failed == log.size()) {
    return "";  // never failed: the death came after its last step
  }
  if (static_cast<int>(failed) != redo &&
      static_cast<int>(failed) != redo + 1) {
    return absl::StrCat("failed after step ", static_cast<int>(failed) - 1,
                        " but every rank redid step ", redo);
  }
  const size_t tail = log.size() - failed;
  if (static_cast<int>(tail) != steps - redo) {
    return absl::StrCat(tail, " steps logged after the failure, not ",
                        steps - redo, " (", redo, "..", steps - 1, ")");
  }
  return Consecutive(log, failed, log.size(), redo);
}

std::string CheckRecoveredMoved(const StepLogLines& dead,
                                const StepLogLines& joined, int redo,
                                int steps) {
  if (std::string e = Consecutive(dead, 0, dead.size(), 0); !e.empty()) {
    return "the dead process: " + e;
  }
  // A step is logged after its collective: a process killed in between
  // contributed to step redo-1 (every stayer finished it) without logging
  // it. Anything shorter means a step nobody ran.
  if (static_cast<int>(dead.size()) < redo - 1) {
    return absl::StrCat("the dead process ran ", dead.size(),
                        " steps, but the joiner started at ", redo,
                        ": steps in between never ran");
  }
  if (static_cast<int>(joined.size()) != steps - redo) {
    return absl::StrCat("the joiner ran ", joined.size(), " steps, not ",
                        steps - redo);
  }
  if (std::string e = Consecutive(joined, 0, joined.size(), redo); !e.empty()) {
    return "the joiner: " + e;
  }
  return "";
}

std::pair<double, double> LongestAroundAndMedian(const StepLogLines& log,
                                                 int switch_step) {
  if (log.empty()) return {0, 0};
  std::vector<double> ms;
  double longest = 0;
  for (const auto& [step, t] : log) {
    ms.push_back(t);
    if (step >= switch_step - 2 && step <= switch_step + 2) {
      longest = std::max(longest, t);
    }
  }
  std::sort(ms.begin(), ms.end());
  return {longest, ms[ms.size() / 2]};
}

double MedianStepMs(const StepLogLines& log, int first, int last) {
  std::vector<double> ms;
  for (const auto& [step, t] : log) {
    if (step >= first && step < last) ms.push_back(t);
  }
  if (ms.empty()) return 0;
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace pitstop::sim
