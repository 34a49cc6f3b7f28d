#include "src/sim/score.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "pitstop/v1/common.pb.h"

namespace pitstop::sim {
namespace {

// Faults first seen up to this long before the planned onset still count
// (planned onsets are at step boundaries; hang onsets are exact).
constexpr int64_t kOnsetSlackNs = 500'000'000;

bool SameHostPair(const v1::Suspect& s, const FaultTruth& t) {
  return (s.host() == t.host && s.peer_host() == t.peer_host) ||
         (s.host() == t.peer_host && s.peer_host() == t.host);
}

}  // namespace

std::string ShortClassName(v1::FaultClass c) {
  std::string name = v1::FaultClass_Name(c);
  absl::string_view v = name;
  if (absl::StartsWith(v, "FAULT_CLASS_")) v.remove_prefix(12);
  return std::string(v);
}

bool SuspectMatches(const v1::Suspect& s, const FaultTruth& t) {
  switch (t.spec.kind) {
    case FaultKind::kSlowGpu:
    case FaultKind::kNonCommHang:
    case FaultKind::kCrash:
    case FaultKind::kMismatch:
      return s.global_rank() == t.rank ||
             (s.global_rank() < 0 && s.host() == t.host &&
              s.gpu_index() == t.gpu);
    case FaultKind::kSlowNic:
    case FaultKind::kFlappingNic:
      // A NIC suspect may name the NIC, or (when the controller does not
      // know NIC names) the GPU whose rail NIC it is: GPU g uses NIC
      // g % nics_per_node.
      return s.host() == t.host &&
             (s.nic() == t.nic ||
              (s.nic().empty() && s.level() == v1::SUSPECT_LEVEL_NIC &&
               s.gpu_index() >= 0 && t.nics_per_node > 0 &&
               NicName(s.gpu_index() % t.nics_per_node) == t.nic));
    case FaultKind::kSlowLink:
    case FaultKind::kCommHang:
      return SameHostPair(s, t);
    default:
      return false;
  }
}

bool RunScore::ok() const {
  if (!false_faults.empty()) return false;
  for (const TruthScore& t : truths) {
    if (t.scored && !(t.detected && t.localised)) return false;
  }
  return true;
}

RunScore ScoreRun(const Plan& plan, const std::vector<ObservedFault>& faults) {
  RunScore score;
  std::vector<bool> explained(faults.size(), false);
  for (const FaultTruth& t : plan.truths) {
    TruthScore ts;
    ts.truth = &t;
    ts.scored = t.expect_fault && t.happened && t.not_observable.empty();
    for (size_t i = 0; i < faults.size(); ++i) {
      const ObservedFault& o = faults[i];
      if (o.first_seen_ns + kOnsetSlackNs < t.onset_ns) continue;
      const bool same_class =
          ShortClassName(o.fault.fault_class()) == t.expected_class;
      const bool top =
          o.fault.suspects_size() > 0 && SuspectMatches(o.fault.suspects(0), t);
      if (!ts.scored) continue;
      // A fault is explained by an injection only if it blames its culprit
      // first, whatever its class, or blames no one and has the expected
      // class; a fault of the right class that blames someone else first
      // is a false fault (it would send an operator to the wrong machine).
      if (top || (same_class && o.fault.suspects_size() == 0)) {
        explained[i] = true;
      }
      if (!same_class) continue;
      // Prefer the earliest correctly localised match, else the earliest.
      const int64_t latency = o.first_seen_ns - t.onset_ns;
      const bool better = !ts.detected || (top && !ts.localised) ||
                          (top == ts.localised && latency < ts.latency_ns);
      if (better) {
        ts.detected = true;
        ts.localised = top;
        ts.latency_ns = std::max<int64_t>(0, latency);
        ts.fault_id = o.fault.fault_id();
      }
    }
    if (!t.not_observable.empty()) {
      ts.note = absl::StrCat("not observable: ", t.not_observable);
    } else if (ts.scored && !ts.detected) {
      ts.note = absl::StrCat("no ", t.expected_class, " fault after onset");
    } else if (ts.scored && !ts.localised) {
      ts.note = "found, but the first suspect is not the culprit";
    }
    score.truths.push_back(ts);
  }
  for (size_t i = 0; i < faults.size(); ++i) {
    if (!explained[i]) score.false_faults.push_back(&faults[i]);
  }
  return score;
}

std::string DescribeSuspect(const v1::Suspect& s) {
  std::string level = v1::SuspectLevel_Name(s.level());
  if (absl::StartsWith(level, "SUSPECT_LEVEL_")) level = level.substr(14);
  std::string out = absl::StrCat(level, " ", s.host().empty() ? "?" : s.host());
  if (s.gpu_index() >= 0) absl::StrAppend(&out, " GPU ", s.gpu_index());
  if (!s.nic().empty()) absl::StrAppend(&out, " NIC ", s.nic());
  if (!s.peer_host().empty()) absl::StrAppend(&out, " <-> ", s.peer_host());
  if (s.global_rank() >= 0) absl::StrAppend(&out, " (rank ", s.global_rank());
  if (s.global_rank() >= 0 && s.peer_global_rank() >= 0) {
    absl::StrAppend(&out, " -> rank ", s.peer_global_rank());
  }
  if (s.global_rank() >= 0) absl::StrAppend(&out, ")");
  if (s.confidence() > 0) {
    absl::StrAppend(&out, " confidence ",
                    static_cast<int>(s.confidence() * 100 + 0.5), "%");
  }
  return out;
}

}  // namespace pitstop::sim
