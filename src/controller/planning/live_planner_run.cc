// LivePlanner::Run: snapshot under the lock, plan without it, publish.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pitstop/logging.h"
#include "src/c4p/bound.h"
#include "src/c4p/plan_codec.h"
#include "src/controller/planning/live_planner.h"

namespace pitstop::controller {

struct LivePlanner::Snapshot {
  std::map<uint64_t, CommState> comms;
  // Jobs whose connections settled: the inputs of a full plan.
  std::map<std::string, JobInput> settled;
  std::map<std::string, uint64_t> epochs;  // every job's last epoch
  std::map<std::string, std::shared_ptr<const JobPlan>> plans;
  // Re-plans: the bytes each planned connection carries now (the plan's
  // flows keep what was measured when it was made, possibly nothing yet).
  std::map<std::string, std::map<ConnKey, double>> bytes;
  c4p::NicCapacityModel cora;
  std::map<int, Mark> marks;
  bool links = false;
};

LivePlanner::RunResult LivePlanner::Run() {
  RunResult result;
  MutexLock run(&run_mu_);
  Snapshot snap;
  {
    MutexLock lock(&mu_);
    const absl::Time now = options_.clock->Now();
    for (const auto& [job, in] : jobs_) {
      snap.epochs[job] = in.epoch;
      if (in.dirty && now - in.changed >= options_.settle) {
        snap.settled[job] = in;
      }
    }
    // Cora estimates move a little with every batch; ApplyCapacities keeps
    // only changes beyond 5% of nominal, so look every time.
    snap.links = links_dirty_ || options_.measure_nics;
    links_dirty_ = false;
    if (snap.settled.empty() && !snap.links) return result;
    if (options_.measure_nics) snap.cora = cora_;
    snap.marks = marks_;
  }
  std::vector<int> changed;
  if (snap.links) ApplyCapacities(snap, &changed);
  if (snap.settled.empty() && changed.empty()) return result;
  {
    // Only now the larger copies: most cycles change nothing.
    MutexLock lock(&mu_);
    snap.comms = comms_;
    snap.plans = plans_;
    if (!changed.empty()) {
      for (const auto& [job, p] : plans_) {
        auto jit = jobs_.find(job);
        if (jit == jobs_.end()) continue;
        std::map<ConnKey, double>& b = snap.bytes[job];
        for (const auto& [k, c] : jit->second.conns) b[k] = c.bytes;
      }
    }
  }
  std::set<std::string> jobs;
  for (const auto& [job, in] : snap.settled) jobs.insert(job);
  if (!changed.empty()) {
    for (const auto& [job, p] : snap.plans) jobs.insert(job);
  }
  std::map<std::string, std::shared_ptr<JobPlan>> made;
  std::vector<std::string> stale;  // the store holds a newer epoch
  for (const std::string& job : jobs) {
    const bool full = snap.settled.count(job) != 0;
    const uint64_t epoch = snap.epochs[job] + 1;
    std::shared_ptr<JobPlan> p = PlanJob(job, snap, changed, full, epoch);
    if (p == nullptr) continue;
    if (options_.store != nullptr) {
      absl::Status s = options_.store->SavePlan(
          StoredPlan{job, epoch, c4p::EncodePlan(p->plan)});
      if (!s.ok()) {
        // Not durable, so not served nor sent (a deposed leader's re-plan
        // is refused here by the store's fencing).
        Logger("planner")->error("job {}: plan epoch {} not saved: {}", job,
                                 epoch, s.ToString());
        if (absl::IsFailedPrecondition(s)) stale.push_back(job);
        continue;
      }
    }
    Logger("planner")->info("job {}: plan epoch {} ({}; {:.1f} ms)", job, epoch,
                            p->info.reason(), p->info.plan_ms());
    made[job] = p;
    result.planned[job] = epoch;
    for (Directive& d : DirectivesOf(job, *p, snap)) {
      result.directives.push_back(std::move(d));
    }
  }
  // Another controller saved a newer epoch (the store refused ours):
  // continue above it with a full plan.
  std::vector<StoredPlan> stored;
  if (!stale.empty()) {
    absl::StatusOr<std::vector<StoredPlan>> s = options_.store->Plans();
    if (s.ok()) stored = std::move(*s);
  }
  MutexLock lock(&mu_);
  for (const StoredPlan& s : stored) {
    if (std::find(stale.begin(), stale.end(), s.job_id) == stale.end()) {
      continue;
    }
    JobInput& in = jobs_[s.job_id];
    in.epoch = std::max(in.epoch, s.epoch);
    in.dirty = true;
    ++in.version;
  }
  for (size_t l = 0; l < gbps_.size(); ++l) gbps_[l] = work_.link(l).gbps;
  for (auto& [job, p] : made) {
    JobInput& in = jobs_[job];
    in.epoch = std::max(in.epoch, p->plan.epoch);
    auto sit = snap.settled.find(job);
    if (sit != snap.settled.end() && sit->second.version == in.version) {
      in.dirty = false;
    }
    plans_[job] = std::move(p);
  }
  // Settled jobs that could not be planned (ranks not on the fabric) wait
  // for the next new connection instead of retrying every cycle.
  for (const auto& [job, in] : snap.settled) {
    if (made.count(job) == 0 && jobs_[job].version == in.version) {
      jobs_[job].dirty = false;
    }
  }
  return result;
}

void LivePlanner::ApplyCapacities(const Snapshot& snap,
                                  std::vector<int>* changed) {
  // The capacities wanted now, computed in work_ itself (no copy of the
  // fabric: its routing tables are large), then compared with before.
  const size_t n = work_.links().size();
  std::vector<double> before(n);
  for (size_t l = 0; l < n; ++l) before[l] = work_.link(l).gbps;
  work_.ResetCapacities();
  if (options_.measure_nics) snap.cora.ApplyTo(&work_, 0);
  for (const auto& [l, m] : snap.marks) {
    work_.SetCapacity(
        l, std::min(work_.link(l).gbps, m.share * work_.link(l).nominal_gbps));
  }
  // Marks (and their removal) apply exactly; Cora's drift only beyond 5%
  // of nominal, so a NIC's estimate moving a little re-plans nothing.
  const double min_change = 0.05;
  for (size_t l = 0; l < n; ++l) {
    const int id = static_cast<int>(l);
    const double want = work_.link(l).gbps;
    const bool exact = snap.marks.count(id) || marked_applied_.count(id);
    if (exact ? want != before[l]
              : std::abs(want - before[l]) >
                    min_change * work_.link(l).nominal_gbps) {
      changed->push_back(id);
    } else {
      work_.SetCapacity(l, before[l]);
    }
  }
  marked_applied_.clear();
  for (const auto& [l, m] : snap.marks) marked_applied_.insert(l);
}

std::shared_ptr<LivePlanner::JobPlan> LivePlanner::PlanJob(
    const std::string& job, const Snapshot& snap,
    const std::vector<int>& changed, bool full, uint64_t epoch) {
  const auto t0 = std::chrono::steady_clock::now();
  auto p = std::make_shared<JobPlan>();
  c4p::Planner::ReplanStats stats;
  if (full) {
    if (!PlanFull(job, snap, epoch, p.get())) return nullptr;
  } else {
    auto it = snap.plans.find(job);
    if (it == snap.plans.end() || it->second == nullptr) return nullptr;
    if (!PlanAround(job, snap, *it->second, changed, epoch, p.get(), &stats)) {
      return nullptr;
    }
  }
  const double ms = std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - t0)
                        .count();
  const double worst = Summarise(job, epoch, ms, stats, p.get());
  if (!full) AdviseQps(p.get(), worst, epoch);
  return p;
}

