// What `pitstop plan` writes (plan_report.h).
#include "tools/pitstop/plan_report.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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

// "--plan-out PATH: cannot write it: <why>", errno's reason just after the
// failed open or write.
absl::Status CannotWrite(const std::string& path) {
  const int err = errno;
  return absl::InvalidArgumentError(absl::StrCat(
      "--plan-out ", path,
      ": cannot write it: ", err != 0 ? std::strerror(err) : "write failed"));
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
    std::cout << absl::StrFormat(
        "  %-28s %11.4fs %14.2f\n",
        absl::StrCat("ECMP p50 (", r.seeds, " seeds, ", r.hash, ")"),
        e.ecmp.completion_s_p50, e.ecmp.max_link_util);
    std::cout << absl::StrFormat("  %-28s %11.4fs\n", "ECMP p99",
                                 e.ecmp.completion_s_p99);
    std::cout << absl::StrFormat("  %-28s %11.4fs %14.2f\n", "planned",
                                 e.planned.completion_s,
                                 e.planned.max_link_util);
    std::cout << absl::StrFormat("  %-28s %11.4fs %14.2f\n",
                                 "bound (perfect spraying)",
                                 e.bound.completion_s, e.bound.max_link_util);
    std::cout << absl::StrFormat(
        "  planned vs bound %.3fx, ECMP p99 / planned %.2fx, ECMP p50 / "
        "planned %.2fx\n",
        e.planned.completion_s / e.bound.completion_s,
        e.ecmp.completion_s_p99 / e.planned.completion_s,
        e.ecmp.completion_s_p50 / e.planned.completion_s);
  };
  print(r.healthy,
        absl::StrFormat("healthy (plan computed in %.1f ms)", r.plan_ms));
  if (r.degraded) {
    std::string links;
    for (const std::string& l : r.degraded_links) {
      absl::StrAppend(&links, links.empty() ? "" : ", ", l);
    }
    print(r.after, "degraded: " + links);
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

absl::Status CheckPlanOut(const std::string& path,
                          const std::vector<std::string>& inputs) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const std::string& in : inputs) {
    // equivalent() follows links: a link to the input is the input.
    if (!in.empty() && fs::equivalent(path, in, ec)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--plan-out ", path, ": is the input file ", in,
          " (the plan would overwrite it; give another file name)"));
    }
  }
  if (fs::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--plan-out ", path, ": is a directory (give a file name, e.g. ",
        (fs::path(path) / "plan.json").string(), ")"));
  }
  const fs::path dir = fs::path(path).parent_path();
  if (!dir.empty() && !fs::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--plan-out ", path, ": ", dir.string(),
        fs::exists(dir, ec) ? " is not a directory" : " does not exist"));
  }
  return absl::OkStatus();
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
  errno = 0;
  std::ofstream out(path);
  if (!out) return CannotWrite(path);
  out << nlohmann::json{{"epoch", r.plan.epoch}, {"flows", flows}}.dump(1)
      << "\n";
  out.close();
  return out ? absl::OkStatus() : CannotWrite(path);
}

}  // namespace pitstop::tool
