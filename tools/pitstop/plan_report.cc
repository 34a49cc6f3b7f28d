// What `pitstop plan` writes (plan_report.h).
#include "tools/pitstop/plan_report.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/pitstop/plan_out.h"

namespace pitstop::tool {
namespace {

nlohmann::json StrategyJson(const c4p::StrategyResult& r, bool ecmp) {
  nlohmann::json j = {{"completion_s", r.completion_s},
                      {"max_link_util", r.max_link_util}};
  if (ecmp) {
    j["completion_s_p50"] = r.completion_s_p50;
    j["completion_s_p99"] = r.completion_s_p99;
  }
  return j;
}

nlohmann::json EvaluationJson(const c4p::Evaluation& e) {
  return {{"ecmp", StrategyJson(e.ecmp, true)},
          {"planned", StrategyJson(e.planned, false)},
          {"bound", StrategyJson(e.bound, false)}};
}

// `v` with `prec` decimals, right-aligned in `width`, or "n/a" when it is
// not a finite number (a speed bound keeps times finite; before, a ratio
// of two zeros printed "-nan").
std::string Num(double v, int width, int prec) {
  if (std::isfinite(v)) return absl::StrFormat("%*.*f", width, prec, v);
  return absl::StrFormat("%*s", width, std::isnan(v) ? "n/a" : "inf");
}

// A completion time in `width` (with its unit), "never" when infinite.
std::string Seconds(double t, int width) {
  if (std::isinf(t) && t > 0) return absl::StrFormat("%*s", width, "never");
  return Num(t, width - 1, 4) + "s";
}

// a / b, "n/a" where b is 0.
double Ratio(double a, double b) {
  return b > 0 ? a / b : std::numeric_limits<double>::quiet_NaN();
}

// The degraded links for the table's title: all of them up to kShown, else
// the first kShown and how many more (before, --degrade tor72=0.25 printed
// 128 links on one line; -o json lists them all).
std::string DegradedTitle(const std::vector<std::string>& links) {
  constexpr size_t kShown = 6;
  std::vector<std::string> shown(
      links.begin(), links.begin() + std::min(links.size(), kShown));
  std::string title = absl::StrCat("degraded: ", absl::StrJoin(shown, ", "));
  if (links.size() > kShown) {
    absl::StrAppend(&title, ", ... (", links.size(),
                    " links; -o json lists them all)");
  }
  return title;
}

}  // namespace

nlohmann::json QpsJson(const c4p::QpsChoice& c) {
  nlohmann::json tried = nlohmann::json::array();
  for (const auto& [q, rec] : c.tried) {
    tried.push_back({{"qps", q}, {"recovery_of_healthy_bound", rec}});
  }
  nlohmann::json j = {{"per_connection", c.qps},
                      {"auto", c.automatic},
                      {"why", c.why},
                      {"launch", c.launch},
                      {"tried", tried}};
  if (c.bound_recovery > 0) j["bound_recovery"] = c.bound_recovery;
  return j;
}

nlohmann::json ReportJson(const c4p::EvalReport& r) {
  nlohmann::json j = {{"fabric", r.fabric},
                      {"assumptions", r.assumptions},
                      {"warnings", r.warnings},
                      {"ranks", r.ranks},
                      {"hosts", r.hosts},
                      {"channels", r.channels},
                      {"flows", r.flows},
                      {"network_flows", r.network_flows},
                      {"pinned_flows", r.pinned_flows},
                      {"ecmp_seeds", r.seeds},
                      {"hash", r.hash},
                      {"plan_ms", r.plan_ms},
                      {"plan_cpu_ms", r.plan_cpu_ms},
                      {"pin_ms", r.pin_ms}};
  const c4p::Evaluation& now = r.degraded ? r.after : r.healthy;
  j.update(EvaluationJson(now));
  if (r.degraded) {
    j["healthy"] = EvaluationJson(r.healthy);
    j["replan"] = {
        {"degraded_links", r.degraded_links},
        {"crossing_flows", r.crossing},
        {"moved_flows", r.moved},
        {"moved_share",
         r.network_flows > 0 ? double(r.moved) / r.network_flows : 0.0},
        {"moved_connections", r.moved_connections},
        {"network_connections", r.network_connections},
        {"replan_ms", r.replan_ms},
        {"replan_cpu_ms", r.replan_cpu_ms},
        {"recovery_of_healthy_bound", r.recovery}};
  }
  return j;
}

void PrintTable(const c4p::EvalReport& r, const c4p::QpsChoice& qps) {
  std::cout << r.fabric << "\n";
  for (const std::string& a : r.assumptions) {
    std::cout << "  assumed: " << a << "\n";
  }
  for (const std::string& w : r.warnings) {
    std::cout << "  warning: " << w << "\n";
  }
  std::cout << absl::StrFormat(
      "all-reduce over %d ranks on %d hosts, %d channels: %d flows (%d "
      "on the network, %d pinned to a source port)\n",
      r.ranks, r.hosts, r.channels, r.flows, r.network_flows, r.pinned_flows);
  auto print = [&](const c4p::Evaluation& e, const std::string& title) {
    std::cout << "\n" << title << "\n";
    std::cout << absl::StrFormat("  %-28s %12s %14s\n", "", "completion",
                                 "max link util");
    auto row = [](const std::string& name, double t, double util) {
      std::cout << absl::StrFormat("  %-28s %s", name, Seconds(t, 12))
                << (util >= 0 ? " " + Num(util, 14, 2) : "") << "\n";
    };
    row(absl::StrCat("ECMP p50 (", r.seeds, " seeds, ", r.hash, ")"),
        e.ecmp.completion_s_p50, e.ecmp.max_link_util);
    row("ECMP p99", e.ecmp.completion_s_p99, -1);
    row("planned", e.planned.completion_s, e.planned.max_link_util);
    row("bound (perfect spraying)", e.bound.completion_s,
        e.bound.max_link_util);
    std::cout << absl::StrFormat(
        "  planned vs bound %sx, ECMP p99 / planned %sx, ECMP p50 / "
        "planned %sx\n",
        Num(Ratio(e.planned.completion_s, e.bound.completion_s), 0, 3),
        Num(Ratio(e.ecmp.completion_s_p99, e.planned.completion_s), 0, 2),
        Num(Ratio(e.ecmp.completion_s_p50, e.planned.completion_s), 0, 2));
    if (std::isinf(e.ecmp.completion_s_p99)) {
      std::cout << "  ECMP never completes: it keeps flows on a link that is "
                   "down (a NIC's only port); NCCL does not move them\n";
    }
  };
  print(r.healthy,
        absl::StrFormat("healthy (plan computed in %.1f ms)", r.plan_ms));
  if (r.degraded) {
    print(r.after, DegradedTitle(r.degraded_links));
    std::cout << absl::StrFormat(
        "  re-plan: %d of %d network flows crossed the degraded link(s), %d "
        "moved (%.2f%%; %d of %d connections) in %.2f ms; recovers %.1f%% of "
        "the healthy bound\n",
        r.crossing, r.network_flows, r.moved,
        r.network_flows ? 100.0 * r.moved / r.network_flows : 0.0,
        r.moved_connections, r.network_connections, r.replan_ms,
        100 * r.recovery);
  }
  std::cout << "\nQPs: " << qps.why << "\n";
}

absl::Status WritePlan(const c4p::Fabric& fabric, const c4p::EvalReport& r,
                       const std::string& path) {
  nlohmann::json flows = nlohmann::json::array();
  const int nodes = static_cast<int>(fabric.nodes().size());
  auto is_gpu = [&](int g) {
    return g >= 0 && g < nodes && fabric.node(g).kind == c4p::NodeKind::kGpu;
  };
  for (const c4p::Flow& f : r.flow_list) {
    if (!f.network) continue;
    if (f.id < 0 || static_cast<size_t>(f.id) >= r.plan.paths.size() ||
        !is_gpu(r.plan.paths[f.id].src_gpu) ||
        !is_gpu(r.plan.paths[f.id].dst_gpu)) {
      // Evaluate refuses a job with unreachable NICs; a plan without a NIC
      // for a flow is a bug, said instead of indexing out of range.
      return absl::InternalError(absl::StrCat(
          "not writing ", path, ": flow ", f.id, " (rank ", f.src_rank,
          " -> rank ", f.dst_rank, ") has no planned NIC pair"));
    }
    const c4p::PlannedPath& p = r.plan.paths[f.id];
    nlohmann::json links = nlohmann::json::array();
    for (int l : p.links) links.push_back(fabric.LinkName(l));
    nlohmann::json extra = nlohmann::json::array();
    for (size_t k = 0; k < p.split.size(); ++k) {
      nlohmann::json sl = nlohmann::json::array();
      for (int l : p.split[k]) sl.push_back(fabric.LinkName(l));
      extra.push_back({{"udp_src_port", p.split_ports[k]}, {"path", sl}});
    }
    flows.push_back({{"flow", f.id},
                     {"channel", f.channel},
                     {"src_rank", f.src_rank},
                     {"dst_rank", f.dst_rank},
                     {"qp", f.qp},
                     {"src_nic", fabric.NicName(p.src_gpu)},
                     {"dst_nic", fabric.NicName(p.dst_gpu)},
                     {"udp_src_port", p.src_port},
                     {"path", links},
                     {"extra_qps", extra}});
  }
  return ReplaceFile(
      path,
      nlohmann::json{{"epoch", r.plan.epoch}, {"flows", flows}}.dump(1) + "\n");
}

}  // namespace pitstop::tool
