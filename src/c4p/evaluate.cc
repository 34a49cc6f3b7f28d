#include "src/c4p/evaluate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "src/c4p/ecmp.h"
#include "src/c4p/flow_sim.h"

namespace pitstop::c4p {
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

// Completion of the network parts (network and NVLink flows share no link,
// so under max-min they are independent and simulated apart).
double Completion(const std::vector<SimFlow>& parts,
                  const std::vector<double>& cap, double nvlink_done,
                  SimMode mode) {
  return std::max(nvlink_done, SimulateMaxMin(parts, cap, mode).completion_s);
}

double MaxUtil(const Fabric& fabric, const std::vector<SimFlow>& parts,
               double t_ref) {
  std::vector<double> bytes(fabric.links().size(), 0);
  for (const SimFlow& p : parts) {
    for (int l : *p.links) bytes[l] += p.bytes;
  }
  double worst = 0;
  for (size_t l = 0; l < bytes.size(); ++l) {
    if (bytes[l] <= 0) continue;
    const double gbps = fabric.link(l).gbps;
    // A link that is down and still carries bytes (ECMP keeps a NIC's only
    // port) is infinitely busy. Before, a 1e30 s stand-in over the bound
    // printed a utilisation of 1.7e+32.
    if (!(gbps > 0)) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, bytes[l] * 8 / (gbps * 1e9));
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

StrategyResult RunEcmp(const Fabric& fabric, const std::vector<Flow>& flows,
                       const HashFunction& hash, const EvalOptions& o,
                       const char* stage, double nvlink_done, double t_ref) {
  const std::vector<double> cap = Capacities(fabric);
  std::vector<double> done, util;
  std::vector<std::vector<int>> paths(flows.size());
  std::vector<SimFlow> parts;
  for (int s = 0; s < o.seeds; ++s) {
    EcmpRouter router(&fabric, &hash, o.first_seed + s);
    parts.clear();
    for (size_t i = 0; i < flows.size(); ++i) {
      if (!flows[i].network) continue;
      paths[i] = router.Route(flows[i]).links;
      parts.push_back(SimFlow{&paths[i], flows[i].bytes, flows[i].channel});
    }
    done.push_back(Completion(parts, cap, nvlink_done, o.sim_mode));
    util.push_back(MaxUtil(fabric, parts, t_ref));
    if (o.on_ecmp_seed) {
      o.on_ecmp_seed(
          EcmpProgress{stage, o.ring.qps_per_connection, s + 1, o.seeds});
    }
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

std::vector<SimFlow> PartsOf(const std::vector<Flow>& flows,
                             const FlowPlan& plan) {
  std::vector<SimFlow> parts;
  for (size_t i = 0; i < flows.size(); ++i) {
    if (!flows[i].network) continue;
    ForEachPart(plan.paths[i], flows[i].bytes,
                [&](const std::vector<int>& links, double b) {
                  parts.push_back(SimFlow{&links, b, flows[i].channel});
                });
  }
  return parts;
}

// One evaluation of the three strategies under the current capacities.
Evaluation EvaluateOnce(const Fabric& fabric, const std::vector<Flow>& flows,
                        const FlowPlan& plan, const HashFunction& hash,
                        const EvalOptions& o, const char* stage,
                        double degraded_below,
                        const std::vector<std::vector<int>>& nv_paths) {
  const std::vector<double> cap = Capacities(fabric);
  // NVLink flows: the same under every strategy.
  std::vector<SimFlow> nv;
  for (size_t i = 0; i < flows.size(); ++i) {
    if (!flows[i].network && !nv_paths[i].empty()) {
      nv.push_back(SimFlow{&nv_paths[i], flows[i].bytes, flows[i].channel});
    }
  }
  const double nv_done = SimulateMaxMin(nv, cap, o.sim_mode).completion_s;
  Evaluation e;
  e.bound.completion_s =
      std::max(nv_done, CutBound(fabric, flows, degraded_below));
  e.bound.completion_s_p50 = e.bound.completion_s_p99 = e.bound.completion_s;
  e.bound.max_link_util = 1.0;
  const std::vector<SimFlow> planned = PartsOf(flows, plan);
  e.planned.completion_s = Completion(planned, cap, nv_done, o.sim_mode);
  e.planned.completion_s_p50 = e.planned.completion_s_p99 =
      e.planned.completion_s;
  e.planned.max_link_util = MaxUtil(fabric, planned, e.bound.completion_s);
  e.ecmp =
      RunEcmp(fabric, flows, hash, o, stage, nv_done, e.bound.completion_s);
  return e;
}

// The links degraded so far, each once, and the flag that set each.
struct Degraded {
  std::vector<int> links;
  std::vector<std::string> flags;  // as given, in order
  std::map<int, int> by;           // link -> index in flags
};

// Sets `links` to `fraction` of their capacity for `flag`. A link an
// earlier flag (the same one repeated too) set already takes the later
// share, warned once per earlier flag (before, it was silent).
void SetShare(Fabric* fabric, const std::vector<int>& links, double fraction,
              const std::string& flag, Degraded* d,
              std::vector<std::string>* warnings) {
  const int now = static_cast<int>(d->flags.size());
  d->flags.push_back(flag);
  std::map<int, std::vector<int>> again;  // earlier flag -> its links
  for (int l : links) {
    fabric->SetCapacity(l, fabric->link(l).nominal_gbps * fraction);
    auto [it, fresh] = d->by.emplace(l, now);
    if (fresh) {
      d->links.push_back(l);
    } else if (it->second != now) {
      again[it->second].push_back(l);
      it->second = now;
    }
  }
  for (const auto& [earlier, ls] : again) {
    warnings->push_back(absl::StrCat(
        flag, ": ", ls.size(), ls.size() > 1 ? " links (" : " link (",
        fabric->LinkName(ls[0]), ls.size() > 1 ? ", ..." : "",
        ") already degraded by ", d->flags[earlier],
        d->flags[earlier] == flag ? " (given twice)" : "",
        ": the later share, ", fraction, ", applies"));
  }
}

// A share that leaves a link up but slower than any link (kMinLinkGbps)
// is a typo for 0 or a larger share: InvalidArgument naming the flag
// (before, --degrade-busiest 1e-300 printed ECMP times of 2.6e+297 s).
absl::Status CheckShare(const Fabric& fabric, const std::vector<int>& links,
                        double fraction, const std::string& flag) {
  if (fraction == 0) return absl::OkStatus();
  for (int l : links) {
    const double left = fabric.link(l).nominal_gbps * fraction;
    if (left >= kMinLinkGbps) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": leaves ", fabric.LinkName(l), " ", left, " Gbps of its ",
        fabric.link(l).nominal_gbps, ": a link that is up keeps at least ",
        kMinLinkGbps, " Gbps (1 Mb/s); 0 takes it down"));
  }
  return absl::OkStatus();
}

// The plan's busiest switch-to-switch link (by time at its capacity); -1
// when no such link carries the job.
int BusiestFabricLink(const Fabric& fabric, const std::vector<Flow>& flows,
                      const FlowPlan& plan) {
  const std::vector<double> bytes = Planner::LinkBytes(fabric, flows, plan);
  int busiest = -1;
  for (size_t l = 0; l < bytes.size(); ++l) {
    if (fabric.link(l).kind != LinkKind::kFabric || bytes[l] <= 0) continue;
    if (busiest < 0 || bytes[l] / fabric.link(l).gbps >
                           bytes[busiest] / fabric.link(busiest).gbps) {
      busiest = static_cast<int>(l);
    }
  }
  return busiest;
}

// Degrades the links --degrade names and, with --degrade-busiest, the
// busiest fabric link of `plan` (both directions). Returns the links
// changed, each once; InvalidArgument for a fraction outside [0, 1]. Says
// in `warnings` when --degrade-busiest found no switch-to-switch link
// carrying the job (a fabric or job without one), instead of re-planning
// nothing without a word, and when two flags degrade one link.
absl::StatusOr<std::vector<int>> Degrade(Fabric* fabric, const EvalOptions& o,
                                         const std::vector<Flow>& flows,
                                         const FlowPlan& plan,
                                         std::vector<std::string>* warnings) {
  Degraded d;
  for (const auto& [spec, fraction] : o.degrade) {
    const std::string flag = absl::StrCat("--degrade ", spec, "=", fraction);
    if (!(fraction >= 0 && fraction <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": the fraction must be in [0, 1]"));
    }
    absl::StatusOr<std::vector<int>> links = fabric->FindLinks(spec);
    if (!links.ok()) return links.status();
    if (absl::Status s = CheckShare(*fabric, *links, fraction, flag); !s.ok()) {
      return s;
    }
    SetShare(fabric, *links, fraction, flag, &d, warnings);
  }
  if (o.degrade_busiest <= 0) return d.links;
  const std::string flag =
      absl::StrCat("--degrade-busiest ", o.degrade_busiest);
  const int busiest = BusiestFabricLink(*fabric, flows, plan);
  if (busiest < 0) {
    warnings->push_back(absl::StrCat(
        flag,
        ": no switch-to-switch link carries this job's traffic, so nothing "
        "was degraded (use --degrade to name a NIC or ToR link)"));
    return d.links;
  }
  if (absl::Status s =
          CheckShare(*fabric, {busiest, busiest ^ 1}, o.degrade_busiest, flag);
      !s.ok()) {
    return s;
  }
  SetShare(fabric, {busiest, busiest ^ 1}, o.degrade_busiest, flag, &d,
           warnings);
  return d.links;
}

// The re-plan takes each flow's widest path, so a flow still on a link at
// 0 Gbps has no path with capacity: the degraded fabric cannot carry the
// job (a host's NICs or its ToR at 0). InvalidArgument naming the first.
absl::Status CheckReplanCarriesTheJob(const Fabric& fabric,
                                      const std::vector<Flow>& flows,
                                      const FlowPlan& re) {
  for (const Flow& f : flows) {
    if (!f.network) continue;
    for (int l : re.paths[f.id].links) {
      if (fabric.link(l).gbps > 0) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          "the degraded fabric cannot carry the job: rank ", f.src_rank,
          " -> rank ", f.dst_rank, " (", fabric.node(f.src_gpu).name, " -> ",
          fabric.node(f.dst_gpu).name, ") has no path with capacity: ",
          fabric.LinkName(l), " is at 0 Gbps and no path avoids it"));
    }
  }
  return absl::OkStatus();
}

