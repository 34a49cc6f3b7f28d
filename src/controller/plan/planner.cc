#include "src/controller/plan/planner.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <set>

namespace pitstop::plan {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

Planner::Planner(const Fabric* fabric, const std::vector<Flow>* flows,
                 PlannerOptions options)
    : fabric_(fabric), flows_(flows), options_(options) {
  load_.assign(fabric_->links().size(), 0);
  stamp_.assign(fabric_->nodes().size(), 0);
  memo_.assign(fabric_->nodes().size(), Cost{});
  memo_next_.assign(fabric_->nodes().size(), -1);
}

bool Planner::Better(const Cost& a, const Cost& b) const {
  // Bottleneck first; among equal bottlenecks the less loaded path overall.
  if (a.max < b.max * (1 - 1e-9)) return true;
  if (b.max < a.max * (1 - 1e-9)) return false;
  return a.sum < b.sum * (1 - 1e-9);
}

double Planner::Time(int link, double extra) const {
  const double gbps = fabric_->link(link).gbps;
  if (gbps <= 0) return kInf;
  return (load_[link] + extra) * 8 / (gbps * 1e9);
}

Planner::Cost Planner::PathCost(const std::vector<int>& links,
                                double bytes) const {
  Cost c;
  for (int l : links) {
    const double t = Time(l, bytes);
    c.max = std::max(c.max, t);
    c.sum += t;
  }
  if (links.empty()) c.max = c.sum = kInf;
  return c;
}

void Planner::Add(const PlannedPath& p, double bytes, double sign) {
  for (int l : p.links) load_[l] += sign * bytes;
}

Planner::Cost Planner::Through(int node, int tor_idx, double bytes) {
  if (fabric_->Distance(node, tor_idx) == 0) return Cost{};
  if (stamp_[node] == cur_stamp_) return memo_[node];
  const int here = fabric_->Distance(node, tor_idx);
  Cost best{kInf, kInf};
  int best_link = -1;
  for (int l : fabric_->out_links(node)) {
    const FabricLink& fl = fabric_->link(l);
    if (fl.kind != LinkKind::kFabric) continue;
    if (fabric_->Distance(fl.dst, tor_idx) != here - 1) continue;
    const Cost rest = Through(fl.dst, tor_idx, bytes);
    const double t = Time(l, bytes);
    const Cost c{std::max(t, rest.max), t + rest.sum};
    if (best_link < 0 || Better(c, best)) {
      best = c;
      best_link = l;
    }
  }
  stamp_[node] = cur_stamp_;
  memo_[node] = best;
  memo_next_[node] = best_link;
  return best;
}

std::vector<int> Planner::Candidates(int gpu) const {
  bool degraded = false;
  for (int l : fabric_->nic_uplinks(gpu)) {
    for (int d : {l, l ^ 1}) {
      const FabricLink& fl = fabric_->link(d);
      if (fl.gbps < fl.nominal_gbps * options_.degraded_below) degraded = true;
    }
  }
  if (!degraded) return {gpu};
  std::vector<int> out;
  for (int g : fabric_->hosts()[fabric_->node(gpu).host].gpus) {
    if (!fabric_->nic_uplinks(g).empty()) out.push_back(g);
  }
  return out;
}

Planner::Cost Planner::Best(const Flow& f, PlannedPath* path) {
  Cost best{kInf, kInf};
  path->links.clear();
  ++cur_stamp_;
  for (int sg : Candidates(f.src_gpu)) {
    for (int dg : Candidates(f.dst_gpu)) {
      for (int up : fabric_->nic_uplinks(sg)) {
        const int st = fabric_->tor_of_uplink(up);
        for (int dup : fabric_->nic_uplinks(dg)) {
          const int dt = fabric_->tor_of_uplink(dup);
          const int td = fabric_->tor_index(dt);
          if (fabric_->Distance(st, td) < 0) continue;
          // The memo is per destination ToR.
          ++cur_stamp_;
          const Cost mid = Through(st, td, f.bytes);
          const double t_up = Time(up, f.bytes),
                       t_down = Time(dup ^ 1, f.bytes);
          const Cost c{std::max({t_up, t_down, mid.max}),
                       t_up + t_down + mid.sum};
          if (!path->links.empty() && !Better(c, best)) continue;
          best = c;
          path->links.clear();
          path->links.push_back(up);
          for (int at = st; at != dt;) {
            const int l = memo_next_[at];
            path->links.push_back(l);
            at = fabric_->link(l).dst;
          }
          path->links.push_back(dup ^ 1);
          path->src_gpu = sg;
          path->dst_gpu = dg;
        }
      }
    }
  }
  return best;
}

void Planner::Pin(const Flow& f, PlannedPath* p) const {
  p->src_port = 0;
  if (options_.hash == nullptr || p->links.empty()) return;
  EcmpRouter router(fabric_, options_.hash, options_.fabric_seed);
  Flow g = f;
  g.src_gpu = p->src_gpu;
  g.dst_gpu = p->dst_gpu;
  const uint64_t start = Mix64(static_cast<uint64_t>(f.id)) % kSourcePorts;
  for (int i = 0; i < kSourcePorts; ++i) {
    const uint16_t port =
        static_cast<uint16_t>(kFirstSourcePort + (start + i) % kSourcePorts);
    if (router.Route(g, port).links == p->links) {
      p->src_port = port;
      return;
    }
  }
}

void Planner::Route(const Flow& f, PlannedPath* p) {
  if (!f.network) {
    p->links = NvLinkPath(*fabric_, f);
    p->src_gpu = f.src_gpu;
    p->dst_gpu = f.dst_gpu;
    if (!p->links.empty()) return;
  }
  Best(f, p);
}

FlowPlan Planner::Plan(uint64_t epoch) {
  std::fill(load_.begin(), load_.end(), 0);
  const std::vector<Flow>& flows = *flows_;
  FlowPlan plan;
  plan.epoch = epoch;
  plan.paths.resize(flows.size());
  std::vector<int> order(flows.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return flows[a].bytes > flows[b].bytes;
  });
  for (int i : order) {
    Route(flows[i], &plan.paths[i]);
    Add(plan.paths[i], flows[i].bytes, +1);
  }
  Improve(&plan);
  for (size_t i = 0; i < flows.size(); ++i) {
    if (flows[i].network) Pin(flows[i], &plan.paths[i]);
  }
  return plan;
}

