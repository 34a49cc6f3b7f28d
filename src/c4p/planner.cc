#include "src/c4p/planner.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>
#include <utility>

#include "src/c4p/bound.h"

namespace pitstop::c4p {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Milliseconds since *since; moves *since to now.
double Lap(std::chrono::steady_clock::time_point* since) {
  const auto now = std::chrono::steady_clock::now();
  const double ms =
      std::chrono::duration<double, std::milli>(now - *since).count();
  *since = now;
  return ms;
}

// With several QPs per connection: one flow per connection (its QPs'
// bytes; NVLink flows as they are) in *whole, and for each flow the index
// of its connection's flow in *whole_of. False when every connection has
// one QP (nothing to group).
bool WholeConnections(const std::vector<Flow>& flows, std::vector<Flow>* whole,
                      std::vector<int>* whole_of) {
  std::vector<int> first_of_conn;  // by Flow::conn: index into *whole
  bool grouped = false;
  whole->clear();
  whole_of->assign(flows.size(), -1);
  for (size_t i = 0; i < flows.size(); ++i) {
    const Flow& f = flows[i];
    if (f.network) {
      if (static_cast<size_t>(f.conn) >= first_of_conn.size()) {
        first_of_conn.resize(f.conn + 1, -1);
      }
      int& at = first_of_conn[f.conn];
      if (at >= 0) {
        (*whole)[at].bytes += f.bytes;
        (*whole_of)[i] = at;
        grouped = true;
        continue;
      }
      at = static_cast<int>(whole->size());
    }
    (*whole_of)[i] = static_cast<int>(whole->size());
    Flow w = f;
    w.id = static_cast<int>(whole->size());
    w.qp = 0;
    whole->push_back(w);
  }
  return grouped;
}

}  // namespace

Planner::Planner(const Fabric* fabric, const std::vector<Flow>* flows,
                 PlannerOptions options)
    : fabric_(fabric), flows_(flows), options_(std::move(options)) {
  load_.assign(fabric_->links().size(), 0);
  stamp_.assign(fabric_->nodes().size(), 0);
  memo_.assign(fabric_->nodes().size(), Cost{});
  memo_next_.assign(fabric_->nodes().size(), -1);
  hist_.assign(fabric_->links().size(), 0);
  hop_index_.assign(fabric_->nodes().size() * fabric_->tor_count(), -1);
  hop_sets_.resize(fabric_->nodes().size());
}

const std::vector<int>& Planner::Hops(int node, int tor_idx) {
  int16_t& idx =
      hop_index_[static_cast<size_t>(node) * fabric_->tor_count() + tor_idx];
  std::vector<std::vector<int>>& sets = hop_sets_[node];
  if (idx >= 0) return sets[idx];
  std::vector<int> hops;
  fabric_->NextHops(node, tor_idx, &hops);
  for (size_t i = 0; i < sets.size(); ++i) {
    if (sets[i] == hops) {
      idx = static_cast<int16_t>(i);
      return sets[i];
    }
  }
  // The recursion never comes back to this node while iterating its set
  // (distances strictly fall), so growing `sets` here is safe.
  sets.push_back(std::move(hops));
  idx = static_cast<int16_t>(sets.size() - 1);
  return sets.back();
}

Planner::Cost Planner::LinkCost(int link, double bytes) const {
  if (!banned_.empty() && banned_[link]) return Cost{kInf, kInf};
  const double t = Time(link, bytes);
  if (eject_goal_ > 0) {
    // Fewest links pushed over the goal first (an alternating path needs
    // at most one), then the least loaded.
    return Cost{0, (t > eject_goal_ ? 1e6 : 0) + t / eject_goal_};
  }
  if (!negotiating_) return Cost{t, t};
  // Negotiated congestion: cheap while the link stays within the target,
  // then a present-congestion penalty growing every round, scaled by the
  // link's history of being over (PathFinder).
  const double x = t / target_;
  const double over = std::max(0.0, x - goal_ / target_);
  return Cost{0, (1 + hist_[link]) * (x + pres_ * over)};
}

double Planner::MaxTime() const {
  double worst = 0;
  for (size_t l = 0; l < load_.size(); ++l) {
    if (load_[l] <= 0 || fabric_->link(l).kind == LinkKind::kNvLink) continue;
    worst = std::max(worst, Time(static_cast<int>(l), 0));
  }
  return worst;
}