bool LivePlanner::PlanFull(const std::string& job, const Snapshot& snap,
                           uint64_t epoch, JobPlan* p) {
  // Job-wide rank space: one index per (communicator, comm rank).
  std::map<std::pair<uint64_t, int>, int> index;
  std::vector<int> rank_gpu;
  std::vector<c4p::LiveConnection> live;
  int unplaced = 0;
  auto idx = [&](uint64_t comm, int rank) {
    auto [it, added] =
        index.try_emplace({comm, rank}, static_cast<int>(rank_gpu.size()));
    if (added) {
      const CommState& cs = snap.comms.at(comm);
      auto m = cs.members.find(rank);
      rank_gpu.push_back(m == cs.members.end() ? -1 : GpuOf(m->second));
    }
    return it->second;
  };
  for (const auto& [k, c] : snap.settled.at(job).conns) {
    if (!snap.comms.count(k.comm)) continue;
    const int a = idx(k.comm, k.src), b = idx(k.comm, k.dst);
    if (rank_gpu[a] < 0 || rank_gpu[b] < 0) {
      ++unplaced;
      continue;
    }
    live.push_back(c4p::LiveConnection{a, b, k.channel, c.bytes});
    p->conns.push_back(k);
  }
  if (unplaced > 0) {
    MutexLock lock(&mu_);
    if (unplaced_logged_.insert(job).second) {
      Logger("planner")->warn(
          "job {}: {} connections have a rank whose host or device is not "
          "on the fabric ({}); they are not planned",
          job, unplaced, base_.description);
    }
  }
  if (live.empty()) return false;
  absl::StatusOr<std::vector<c4p::Flow>> flows =
      c4p::FlowsFromConnections(work_, rank_gpu, live, 1);
  if (!flows.ok()) {
    Logger("planner")->error("job {}: {}", job, flows.status().ToString());
    return false;
  }
  p->flows = std::move(*flows);
  p->rank_gpu = rank_gpu;
  p->live = live;
  c4p::Planner planner(&work_, &p->flows, options_.planner);
  p->plan = planner.Plan(epoch);
  p->moved.assign(p->flows.size(), 0);
  int network = 0;
  for (const c4p::Flow& f : p->flows) network += f.network;
  p->info.set_reason(absl::StrCat("plan: ", p->conns.size(),
                                  " connections learned (", network,
                                  " network flows)"));
  return true;
}