void Planner::Improve(FlowPlan* plan) {
  const std::vector<Flow>& flows = *flows_;
  PlannedPath alt;
  for (int pass = 0; pass < options_.improve_passes; ++pass) {
    int moved = 0;
    for (size_t i = 0; i < flows.size(); ++i) {
      if (!flows[i].network) continue;
      PlannedPath& cur = plan->paths[i];
      Add(cur, flows[i].bytes, -1);
      const Cost now = PathCost(cur.links, flows[i].bytes);
      const Cost c = Best(flows[i], &alt);
      if (!alt.links.empty() && Better(c, now) && alt.links != cur.links) {
        cur = alt;
        ++moved;
      }
      Add(cur, flows[i].bytes, +1);
    }
    if (moved == 0) break;
  }
}

FlowPlan Planner::Replan(const FlowPlan& previous,
                         const std::vector<int>& changed, uint64_t epoch,
                         ReplanStats* stats) {
  const std::vector<Flow>& flows = *flows_;
  FlowPlan plan = previous;
  plan.epoch = epoch;
  std::fill(load_.begin(), load_.end(), 0);
  for (size_t i = 0; i < flows.size(); ++i) {
    Add(plan.paths[i], flows[i].bytes, +1);
  }
  std::vector<char> hit(fabric_->links().size(), 0);
  for (int l : changed) hit[l] = 1;
  std::set<int> degraded_hosts;
  std::vector<int> crossing;
  for (size_t i = 0; i < flows.size(); ++i) {
    if (!flows[i].network) continue;
    for (int l : plan.paths[i].links) {
      if (hit[l]) {
        crossing.push_back(static_cast<int>(i));
        break;
      }
    }
  }
  std::stable_sort(crossing.begin(), crossing.end(), [&](int a, int b) {
    return flows[a].bytes > flows[b].bytes;
  });
  for (int i : crossing) Add(plan.paths[i], flows[i].bytes, -1);
  int moved = 0;
  PlannedPath alt;
  for (int i : crossing) {
    Best(flows[i], &alt);
    if (!alt.links.empty() && alt.links != plan.paths[i].links) {
      plan.paths[i] = alt;
      Pin(flows[i], &plan.paths[i]);
      ++moved;
    }
    Add(plan.paths[i], flows[i].bytes, +1);
  }
  if (stats) {
    stats->crossing = static_cast<int>(crossing.size());
    stats->moved = moved;
  }
  return plan;
}

std::vector<double> Planner::LinkBytes(const Fabric& fabric,
                                       const std::vector<Flow>& flows,
                                       const FlowPlan& plan) {
  std::vector<double> bytes(fabric.links().size(), 0);
  for (size_t i = 0; i < flows.size(); ++i) {
    for (int l : plan.paths[i].links) bytes[l] += flows[i].bytes;
  }
  return bytes;
}

}  // namespace pitstop::plan