// The re-plan's moves counted in connections: one with any QP moved counts
// once.
void CountMovedConnections(const std::vector<Flow>& flows,
                           const FlowPlan& before, const FlowPlan& after,
                           EvalReport* rep) {
  std::vector<char> seen, moved;
  for (const Flow& f : flows) {
    if (!f.network) continue;
    if (static_cast<size_t>(f.conn) >= seen.size()) {
      seen.resize(f.conn + 1, 0);
      moved.resize(f.conn + 1, 0);
    }
    seen[f.conn] = 1;
    const PlannedPath& a = before.paths[f.id];
    const PlannedPath& b = after.paths[f.id];
    if (a.links != b.links || a.split != b.split) moved[f.conn] = 1;
  }
  for (size_t c = 0; c < seen.size(); ++c) {
    rep->network_connections += seen[c];
    rep->moved_connections += moved[c];
  }
}

// A network flow whose NICs share no connected part of the fabric: the
// planner would find no path (before, the plan held NIC ids out of range
// and the bound was 1e30 s). Per rail Fabric::Finalize checks this; a ring
// that crosses rails (hosts with fewer of the job's GPUs) is checked here.
absl::Status CheckFlowReaches(const Fabric& fabric, const Flow& f) {
  absl::Status s = fabric.CheckNicsReach(f.src_gpu, f.dst_gpu);
  if (s.ok()) return s;
  return absl::InvalidArgumentError(absl::StrCat(
      s.message(), ": the job cannot run there (channel ", f.channel,
      "'s network hop from rank ", f.src_rank, " to rank ", f.dst_rank,
      " goes from ", fabric.NicName(f.src_gpu), " to ",
      fabric.NicName(f.dst_gpu), ")"));
}

