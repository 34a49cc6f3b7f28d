#include "src/controller/plan/evaluate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "src/controller/plan/ecmp.h"
#include "src/controller/plan/flow_sim.h"

namespace pitstop::plan {
namespace {

double Ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - since)
      .count();
}

std::vector<double> Capacities(const Fabric& fabric) {
  std::vector<double> c(fabric.links().size());
  for (size_t i = 0; i < c.size(); ++i) c[i] = fabric.link(i).gbps;
  return c;
}

// Completion of the flows with these paths (network and NVLink parts are
// independent under max-min, so they are simulated apart).
double Completion(const std::vector<Flow>& flows,
                  const std::vector<std::vector<int>>& paths,
                  const std::vector<double>& cap, double nvlink_done) {
  std::vector<SimFlow> sim;
  sim.reserve(flows.size());
  for (size_t i = 0; i < flows.size(); ++i) {
    if (!flows[i].network) continue;
    sim.push_back(SimFlow{&paths[i], flows[i].bytes, flows[i].channel});
  }
  return std::max(nvlink_done, SimulateMaxMin(sim, cap).completion_s);
}

double MaxUtil(const Fabric& fabric, const std::vector<Flow>& flows,
               const std::vector<std::vector<int>>& paths, double t_ref) {
  std::vector<double> bytes(fabric.links().size(), 0);
  for (size_t i = 0; i < flows.size(); ++i) {
    for (int l : paths[i]) bytes[l] += flows[i].bytes;
  }
  double worst = 0;
  for (size_t l = 0; l < bytes.size(); ++l) {
    if (bytes[l] <= 0) continue;
    const double gbps = fabric.link(l).gbps;
    const double t = gbps > 0 ? bytes[l] * 8 / (gbps * 1e9) : 1e30;
    worst = std::max(worst, t);
  }
  return t_ref > 0 ? worst / t_ref : 0;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  // Nearest rank.
  size_t k = static_cast<size_t>(std::ceil(p * v.size()));
  k = std::clamp<size_t>(k, 1, v.size());
  return v[k - 1];
}

struct EcmpStats {
  StrategyResult r;
};

StrategyResult RunEcmp(const Fabric& fabric, const std::vector<Flow>& flows,
                       const HashFunction& hash, const EvalOptions& o,
                       double nvlink_done, double t_ref,
                       const std::vector<std::vector<int>>& nv_paths) {
  const std::vector<double> cap = Capacities(fabric);
  std::vector<double> done, util;
  std::vector<std::vector<int>> paths = nv_paths;
  for (int s = 0; s < o.seeds; ++s) {
    EcmpRouter router(&fabric, &hash, o.first_seed + s);
    for (size_t i = 0; i < flows.size(); ++i) {
      if (flows[i].network) paths[i] = router.Route(flows[i]).links;
    }
    done.push_back(Completion(flows, paths, cap, nvlink_done));
    util.push_back(MaxUtil(fabric, flows, paths, t_ref));
  }
  StrategyResult r;
  double sum = 0;
  for (double d : done) sum += d;
  r.completion_s = done.empty() ? 0 : sum / done.size();
  r.completion_s_p50 = Percentile(done, 0.5);
  r.completion_s_p99 = Percentile(done, 0.99);
  r.max_link_util = Percentile(util, 0.5);
  return r;
}

std::vector<std::vector<int>> PathsOf(const FlowPlan& plan) {
  std::vector<std::vector<int>> p(plan.paths.size());
  for (size_t i = 0; i < p.size(); ++i) p[i] = plan.paths[i].links;
  return p;
}

// One evaluation of the three strategies under the current capacities.
Evaluation EvaluateOnce(const Fabric& fabric, const std::vector<Flow>& flows,
                        const FlowPlan& plan, const HashFunction& hash,
                        const EvalOptions& o, double degraded_below,
                        const std::vector<std::vector<int>>& nv_paths) {
  const std::vector<double> cap = Capacities(fabric);
  // NVLink flows: the same under every strategy.
  std::vector<SimFlow> nv;
  for (size_t i = 0; i < flows.size(); ++i) {
    if (!flows[i].network && !nv_paths[i].empty()) {
      nv.push_back(SimFlow{&nv_paths[i], flows[i].bytes, flows[i].channel});
    }
  }
  const double nv_done = SimulateMaxMin(nv, cap).completion_s;
  Evaluation e;
  e.bound.completion_s =
      std::max(nv_done, CutBound(fabric, flows, degraded_below));
  e.bound.completion_s_p50 = e.bound.completion_s_p99 = e.bound.completion_s;
  e.bound.max_link_util = 1.0;
  const std::vector<std::vector<int>> planned = PathsOf(plan);
  e.planned.completion_s = Completion(flows, planned, cap, nv_done);
  e.planned.completion_s_p50 = e.planned.completion_s_p99 =
      e.planned.completion_s;
  e.planned.max_link_util =
      MaxUtil(fabric, flows, planned, e.bound.completion_s);
  e.ecmp =
      RunEcmp(fabric, flows, hash, o, nv_done, e.bound.completion_s, nv_paths);
  return e;
}

}  // namespace