bool LivePlanner::PlanAround(const std::string& job, const Snapshot& snap,
                             const JobPlan& prev,
                             const std::vector<int>& changed, uint64_t epoch,
                             JobPlan* p, c4p::Planner::ReplanStats* stats) {
  p->conns = prev.conns;
  p->flows = prev.flows;
  p->rank_gpu = prev.rank_gpu;
  p->live = prev.live;
  RefreshBytes(snap, job, p);
  c4p::Planner planner(&work_, &p->flows, options_.planner);
  p->plan = planner.Replan(prev.plan, changed, epoch, stats);
  if (stats->crossing == 0) return false;  // the job does not cross them
  p->moved.assign(p->flows.size(), 0);
  for (size_t i = 0; i < p->flows.size(); ++i) {
    const c4p::PlannedPath& a = p->plan.paths[i];
    const c4p::PlannedPath& b = prev.plan.paths[i];
    p->moved[i] =
        a.links != b.links || a.src_gpu != b.src_gpu || a.split != b.split;
  }
  std::string what;
  int shown = 0;
  for (int l : changed) {
    if (shown++ == 3) {
      absl::StrAppend(&what, ", ...");
      break;
    }
    absl::StrAppend(&what, shown > 1 ? ", " : "", base_.LinkName(l), " at ",
                    static_cast<int>(work_.link(l).gbps), " Gbps");
  }
  p->info.set_reason(absl::StrCat("re-plan: ", changed.size(),
                                  " links changed capacity (", what, ")"));
  return true;
}