bool Planner::Better(const Cost& a, const Cost& b) const {
  // Bottleneck first; among equal bottlenecks the less loaded path overall.
  if (a.max < b.max * (1 - 1e-9)) return true;
  if (b.max < a.max * (1 - 1e-9)) return false;
  // Among equal bottlenecks keep the flow's NICs: another NIC of the host
  // costs a forwarding hop over NVLink (PXN) that the links do not charge,
  // and changes the communicator's NIC set. So a dual-port NIC whose port
  // degrades sends over its other port (the other plane) rather than
  // through a neighbour NIC that saves a few links. Not while ejecting or
  // negotiating: their costs are all in `sum`.
  if (a.nic_moves != b.nic_moves && eject_goal_ <= 0 && !negotiating_) {
    return a.nic_moves < b.nic_moves;
  }
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
    const Cost t = LinkCost(l, bytes);
    c.max = std::max(c.max, t.max);
    c.sum += t.sum;
  }
  if (links.empty()) c.max = c.sum = kInf;
  return c;
}

void Planner::Add(const PlannedPath& p, double bytes, double sign) {
  ForEachPart(p, bytes, [&](const std::vector<int>& links, double b) {
    for (int l : links) load_[l] += sign * b;
  });
}

Planner::Cost Planner::Through(int node, int tor_idx, double bytes) {
  if (fabric_->Distance(node, tor_idx) == 0) return Cost{};
  if (stamp_[node] == cur_stamp_) return memo_[node];
  Cost best{kInf, kInf};
  int best_link = -1;
  for (int l : Hops(node, tor_idx)) {
    const Cost rest = Through(fabric_->link(l).dst, tor_idx, bytes);
    const Cost t = LinkCost(l, bytes);
    const Cost c{std::max(t.max, rest.max), t.sum + rest.sum};
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
  ++phases_.searches;
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
                       t_up + t_down + mid.sum,
                       (sg != f.src_gpu) + (dg != f.dst_gpu)};
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
  p->split_ports.assign(p->split.size(), 0);
  if (options_.hash == nullptr || p->links.empty()) return;
  EcmpRouter router(fabric_, options_.hash, options_.fabric_seed);
  Flow g = f;
  g.src_gpu = p->src_gpu;
  g.dst_gpu = p->dst_gpu;
  const uint64_t start = Mix64(static_cast<uint64_t>(f.id)) % kSourcePorts;
  auto find = [&](const std::vector<int>& links) -> uint16_t {
    return router.FindPort(g, links, start, kPinTries);
  };
  p->src_port = find(p->links);
  for (size_t k = 0; k < p->split.size(); ++k) {
    p->split_ports[k] = find(p->split[k]);
  }
}

void Planner::Route(const Flow& f, PlannedPath* p) {
  if (!f.network) {
    // Never empty: a flow is not `network` only where NVLink joins its
    // GPUs. (Falling back to the network here once loaded NICs with flows
    // that the simulator and the bound, which skip non-network flows, never
    // saw: the plan balanced the wrong loads.)
    p->links = NvLinkPath(*fabric_, f);
    p->src_gpu = f.src_gpu;
    p->dst_gpu = f.dst_gpu;
    return;
  }
  Best(f, p);
}

FlowPlan Planner::Plan(uint64_t epoch) {
  std::vector<Flow> whole;
  std::vector<int> whole_of;
  const int network = static_cast<int>(std::count_if(
      flows_->begin(), flows_->end(), [](const Flow& f) { return f.network; }));
  if (network > options_.whole_connections_above &&
      WholeConnections(*flows_, &whole, &whole_of)) {
    return PlanByConnection(epoch, whole, whole_of);
  }
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
  phases_ = PhaseTimes{};
  auto t = std::chrono::steady_clock::now();
  for (size_t k = 0; k < order.size(); ++k) {
    const int i = order[k];
    Route(flows[i], &plan.paths[i]);
    Add(plan.paths[i], flows[i].bytes, +1);
    Report("routing flows", static_cast<int>(k) + 1,
           static_cast<int>(order.size()));
  }
  Improve(&plan);
  phases_.greedy_ms = Lap(&t);
  SetGoal();
  phases_.goal_ms = Lap(&t);
  Repair(&plan);
  phases_.repair_ms = Lap(&t);
  Negotiate(&plan);
  phases_.negotiate_ms = Lap(&t);
  Repair(&plan);
  phases_.repair_ms += Lap(&t);
  return plan;
}

