// The torch scenarios' report (torch_scenario.h), in the sections of the
// emulated-rank scenarios' (report.cc).
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/sim/report.h"
#include "src/sim/torch_scenario.h"

namespace pitstop::sim {
namespace {

// "found 3.2 s, confirmed 5.4 s after the injection"
std::string Latencies(const TruthScore& ts, const TorchScenarioResult& r) {
  std::string out = absl::StrFormat("first seen %.1f s", ts.latency_ns / 1e9);
  if (r.confirmed_after_ns >= 0) {
    absl::StrAppend(&out, absl::StrFormat(", confirmed %.1f s",
                                          r.confirmed_after_ns / 1e9));
  }
  return out + " after the injection";
}

}  // namespace

void PrintTorchReport(const TorchScenarioResult& r, bool still_running,
                      const std::string& rerun, std::ostream& out) {
  out << "\n== injected ==\n";
  if (r.plan.truths.empty()) {
    out << "  nothing (healthy run: checkpoints and evaluations, no fault)\n";
  }
  for (const FaultTruth& t : r.plan.truths) {
    out << absl::StrFormat("  t=%.1f s (rank %d at step %d): %s\n",
                           t.onset_ns / 1e9, t.rank, r.steps_at_injection,
                           r.description);
    out << absl::StrFormat("    -> expect %s naming rank %d (%s GPU %d)\n",
                           t.expected_class, t.rank, t.host, t.gpu);
  }
  out << "\n== pitstop found ==\n";
  if (r.faults.empty()) out << "  no fault\n";
  for (const ObservedFault& o : r.faults) PrintObservedFault(o, out);
  out << "\n== score ==\n";
  for (const TruthScore& ts : r.score.truths) {
    if (!ts.scored) continue;
    const std::string what =
        ts.detected
            ? absl::StrCat(
                  ts.localised ? "FOUND and localised" : "FOUND, wrong place",
                  " (", ts.fault_id, ", ", Latencies(ts, r), ")")
            : absl::StrCat("MISSED (", ts.note, ")");
    out << "  " << ts.truth->expected_class << ": " << what << "\n";
  }
  for (const ObservedFault* f : r.score.false_faults) {
    out << absl::StrFormat("  FALSE FAULT: %s %s\n", f->fault.fault_id(),
                           ShortClassName(f->fault.fault_class()));
  }
  for (const std::string& p : r.problems) out << "  job problem: " << p << "\n";
  out << "  verdict: "
      << (r.passed() ? "PASS (pitstop's verdict matches what was injected)"
                     : "FAIL (see above)")
      << "\n";
  out << absl::StrFormat("  rank 0 trained %d steps; wall time %.1f s\n",
                         r.steps_done, r.wall_s);

  const std::string ctl =
      absl::StrCat(PitstopctlCommand(), " --controller ", r.controller_address);
  out << "\n== inspect ==\n";
  if (still_running) {
    out << "  the controller and the job are still running (Ctrl-C to "
           "stop):\n";
  } else {
    out << "  (the cluster has been stopped; add --keep-running to keep the "
           "controller up and run these)\n";
  }
  out << "    " << ctl << " faults --all\n";
  if (!r.faults.empty()) {
    out << "    " << ctl << " fault show " << r.faults[0].fault.fault_id()
        << "\n";
  }
  out << "    " << ctl << " comms\n";
  if (r.work_dir_kept) {
    out << "  logs: " << r.work_dir
        << " (torchrun-node*.log, job/losses-rank*.jsonl, the daemons')\n";
  }
  if (!rerun.empty()) out << "  rerun: " << rerun << "\n";
}

}  // namespace pitstop::sim