// The job's flows on the fabric (ring or tree over its placement), with
// the hosts it spans and the NVLink paths of its local flows.
absl::Status BuildJobFlows(const Fabric& fabric, const EvalOptions& o,
                           EvalReport* rep,
                           std::vector<std::vector<int>>* nv_paths) {
  absl::StatusOr<std::vector<int>> place =
      PlaceJob(fabric, rep->ranks, o.placement, o.placement_seed);
  if (!place.ok()) return place.status();
  rep->flow_list = o.tree
                       ? BuildTreeFlows(fabric, *place, o.ring, &rep->channels)
                       : BuildRingFlows(fabric, *place, o.ring, &rep->channels);
  const std::vector<Flow>& flows = rep->flow_list;
  std::vector<int> hosts;
  for (int g : *place) hosts.push_back(fabric.node(g).host);
  std::sort(hosts.begin(), hosts.end());
  rep->hosts =
      static_cast<int>(std::unique(hosts.begin(), hosts.end()) - hosts.begin());
  rep->flows = static_cast<int>(flows.size());
  nv_paths->assign(flows.size(), {});
  for (size_t i = 0; i < flows.size(); ++i) {
    if (flows[i].network) {
      ++rep->network_flows;
      if (absl::Status s = CheckFlowReaches(fabric, flows[i]); !s.ok()) {
        return s;
      }
    } else {
      (*nv_paths)[i] = NvLinkPath(fabric, flows[i]);
    }
  }
  return absl::OkStatus();
}

