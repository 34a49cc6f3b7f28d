#include "src/sim/report.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_format.h"
#include "src/sim/local_cluster.h"

namespace pitstop::sim {
namespace {

std::string StateName(v1::FaultState s) {
  std::string n = v1::FaultState_Name(s);
  return n.size() > 12 ? n.substr(12) : n;  // FAULT_STATE_
}

bool Passed(const RunResult& r) {
  return r.score.ok() && r.rank_errors.empty();
}

nlohmann::json InjectedJson(const TruthScore& ts) {
  const FaultTruth& t = *ts.truth;
  const TruthState state = StateOf(t);
  nlohmann::json j = {{"fault", t.Describe()},
                      {"kind", FaultKindName(t.spec.kind)},
                      {"at_s", t.spec.at_s},
                      {"onset_s", t.onset_ns / 1e9},
                      {"state", TruthStateName(state)},
                      {"scored", ts.scored}};
  if (state == TruthState::kNotObservable) {
    j["not_observable"] = t.not_observable;
  }
  if (state != TruthState::kDeceptiveNormal) {
    j["expected_class"] = t.expected_class;
  }
  if (ts.scored) {
    j["detected"] = ts.detected;
    j["localised"] = ts.localised;
    if (ts.detected) {
      j["fault_id"] = ts.fault_id;
      j["latency_s"] = ts.latency_ns / 1e9;
    }
  }
  if (!ts.note.empty()) j["note"] = ts.note;
  return j;
}

nlohmann::json FoundJson(const ObservedFault& o) {
  const v1::Fault& f = o.fault;
  nlohmann::json suspects = nlohmann::json::array();
  for (const v1::Suspect& s : f.suspects()) {
    suspects.push_back(DescribeSuspect(s));
  }
  return {{"fault_id", f.fault_id()},
          {"class", ShortClassName(f.fault_class())},
          {"state", StateName(f.state())},
          {"first_seen_s", o.first_seen_ns / 1e9},
          {"summary", f.summary()},
          {"suspects", suspects}};
}

}  // namespace

void PrintObservedFault(const ObservedFault& o, std::ostream& out) {
  const v1::Fault& f = o.fault;
  out << absl::StrFormat("  %s  %s (%s), first seen at t=%.1f s\n",
                         f.fault_id(), ShortClassName(f.fault_class()),
                         StateName(f.state()), o.first_seen_ns / 1e9);
  if (!f.summary().empty()) out << "    " << f.summary() << "\n";
  for (const v1::Suspect& s : f.suspects()) {
    out << "    suspect: " << DescribeSuspect(s) << "\n";
  }
  if (f.victims_size() > 0) {
    out << "    victims: " << f.victims_size()
        << " (first: " << DescribeSuspect(f.victims(0)) << ")\n";
  }
  int shown = 0;
  for (const v1::Evidence& e : f.evidence()) {
    if (shown++ == 4) {
      out << "    evidence: ... (" << f.evidence_size() - 4 << " more)\n";
      break;
    }
    out << "    evidence: " << e.text() << "\n";
  }
}

// The pitstopctl path as a user can type it from the current directory
// (relative when it is below it); bare "pitstopctl" when it is not found.
std::string PitstopctlCommand() {
  absl::StatusOr<std::string> path = FindPitstopBinary("pitstopctl");
  if (!path.ok()) return "pitstopctl";
  std::error_code ec;
  const std::filesystem::path rel =
      std::filesystem::relative(*path, std::filesystem::current_path(ec), ec);
  if (!ec && !rel.empty() && rel.native().rfind("..", 0) != 0) {
    return rel.string();
  }
  return *path;
}

void PrintReport(const RunResult& result, const ReportOptions& options,
                 std::ostream& out) {
  const Plan& plan = result.plan;
  out << "\n== injected ==\n";
  if (plan.truths.empty()) out << "  nothing (clean run)\n";
  for (const TruthScore& ts : result.score.truths) {
    const FaultTruth& t = *ts.truth;
    out << absl::StrFormat("  %s at t=%.1f s", t.Describe(), t.onset_ns / 1e9);
    switch (StateOf(t)) {
      case TruthState::kDeceptiveNormal:
        out << "  [deceptive normal: no fault expected]\n";
        break;
      case TruthState::kNotObservable:
        out << "  [not observable: " << t.not_observable
            << "; scored neither found nor missed]\n";
        break;
      case TruthState::kDidNotTakeEffect:
        out << "  [did not take effect in this run]\n";
        break;
      case TruthState::kExpected:
        out << absl::StrFormat("  -> expect %s\n", t.expected_class);
        break;
    }
  }
  out << "\n== pitstop found ==\n";
  if (result.faults.empty()) out << "  no fault\n";
  for (const ObservedFault& o : result.faults) PrintObservedFault(o, out);
  out << "\n== score ==\n";
  for (const TruthScore& ts : result.score.truths) {
    if (!ts.scored) continue;
    out << absl::StrFormat(
        "  %s: %s%s\n", FaultKindName(ts.truth->spec.kind),
        ts.detected
            ? (ts.localised ? "FOUND and localised" : "FOUND, wrong place")
            : "MISSED",
        ts.detected ? absl::StrFormat(" (%s, %.1f s after onset)", ts.fault_id,
                                      ts.latency_ns / 1e9)
                    : absl::StrCat(" (", ts.note, ")"));
  }
  for (const ObservedFault* f : result.score.false_faults) {
    out << absl::StrFormat("  FALSE FAULT: %s %s\n", f->fault.fault_id(),
                           ShortClassName(f->fault.fault_class()));
  }
  for (const std::string& e : result.rank_errors) {
    out << "  rank process problem: " << e << "\n";
  }
  out << "  verdict: "
      << (Passed(result) ? "PASS (pitstop's verdict matches what was injected)"
                         : "FAIL (see above)")
      << "\n";
  out << absl::StrFormat("  wall time %.1f s\n", result.wall_s);

  const std::string ctl = absl::StrCat(PitstopctlCommand(), " --controller ",
                                       result.controller_address);
  out << "\n== inspect ==\n";
  if (options.cluster_still_running) {
    out << "  the controller is still running (Ctrl-C to stop):\n";
  } else {
    out << "  (the cluster has been stopped; add --keep-running to keep the "
           "controller up and run these)\n";
  }
  out << "    " << ctl << " faults --all\n";
  if (!result.faults.empty()) {
    out << "    " << ctl << " fault show " << result.faults[0].fault.fault_id()
        << "\n";
  }
  out << "    " << ctl << " comms\n";
  if (!options.timeline_path.empty()) {
    out << "  timeline: " << options.timeline_path
        << " (open in https://ui.perfetto.dev)\n";
  }
  if (!options.rerun_command.empty()) {
    out << "  rerun: " << options.rerun_command << "\n";
  }
}

TruthState StateOf(const FaultTruth& t) {
  if (!t.expect_fault) return TruthState::kDeceptiveNormal;
  if (!t.not_observable.empty()) return TruthState::kNotObservable;
  if (!t.happened) return TruthState::kDidNotTakeEffect;
  return TruthState::kExpected;
}

const char* TruthStateName(TruthState s) {
  switch (s) {
    case TruthState::kDeceptiveNormal:
      return "deceptive_normal";
    case TruthState::kNotObservable:
      return "not_observable";
    case TruthState::kDidNotTakeEffect:
      return "did_not_take_effect";
    case TruthState::kExpected:
      return "expected";
  }
  return "?";
}

nlohmann::json ReportJson(const RunResult& result,
                          const ReportOptions& options) {
  nlohmann::json injected = nlohmann::json::array();
  for (const TruthScore& ts : result.score.truths) {
    injected.push_back(InjectedJson(ts));
  }
  nlohmann::json found = nlohmann::json::array();
  for (const ObservedFault& o : result.faults) found.push_back(FoundJson(o));
  nlohmann::json false_faults = nlohmann::json::array();
  for (const ObservedFault* f : result.score.false_faults) {
    false_faults.push_back(f->fault.fault_id());
  }
  nlohmann::json j = {{"scenario", result.plan.scenario.name},
                      {"verdict", Passed(result) ? "PASS" : "FAIL"},
                      {"injected", injected},
                      {"found", found},
                      {"false_faults", false_faults},
                      {"rank_errors", result.rank_errors},
                      {"controller", result.controller_address},
                      {"wall_s", result.wall_s}};
  if (!options.timeline_path.empty()) j["timeline"] = options.timeline_path;
  if (!options.rerun_command.empty()) j["rerun"] = options.rerun_command;
  return j;
}

}  // namespace pitstop::sim
