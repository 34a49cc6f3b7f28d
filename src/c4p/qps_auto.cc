#include "src/c4p/qps_auto.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pitstop::c4p {
namespace {

double BoundRecovery(const EvalReport& r) {
  return r.after.bound.completion_s > 0
             ? r.healthy.bound.completion_s / r.after.bound.completion_s
             : 0;
}

std::string Pct(double x) { return absl::StrFormat("%.0f%%", 100 * x); }

// The final evaluation degrades each link once, by the share the first
// left it: warnings of the first about the flags (a link degraded twice)
// are carried over. Before, they were lost whenever more than 1 QP won.
absl::StatusOr<EvalReport> WithFirstWarnings(absl::StatusOr<EvalReport> r,
                                             const EvalReport& first) {
  if (!r.ok()) return r;
  for (const std::string& w : first.warnings) {
    if (std::find(r->warnings.begin(), r->warnings.end(), w) ==
        r->warnings.end()) {
      r->warnings.push_back(w);
    }
  }
  return r;
}

}  // namespace

absl::StatusOr<EvalReport> EvaluateAutoQps(Fabric* fabric, const EvalOptions& o,
                                           QpsChoice* choice, int max_qps,
                                           double target) {
  *choice = QpsChoice{};
  choice->automatic = true;
  EvalOptions one = o;
  one.ring.qps_per_connection = 1;
  absl::StatusOr<EvalReport> first = Evaluate(fabric, one);
  if (!first.ok()) return first;
  if (!first->degraded) {
    choice->why = "1 QP per connection: no degraded link to recover from";
    return first;
  }
  choice->tried.emplace_back(1, first->recovery);
  choice->bound_recovery = BoundRecovery(*first);
  if (first->recovery >= target) {
    choice->why = absl::StrCat("1 QP per connection: the re-plan recovers ",
                               Pct(first->recovery), " of the healthy bound");
    return first;
  }
  // The same degraded links for every probe (a busiest link is the 1-QP
  // plan's; with more QPs another could be busiest).
  EvalOptions probe = o;
  probe.degrade_busiest = 0;
  probe.degrade.clear();
  for (const std::string& name : first->degraded_links) {
    absl::StatusOr<std::vector<int>> l = fabric->FindLinks(name);
    if (!l.ok()) return l.status();
    const FabricLink& fl = fabric->link(l->front());
    probe.degrade.emplace_back(name, fl.gbps / fl.nominal_gbps);
  }
  EvalOptions full = probe;
  probe.seeds = 1;
  probe.pin_ports = false;
  int best_q = 1;
  double best = first->recovery;
  for (int q = 2; q <= max_qps; q *= 2) {
    fabric->ResetCapacities();
    probe.ring.qps_per_connection = q;
    absl::StatusOr<EvalReport> r = Evaluate(fabric, probe);
    if (!r.ok()) return r.status();
    choice->tried.emplace_back(q, r->recovery);
    if (r->recovery > best + 1e-9) {
      best = r->recovery;
      best_q = q;
    }
    if (r->recovery >= target) break;
  }
  std::string tried;
  for (const auto& [q, rec] : choice->tried) {
    absl::StrAppend(&tried, tried.empty() ? "" : ", ", q, " QP",
                    q > 1 ? "s" : "", ": ", Pct(rec));
  }
  if (best_q == 1 || best < first->recovery + 0.01) {
    choice->why = absl::StrCat(
        "1 QP per connection: more QPs do not lift the re-plan's recovery (",
        tried, "; no routing beats ", Pct(choice->bound_recovery), ")");
    fabric->ResetCapacities();
    return Evaluate(fabric, one);
  }
  choice->qps = best_q;
  choice->launch = absl::StrCat("NCCL_IB_QPS_PER_CONNECTION=", best_q);
  choice->why = absl::StrCat(
      best_q, " QPs per connection (launch with ", choice->launch,
      "): the re-plan recovers ", Pct(best), " of the healthy bound (", tried,
      best >= target ? ""
                     : absl::StrCat("; target ", Pct(target),
                                    " not reached, no routing "
                                    "beats ",
                                    Pct(choice->bound_recovery)),
      ")");
  fabric->ResetCapacities();
  full.ring.qps_per_connection = best_q;
  return WithFirstWarnings(Evaluate(fabric, full), *first);
}

}  // namespace pitstop::c4p