// InvalidArgument naming the flag of an option no run means.
absl::Status CheckOptions(const EvalOptions& o) {
  if (o.seeds < 1 || o.seeds > kMaxEcmpSeeds) {
    return absl::InvalidArgumentError(
        absl::StrCat("--seeds ", o.seeds, ": draw 1..", kMaxEcmpSeeds,
                     " ECMP seeds (each is one simulation of the job)"));
  }
  if (!(o.ring.bytes > 0 && std::isfinite(o.ring.bytes))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--bytes ", o.ring.bytes, ": the all-reduce size must be finite, > 0"));
  }
  if (o.ring.channels < 0 || o.ring.channels > kNcclMaxChannels) {
    return absl::InvalidArgumentError(
        absl::StrCat("--channels ", o.ring.channels, ": NCCL runs 1..",
                     kNcclMaxChannels, " channels (0: two per NIC)"));
  }
  if (o.ranks < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ranks ", o.ranks, ": a rank count is >= 1 (0: every GPU)"));
  }
  if (!(o.degrade_busiest >= 0 && o.degrade_busiest <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--degrade-busiest ", o.degrade_busiest,
                     ": the share must be in [0, 1] (0: off)"));
  }
  return absl::OkStatus();
}

// One rank's all-reduce sends nothing: every ratio would be 0/0.
// Without --ranks, the fabric is what has one GPU (before, the message
// named a "--ranks 1" no one gave).
absl::Status CheckRanks(const Fabric& fabric, const EvalOptions& o, int ranks) {
  if (ranks >= 2) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      o.ranks > 0 ? absl::StrCat("--ranks ", ranks)
                  : absl::StrCat(fabric.description, ": ", ranks, " GPU"),
      ": an all-reduce over fewer than 2 ranks moves no data; give a fabric "
      "with 2 GPUs or more, and --ranks 2 or more"));
}

}  // namespace

absl::StatusOr<EvalReport> Evaluate(Fabric* fabric, const EvalOptions& o) {
  EvalReport rep;
  rep.fabric = fabric->description;
  rep.assumptions = fabric->assumptions();
  rep.warnings = fabric->warnings();
  rep.ranks = o.ranks > 0 ? o.ranks : fabric->gpu_count();
  rep.seeds = o.seeds;
  rep.hash = o.hash;
  if (absl::Status s = CheckOptions(o); !s.ok()) return s;
  if (absl::Status s = CheckRanks(*fabric, o, rep.ranks); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<HashFunction>> hash = MakeHash(o.hash);
  if (!hash.ok()) return hash.status();
  std::vector<std::vector<int>> nv_paths;
  if (o.on_plan_step) o.on_plan_step("building the job's flows", 0, 1);
  if (absl::Status s = BuildJobFlows(*fabric, o, &rep, &nv_paths); !s.ok()) {
    return s;
  }
  if (o.on_plan_step) o.on_plan_step("building the planner", 0, 1);
  const std::vector<Flow>& flows = rep.flow_list;
  PlannerOptions po;
  po.hash = o.pin_ports ? hash->get() : nullptr;
  po.fabric_seed = o.fabric_seed;
  po.progress = o.on_plan_step;
  Planner planner(fabric, &flows, po);
  auto t0 = std::chrono::steady_clock::now();
  const std::clock_t c0 = std::clock();
  FlowPlan plan = planner.Plan(1);
  rep.plan_ms = Ms(t0);
  rep.plan_cpu_ms = 1000.0 * (std::clock() - c0) / CLOCKS_PER_SEC;
  if (o.pin_ports) {
    t0 = std::chrono::steady_clock::now();
    rep.pinned_flows = planner.PinAll(&plan);
    rep.pin_ms = Ms(t0);
  }
  rep.healthy = EvaluateOnce(*fabric, flows, plan, **hash, o, "healthy",
                             po.degraded_below, nv_paths);
  rep.plan = plan;
  absl::StatusOr<std::vector<int>> changed =
      Degrade(fabric, o, flows, plan, &rep.warnings);
  if (!changed.ok()) return changed.status();
  if (changed->empty()) return rep;
  rep.degraded = true;
  for (int l : *changed) rep.degraded_links.push_back(fabric->LinkName(l));
  Planner::ReplanStats stats;
  FlowPlan previous = plan;
  t0 = std::chrono::steady_clock::now();
  const std::clock_t c1 = std::clock();
  FlowPlan re = planner.Replan(std::move(previous), *changed, 2, &stats);
  rep.replan_ms = Ms(t0);
  rep.replan_cpu_ms = 1000.0 * (std::clock() - c1) / CLOCKS_PER_SEC;
  if (absl::Status s = CheckReplanCarriesTheJob(*fabric, flows, re); !s.ok()) {
    return s;
  }
  rep.crossing = stats.crossing;
  rep.moved = stats.moved;
  CountMovedConnections(flows, plan, re, &rep);
  rep.after = EvaluateOnce(*fabric, flows, re, **hash, o, "degraded",
                           po.degraded_below, nv_paths);
  rep.recovery =
      rep.after.planned.completion_s > 0
          ? rep.healthy.bound.completion_s / rep.after.planned.completion_s
          : 0;
  rep.plan = std::move(re);
  return rep;
}

}  // namespace pitstop::c4p