double CutBound(const Fabric& fabric, const std::vector<Flow>& flows,
                double degraded_below) {
  auto gbps_sum = [&](const std::vector<int>& links) {
    double s = 0;
    for (int l : links) s += fabric.link(l).gbps;
    return s;
  };
  auto nic_degraded = [&](int gpu) {
    for (int l : fabric.nic_uplinks(gpu)) {
      for (int d : {l, l ^ 1}) {
        const FabricLink& fl = fabric.link(d);
        if (fl.gbps < fl.nominal_gbps * degraded_below) return true;
      }
    }
    return false;
  };
  // Groups of endpoints whose traffic has no way around a set of links:
  // key -> (bytes, links). "o:" out of, "i:" into.
  std::map<std::string, std::pair<double, std::vector<int>>> cuts;
  auto add = [&](const std::string& key, double bytes,
                 const std::vector<int>& links) {
    auto [it, fresh] = cuts.emplace(key, std::make_pair(0.0, links));
    it->second.first += bytes;
  };
  auto nic_links = [&](int gpu, bool out, bool whole_host) {
    std::vector<int> ls;
    std::vector<int> gpus = {gpu};
    if (whole_host) gpus = fabric.hosts()[fabric.node(gpu).host].gpus;
    for (int g : gpus) {
      for (int l : fabric.nic_uplinks(g)) ls.push_back(out ? l : l ^ 1);
    }
    return ls;
  };
  // Pods: ToRs grouped by the switches above them.
  std::map<int, std::string> pod_of;
  std::map<std::string, std::vector<int>> pod_up;
  for (size_t n = 0; n < fabric.nodes().size(); ++n) {
    if (fabric.node(n).kind != NodeKind::kTor) continue;
    std::vector<int> above;
    for (int l : fabric.out_links(n)) {
      if (fabric.link(l).kind == LinkKind::kFabric) {
        above.push_back(fabric.link(l).dst);
      }
    }
    std::sort(above.begin(), above.end());
    std::string key;
    for (int a : above) absl::StrAppend(&key, a, ",");
    pod_of[n] = key;
    if (!pod_up.count(key)) {
      std::vector<int> up;
      for (int a : above) {
        for (int l : fabric.out_links(a)) {
          const FabricLink& fl = fabric.link(l);
          if (fl.kind == LinkKind::kFabric &&
              fabric.node(fl.dst).kind != NodeKind::kTor) {
            up.push_back(l);
          }
        }
      }
      pod_up[key] = up;
    }
  }
  for (const Flow& f : flows) {
    if (!f.network) continue;
    const bool sd = nic_degraded(f.src_gpu), dd = nic_degraded(f.dst_gpu);
    add(absl::StrCat("o:", sd ? -1 - fabric.node(f.src_gpu).host : f.src_gpu),
        f.bytes, nic_links(f.src_gpu, true, sd));
    add(absl::StrCat("i:", dd ? -1 - fabric.node(f.dst_gpu).host : f.dst_gpu),
        f.bytes, nic_links(f.dst_gpu, false, dd));
    // ToR and pod cuts only hold for single-port NICs that stay put.
    const auto& su = fabric.nic_uplinks(f.src_gpu);
    const auto& du = fabric.nic_uplinks(f.dst_gpu);
    if (sd || dd || su.size() != 1 || du.size() != 1) continue;
    const int st = fabric.tor_of_uplink(su[0]),
              dt = fabric.tor_of_uplink(du[0]);
    if (st == dt) continue;
    std::vector<int> up, down;
    for (int l : fabric.out_links(st)) {
      if (fabric.link(l).kind == LinkKind::kFabric) up.push_back(l);
    }
    for (int l : fabric.out_links(dt)) {
      if (fabric.link(l).kind == LinkKind::kFabric) down.push_back(l ^ 1);
    }
    add(absl::StrCat("tu:", st), f.bytes, up);
    add(absl::StrCat("td:", dt), f.bytes, down);
    const std::string& sp = pod_of[st];
    const std::string& dp = pod_of[dt];
    if (sp != dp && !pod_up[sp].empty() && !pod_up[dp].empty()) {
      add("pu:" + sp, f.bytes, pod_up[sp]);
      std::vector<int> pd;
      for (int l : pod_up[dp]) pd.push_back(l ^ 1);
      add("pd:" + dp, f.bytes, pd);
    }
  }
  double worst = 0;
  for (const auto& [key, c] : cuts) {
    const double g = gbps_sum(c.second);
    const double t = g > 0 ? c.first * 8 / (g * 1e9) : 1e30;
    worst = std::max(worst, t);
  }
  return worst;
}