double LivePlanner::Summarise(const std::string& job, uint64_t epoch, double ms,
                              const c4p::Planner::ReplanStats& stats,
                              JobPlan* p) {
  v1::FlowPlan& info = p->info;
  info.set_job_id(job);
  info.set_epoch(epoch);
  info.set_planned_unix_ns(
      static_cast<uint64_t>(absl::ToUnixNanos(options_.clock->Now())));
  info.set_plan_ms(ms);
  info.set_flows(static_cast<uint32_t>(p->flows.size()));
  uint32_t network = 0;
  for (const c4p::Flow& f : p->flows) network += f.network;
  info.set_network_flows(network);
  info.set_crossing_flows(stats.crossing);
  info.set_moved_flows(stats.moved);
  info.set_fabric(base_.description);
  for (size_t l = 0; l < work_.links().size(); ++l) {
    const c4p::FabricLink& fl = work_.link(l);
    if (fl.gbps < fl.nominal_gbps * options_.planner.degraded_below) {
      info.add_degraded_links(work_.LinkName(static_cast<int>(l)));
    }
  }
  const std::vector<double> bytes =
      c4p::Planner::LinkBytes(work_, p->flows, p->plan);
  double worst = 0;
  int worst_link = -1;
  for (size_t l = 0; l < bytes.size(); ++l) {
    const c4p::FabricLink& fl = work_.link(l);
    if (fl.kind == c4p::LinkKind::kNvLink || fl.gbps <= 0) continue;
    const double s = bytes[l] * 8 / (fl.gbps * 1e9);
    if (s > worst) {
      worst = s;
      worst_link = static_cast<int>(l);
    }
  }
  if (worst_link >= 0) {
    info.set_busiest_link(work_.LinkName(worst_link));
    info.set_busiest_link_s(worst);
  }
  return worst;
}

void LivePlanner::RefreshBytes(const Snapshot& snap, const std::string& job,
                               JobPlan* p) {
  // The flows of a plan keep the bytes measured when it was made; the first
  // summaries of a job can carry none (proxy ops not yet sized), and a plan
  // of zero-byte flows sees no load anywhere: a re-plan would keep every
  // flow on a degraded link. Re-plans use what is measured now.
  auto bit = snap.bytes.find(job);
  if (bit == snap.bytes.end()) return;
  for (c4p::Flow& f : p->flows) {
    auto c = bit->second.find(p->conns[f.conn]);
    if (c == bit->second.end() || c->second <= 0) continue;
    f.bytes = c->second;  // live flows: one QP per connection
  }
  for (size_t i = 0; i < p->live.size(); ++i) {
    auto c = bit->second.find(p->conns[i]);
    if (c != bit->second.end() && c->second > 0) p->live[i].bytes = c->second;
  }
}

double LivePlanner::BusiestSeconds(const std::vector<c4p::Flow>& flows,
                                   const c4p::FlowPlan& plan) const {
  const std::vector<double> bytes = c4p::Planner::LinkBytes(work_, flows, plan);
  double worst = 0;
  for (size_t l = 0; l < bytes.size(); ++l) {
    const c4p::FabricLink& fl = work_.link(l);
    if (fl.kind == c4p::LinkKind::kNvLink || fl.gbps <= 0) continue;
    worst = std::max(worst, bytes[l] * 8 / (fl.gbps * 1e9));
  }
  return worst;
}