FlowPlan Planner::PlanByConnection(uint64_t epoch,
                                   const std::vector<Flow>& whole,
                                   const std::vector<int>& whole_of) {
  Planner by_connection(fabric_, &whole, options_);
  const FlowPlan first = by_connection.Plan(epoch);
  phases_ = by_connection.phases_;
  auto t = std::chrono::steady_clock::now();
  const std::vector<Flow>& flows = *flows_;
  FlowPlan plan;
  plan.epoch = epoch;
  plan.paths.resize(flows.size());
  std::fill(load_.begin(), load_.end(), 0);
  for (size_t i = 0; i < flows.size(); ++i) {
    plan.paths[i] = first.paths[whole_of[i]];
    Add(plan.paths[i], flows[i].bytes, +1);
  }
  SetGoal();
  phases_.goal_ms += Lap(&t);
  // QPs can reach what whole connections cannot (a cut whose connections
  // do not divide evenly over its links): repair QP by QP from there.
  if (MaxTime() <= goal_) return plan;
  Repair(&plan);
  phases_.repair_ms += Lap(&t);
  Negotiate(&plan);
  phases_.negotiate_ms += Lap(&t);
  Repair(&plan);
  phases_.repair_ms += Lap(&t);
  return plan;
}

int Planner::PinAll(FlowPlan* plan) const {
  int pinned = 0;
  const int total = static_cast<int>(flows_->size());
  int done = 0;
  for (const Flow& f : *flows_) {
    if (f.network) {
      Pin(f, &plan->paths[f.id]);
      if (plan->paths[f.id].src_port != 0) ++pinned;
    }
    Report("pinning source ports", ++done, total);
  }
  return pinned;
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

FlowPlan Planner::Replan(FlowPlan previous, const std::vector<int>& changed,
                         uint64_t epoch, ReplanStats* stats) {
  const std::vector<Flow>& flows = *flows_;
  FlowPlan plan = std::move(previous);
  plan.epoch = epoch;
  std::fill(load_.begin(), load_.end(), 0);
  for (size_t i = 0; i < flows.size(); ++i) {
    Add(plan.paths[i], flows[i].bytes, +1);
  }
  std::vector<char> hit(fabric_->links().size(), 0);
  for (int l : changed) hit[l] = 1;
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
  // Aim at the degraded fabric's bound; a flow that cannot stay within it on
  // one path is spread over more QPs, each routed on its own.
  target_ = CutBound(*fabric_, flows, options_.degraded_below);
  const double goal = target_ * (1 + options_.target_slack);
  // First keep, largest first, the crossing flows whose old path still meets
  // the goal: a link at a quarter of its speed still carries a quarter of
  // its QPs as fast as the others carry theirs. Only the rest move.
  std::vector<int> to_move;
  for (int i : crossing) {
    const PlannedPath& p = plan.paths[i];
    bool fits = p.split.empty();
    if (fits) {
      for (int g : {p.src_gpu, p.dst_gpu}) {
        // A flow on a degraded NIC leaves it (the NIC set changes).
        fits &= Candidates(g).size() == 1;
      }
    }
    if (fits && PathCost(p.links, flows[i].bytes).max <= goal) {
      Add(p, flows[i].bytes, +1);
    } else {
      to_move.push_back(i);
    }
  }
  int moved = 0;
  PlannedPath alt;
  for (int i : to_move) {
    const Flow& f = flows[i];
    Cost c = Best(f, &alt);
    PlannedPath chosen = alt;
    if (c.max > goal && options_.max_split > 1) {
      for (int k = 2; k <= options_.max_split; k *= 2) {
        Flow part = f;
        part.bytes = f.bytes / k;
        PlannedPath multi;
        double worst = 0;
        std::vector<PlannedPath> parts;
        for (int q = 0; q < k; ++q) {
          PlannedPath p;
          worst = std::max(worst, Best(part, &p).max);
          if (p.links.empty()) break;
          Add(p, part.bytes, +1);
          parts.push_back(std::move(p));
        }
        for (const PlannedPath& p : parts) Add(p, part.bytes, -1);
        if (static_cast<int>(parts.size()) != k) break;
        multi = parts[0];
        for (int q = 1; q < k; ++q) multi.split.push_back(parts[q].links);
        // Parts of one flow share its NIC choice only when they agree.
        bool same_nics = true;
        for (const PlannedPath& p : parts) {
          same_nics &= p.src_gpu == multi.src_gpu && p.dst_gpu == multi.dst_gpu;
        }
        if (!same_nics) continue;
        if (worst < c.max * (1 - 1e-9)) {
          c.max = worst;
          chosen = std::move(multi);
        }
        if (worst <= goal) break;
      }
    }
    if (!chosen.links.empty() &&
        (chosen.links != plan.paths[i].links || !chosen.split.empty())) {
      plan.paths[i] = std::move(chosen);
      Pin(f, &plan.paths[i]);
      ++moved;
    }
    Add(plan.paths[i], f.bytes, +1);
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
    ForEachPart(plan.paths[i], flows[i].bytes,
                [&](const std::vector<int>& links, double b) {
                  for (int l : links) bytes[l] += b;
                });
  }
  return bytes;
}

}  // namespace pitstop::c4p