absl::StatusOr<EvalReport> Evaluate(Fabric* fabric, const EvalOptions& o) {
  EvalReport rep;
  rep.fabric = fabric->description;
  rep.assumptions = fabric->assumptions();
  rep.ranks = o.ranks > 0 ? o.ranks : fabric->gpu_count();
  rep.seeds = o.seeds;
  rep.hash = o.hash;
  if (o.seeds < 1) return absl::InvalidArgumentError("seeds must be >= 1");
  absl::StatusOr<std::unique_ptr<HashFunction>> hash = MakeHash(o.hash);
  if (!hash.ok()) return hash.status();
  absl::StatusOr<std::vector<int>> place =
      PlaceJob(*fabric, rep.ranks, o.placement, o.placement_seed);
  if (!place.ok()) return place.status();
  rep.flow_list = BuildRingFlows(*fabric, *place, o.ring, &rep.channels);
  const std::vector<Flow>& flows = rep.flow_list;
  {
    std::vector<int> hosts;
    for (int g : *place) hosts.push_back(fabric->node(g).host);
    std::sort(hosts.begin(), hosts.end());
    rep.hosts = static_cast<int>(std::unique(hosts.begin(), hosts.end()) -
                                 hosts.begin());
  }
  rep.flows = static_cast<int>(flows.size());
  std::vector<std::vector<int>> nv_paths(flows.size());
  for (size_t i = 0; i < flows.size(); ++i) {
    if (flows[i].network) {
      ++rep.network_flows;
    } else {
      nv_paths[i] = NvLinkPath(*fabric, flows[i]);
    }
  }
  PlannerOptions po;
  po.hash = o.pin_ports ? hash->get() : nullptr;
  po.fabric_seed = o.fabric_seed;
  Planner planner(fabric, &flows, po);
  auto t0 = std::chrono::steady_clock::now();
  FlowPlan plan = planner.Plan(1);
  rep.plan_ms = Ms(t0);
  for (size_t i = 0; i < flows.size(); ++i) {
    if (flows[i].network && plan.paths[i].src_port != 0) ++rep.pinned_flows;
  }
  rep.healthy = EvaluateOnce(*fabric, flows, plan, **hash, o, po.degraded_below,
                             nv_paths);
  rep.plan = plan;
  // Degrade.
  std::vector<int> changed;
  for (const auto& [spec, fraction] : o.degrade) {
    if (!(fraction >= 0 && fraction <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--degrade ", spec, "=", fraction,
                       ": the fraction must be in [0, 1]"));
    }
    absl::StatusOr<std::vector<int>> links = fabric->FindLinks(spec);
    if (!links.ok()) return links.status();
    for (int l : *links) {
      fabric->SetCapacity(l, fabric->link(l).nominal_gbps * fraction);
      changed.push_back(l);
    }
  }
  if (o.degrade_busiest > 0) {
    const std::vector<double> bytes = Planner::LinkBytes(*fabric, flows, plan);
    int busiest = -1;
    for (size_t l = 0; l < bytes.size(); ++l) {
      if (fabric->link(l).kind != LinkKind::kFabric || bytes[l] <= 0) continue;
      if (busiest < 0 || bytes[l] / fabric->link(l).gbps >
                             bytes[busiest] / fabric->link(busiest).gbps) {
        busiest = static_cast<int>(l);
      }
    }
    if (busiest >= 0) {
      for (int l : {busiest, busiest ^ 1}) {
        fabric->SetCapacity(l,
                            fabric->link(l).nominal_gbps * o.degrade_busiest);
        changed.push_back(l);
      }
    }
  }
  if (changed.empty()) return rep;
  rep.degraded = true;
  for (int l : changed) rep.degraded_links.push_back(fabric->LinkName(l));
  Planner::ReplanStats stats;
  t0 = std::chrono::steady_clock::now();
  FlowPlan re = planner.Replan(plan, changed, 2, &stats);
  rep.replan_ms = Ms(t0);
  rep.crossing = stats.crossing;
  rep.moved = stats.moved;
  rep.after =
      EvaluateOnce(*fabric, flows, re, **hash, o, po.degraded_below, nv_paths);
  rep.recovery =
      rep.after.planned.completion_s > 0
          ? rep.healthy.bound.completion_s / rep.after.planned.completion_s
          : 0;
  rep.plan = std::move(re);
  return rep;
}

}  // namespace pitstop::plan
