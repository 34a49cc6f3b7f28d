// Planner: ejection-chain repair and negotiated congestion (planner.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "src/c4p/bound.h"
#include "src/c4p/planner.h"

namespace pitstop::c4p {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

void Planner::SetPath(FlowPlan* plan, int flow, PlannedPath path) {
  plan->paths[flow] = std::move(path);
  Add(plan->paths[flow], (*flows_)[flow].bytes, +1);
  for (int l : plan->paths[flow].links) on_link_[l].push_back(flow);
}

void Planner::ClearPath(FlowPlan* plan, int flow) {
  Add(plan->paths[flow], (*flows_)[flow].bytes, -1);
  for (int l : plan->paths[flow].links) {
    std::vector<int>& v = on_link_[l];
    auto it = std::find(v.begin(), v.end(), flow);
    if (it != v.end()) {
      *it = v.back();
      v.pop_back();
    }
  }
}

bool Planner::Eject(FlowPlan* plan, int link, int depth, double goal) {
  if (--eject_budget_ < 0) return false;
  const std::vector<Flow>& flows = *flows_;
  banned_[link] = 1;
  const std::vector<int> candidates = on_link_[link];
  PlannedPath alt;
  for (int f : candidates) {
    if (locked_[f]) continue;
    locked_[f] = 1;
    PlannedPath old = plan->paths[f];
    ClearPath(plan, f);
    eject_goal_ = goal;
    const Cost c = Best(flows[f], &alt);
    eject_goal_ = 0;
    if (!alt.links.empty() && c.sum < kInf) {
      SetPath(plan, f, alt);
      std::vector<int> over;
      for (int l : plan->paths[f].links) {
        if (Time(l, 0) > goal) over.push_back(l);
      }
      if (over.empty() || (over.size() == 1 && depth > 0 &&
                           Eject(plan, over[0], depth - 1, goal))) {
        locked_[f] = 0;
        banned_[link] = 0;
        return true;
      }
      ClearPath(plan, f);
    }
    SetPath(plan, f, std::move(old));
    locked_[f] = 0;
  }
  banned_[link] = 0;
  return false;
}

void Planner::SetGoal() {
  target_ = CutBound(*fabric_, *flows_, options_.degraded_below);
  // Whole flows cannot always reach the fluid bound (a cut whose flows do
  // not divide evenly over its links): aim at what they can reach, or the
  // repair spends its whole budget looking for the impossible.
  const double whole =
      WholeFlowBound(*fabric_, *flows_, options_.degraded_below);
  goal_ = std::max(target_ * (1 + options_.target_slack), whole * (1 + 1e-9));
}

void Planner::Repair(FlowPlan* plan) {
  const std::vector<Flow>& flows = *flows_;
  if (target_ <= 0) return;
  const double goal = goal_;
  on_link_.assign(load_.size(), {});
  for (size_t i = 0; i < flows.size(); ++i) {
    if (!flows[i].network) continue;
    for (int l : plan->paths[i].links) on_link_[l].push_back(int(i));
  }
  banned_.assign(load_.size(), 0);
  locked_.assign(flows.size(), 0);
  // Bounded work (search steps), so an instance with no fix (an
  // oversubscribed fabric) costs little; deterministic unlike a time limit.
  int work = options_.repair_work;
  for (int round = 0; round < options_.repair_rounds && work > 0; ++round) {
    Report("repair rounds", round, options_.repair_rounds);
    std::vector<int> over;
    for (size_t l = 0; l < load_.size(); ++l) {
      if (load_[l] > 0 && fabric_->link(l).kind != LinkKind::kNvLink &&
          Time(static_cast<int>(l), 0) > goal) {
        over.push_back(static_cast<int>(l));
      }
    }
    if (over.empty()) break;
    bool progress = false;
    for (int l : over) {
      if (work <= 0) break;
      eject_budget_ = std::min(20000, work);
      const int before = eject_budget_;
      while (Time(l, 0) > goal && Eject(plan, l, options_.eject_depth, goal)) {
        progress = true;
      }
      work -= before - std::max(0, eject_budget_);
    }
    if (!progress) break;
  }
  banned_.clear();
}

void Planner::Negotiate(FlowPlan* plan) {
  const std::vector<Flow>& flows = *flows_;
  if (target_ <= 0) return;
  const double goal = goal_;
  double best_max = MaxTime();
  FlowPlan best = *plan;
  std::fill(hist_.begin(), hist_.end(), 0);
  PlannedPath alt;
  for (int round = 0; round < options_.negotiate_rounds && best_max > goal;
       ++round) {
    Report("negotiation rounds", round, options_.negotiate_rounds);
    std::vector<char> over(load_.size(), 0);
    for (size_t l = 0; l < load_.size(); ++l) {
      if (load_[l] > 0 && Time(static_cast<int>(l), 0) > goal) over[l] = 1;
    }
    std::vector<int> redo;
    for (size_t i = 0; i < flows.size(); ++i) {
      if (!flows[i].network) continue;
      for (int l : plan->paths[i].links) {
        if (over[l]) {
          redo.push_back(static_cast<int>(i));
          break;
        }
      }
    }
    // Rotate the order so no flow always gets first pick.
    if (!redo.empty()) {
      std::rotate(redo.begin(), redo.begin() + (round * 7919) % redo.size(),
                  redo.end());
    }
    negotiating_ = true;
    pres_ = 0.5 * std::pow(1.6, round);
    for (int i : redo) {
      Add(plan->paths[i], flows[i].bytes, -1);
      Best(flows[i], &alt);
      if (!alt.links.empty()) plan->paths[i] = alt;
      Add(plan->paths[i], flows[i].bytes, +1);
    }
    negotiating_ = false;
    for (size_t l = 0; l < load_.size(); ++l) {
      if (load_[l] <= 0) continue;
      const double t = Time(static_cast<int>(l), 0);
      if (t > goal) hist_[l] += 0.3 * (t / target_ - 1);
    }
    const double now = MaxTime();
    if (now < best_max * (1 - 1e-9)) {
      best_max = now;
      best = *plan;
    }
  }
  if (best_max < MaxTime() * (1 - 1e-9)) {
    *plan = best;
    std::fill(load_.begin(), load_.end(), 0);
    for (size_t i = 0; i < flows.size(); ++i) {
      Add(plan->paths[i], flows[i].bytes, +1);
    }
  }
}

}  // namespace pitstop::c4p