void LivePlanner::AdviseQps(JobPlan* p, double replan_s, uint64_t epoch) {
  if (options_.qps_target <= 0 || replan_s <= 0 || p->live.empty()) return;
  // The healthy fabric's bound for these flows (bytes as measured now).
  const double healthy =
      c4p::CutBound(base_, p->flows, options_.planner.degraded_below);
  if (healthy <= 0) return;
  const double rec = healthy / replan_s;
  if (rec >= options_.qps_target) return;
  // What a job launched with q QPs per connection would get: its QPs
  // planned on the degraded fabric (a re-plan moves QPs, not connections).
  int best_q = 1;
  double best = rec;
  std::string tried = absl::StrFormat("1 QP: %.0f%%", 100 * rec);
  for (int q = 2; q <= options_.max_qps; q *= 2) {
    absl::StatusOr<std::vector<c4p::Flow>> flows =
        c4p::FlowsFromConnections(work_, p->rank_gpu, p->live, q);
    if (!flows.ok()) return;
    c4p::Planner planner(&work_, &*flows, options_.planner);
    const double s = BusiestSeconds(*flows, planner.Plan(epoch));
    if (s <= 0) return;
    const double r = healthy / s;
    absl::StrAppend(&tried, absl::StrFormat(", %d QPs: %.0f%%", q, 100 * r));
    if (r > best + 0.01) {
      best = r;
      best_q = q;
    }
    if (r >= options_.qps_target) break;
  }
  if (best_q == 1) {
    p->info.set_qps_advice(absl::StrCat(
        "the re-plan recovers ", absl::StrFormat("%.0f%%", 100 * rec),
        " of the healthy bound; more QPs per connection do not "
        "help (",
        tried, ")"));
    return;
  }
  p->info.set_recommended_qps(static_cast<uint32_t>(best_q));
  p->info.set_qps_advice(absl::StrCat(
      "launch with NCCL_IB_QPS_PER_CONNECTION=", best_q,
      ": the re-plan recovers ", absl::StrFormat("%.0f%%", 100 * rec),
      " of the healthy bound with whole connections, ",
      absl::StrFormat("%.0f%%", 100 * best), " with ", best_q,
      " QPs per connection (", tried, ")"));
}

std::vector<LivePlanner::Directive> LivePlanner::DirectivesOf(
    const std::string& job, const JobPlan& p, const Snapshot& snap) {
  // Per host, per communicator: the NICs its members' flows leave through
  // and the worst capacity share on their paths.
  struct Steer {
    std::set<int> nics;
    double share = 1;
    bool any = false;
  };
  std::map<std::string, std::map<uint64_t, Steer>> by_host;
  std::set<uint64_t> comms;
  for (const ConnKey& k : p.conns) comms.insert(k.comm);
  for (uint64_t comm : comms) {  // every member's host hears of its comm
    for (const auto& [rank, m] : snap.comms.at(comm).members) {
      by_host[m.host][comm].any = true;
    }
  }
  for (const c4p::Flow& f : p.flows) {
    const ConnKey& k = p.conns[f.conn];
    const CommState& cs = snap.comms.at(k.comm);
    auto m = cs.members.find(k.src);
    if (m == cs.members.end() || !f.network) continue;
    Steer& s = by_host[m->second.host][k.comm];
    const c4p::PlannedPath& path = p.plan.paths[f.id];
    s.nics.insert(
        base_.node(path.src_gpu >= 0 ? path.src_gpu : f.src_gpu).local);
    // Taken here, under run_mu_: the analysis does not follow the lambda
    // (and tracks a reference back to work_).
    const c4p::Fabric* work = &work_;
    c4p::ForEachPart(path, 0, [&](const std::vector<int>& links, double) {
      for (int l : links) {
        const c4p::FabricLink& fl = work->link(l);
        s.share = std::min(s.share, fl.gbps / fl.nominal_gbps);
      }
    });
  }
  std::vector<Directive> out;
  for (const auto& [host, comms] : by_host) {
    Directive d;
    d.host = host;
    d.directive.set_job_id(job);
    d.directive.set_epoch(p.plan.epoch);
    d.directive.set_reason(p.info.reason());
    for (const auto& [comm, s] : comms) {
      v1::CommSteering* c = d.directive.add_comms();
      c->set_comm_hash(comm);
      for (int n : s.nics) c->add_nic_indices(n);
      const bool degraded = s.share < options_.planner.degraded_below;
      c->set_degraded(degraded);
      c->set_path_capacity_share(s.share);
      const CommState& cs = snap.comms.at(comm);
      c->set_n_ranks(cs.n_ranks);
      c->set_n_nodes(cs.n_nodes);
      const uint32_t channels = cs.channels;
      c->set_channels_seen(channels);
      if (degraded && channels > 0) {
        // The ring moves at the slowest link's pace; channels beyond what
        // it carries only add contention there.
        c->set_max_channels(std::max<uint32_t>(
            1, static_cast<uint32_t>(std::ceil(channels * s.share))));
      }
    }
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace pitstop::controller
