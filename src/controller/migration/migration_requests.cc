// MigrationService: requests resolved against the job's communicators, its
// nodes and the standby pool; the pool itself; policy ACT.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pitstop/logging.h"
#include "src/controller/ha/leadership.h"
#include "src/controller/migration/migration_service.h"

namespace pitstop::controller {
namespace {

// The joiner's data plane that makes the new ids itself (PHASE_MAKE_IDS):
// the library, whose ids are real NCCL ids.
constexpr absl::string_view kLibraryPlane = "library";

absl::string_view StandbyName(v1::StandbyState s) {
  switch (s) {
    case v1::STANDBY_STATE_FREE:
      return "free";
    case v1::STANDBY_STATE_RESERVED:
      return "reserved";
    case v1::STANDBY_STATE_IN_USE:
      return "in use";
    case v1::STANDBY_STATE_UNREACHABLE:
      return "unreachable";
    default:
      return "?";
  }
}

bool HardwareSuspect(const v1::Fault& f, std::string* host) {
  for (const v1::Suspect& s : f.suspects()) {
    if ((s.level() == v1::SUSPECT_LEVEL_GPU ||
         s.level() == v1::SUSPECT_LEVEL_NIC ||
         s.level() == v1::SUSPECT_LEVEL_NODE) &&
        !s.host().empty()) {
      *host = s.host();
      return true;
    }
  }
  return false;
}

using FactsByHost = std::map<std::string, NodeFacts>;

FactsByHost ByHost(const std::vector<NodeFacts>& nodes) {
  FactsByHost out;
  for (const NodeFacts& f : nodes) out.emplace(f.host, f);
  return out;
}

// The leaver must be a known node that runs ranks.
absl::Status CheckLeaver(const v1::MigrateNodeRequest& r,
                         const FactsByHost& nodes) {
  auto node = nodes.find(r.host());
  if (node == nodes.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", r.host(),
                     " is not known to the controller (no agent has "
                     "registered it)"));
  }
  if (node->second.standby) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host: ", r.host(),
        " is a standby node; name a node that runs ranks (pitstopctl "
        "standby lists the standbys)"));
  }
  return absl::OkStatus();
}

// The job to migrate: the one named, or the only one with ranks on the
// leaver.
absl::StatusOr<std::string> JobOnLeaver(
    const v1::MigrateNodeRequest& r,
    const std::vector<v1::Communicator>& comms) {
  std::set<std::string> jobs_here;
  for (const v1::Communicator& c : comms) {
    for (const v1::MemberLocation& m : c.members()) {
      if (m.host() == r.host()) jobs_here.insert(c.job_id());
    }
  }
  if (!r.job_id().empty()) {
    if (!jobs_here.count(r.job_id())) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", r.job_id(), " has no ranks on ", r.host()));
    }
    return r.job_id();
  }
  if (jobs_here.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no job has ranks on ", r.host(), ": nothing to migrate"));
  }
  if (jobs_here.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("job_id: several jobs run on ", r.host(), " (",
                     absl::StrJoin(jobs_here, ", "), "); name one"));
  }
  return *jobs_here.begin();
}

// Whether `c` holds a member on a host the scheduler named (`scheduled`
// empty: it named none, every communicator of the job counts).
bool OnScheduledHost(const v1::Communicator& c,
                     const std::set<std::string>& scheduled) {
  if (scheduled.empty()) return true;
  for (const v1::MemberLocation& m : c.members()) {
    if (scheduled.contains(m.host())) return true;
  }
  return false;
}

// The job's ranks by host, the communicators to rebuild (those with a rank
// on the leaver) and the widest one (its sequence number names the switch
// point). When the scheduler named the job's hosts (`scheduled`), a
// member on another host is no member of the migration (it gets no
// directive, no NCCL unique id) and a communicator with no member on a
// named host is not the job's (a process elsewhere naming the job made
// it): neither is rebuilt, counted as unplaced, nor the switch
// communicator (issue #33 R21-6).
absl::Status CollectRanks(const std::string& leaver,
                          const std::vector<v1::Communicator>& comms,
                          const std::set<std::string>& scheduled,
                          MigrationPlan* plan) {
  std::map<std::string, std::set<int32_t>> ranks;
  int32_t widest = -1;
  int unplaced = 0;
  for (const v1::Communicator& c : comms) {
    if (c.job_id() != plan->job_id || !OnScheduledHost(c, scheduled)) continue;
    bool on_leaver = false;
    for (const v1::MemberLocation& m : c.members()) {
      if (m.host().empty()) {
        ++unplaced;
        continue;
      }
      if (!scheduled.empty() && !scheduled.contains(m.host())) continue;
      std::set<int32_t>& s = ranks[m.host()];
      if (m.global_rank() >= 0) s.insert(m.global_rank());
      on_leaver |= m.host() == leaver;
    }
    if (on_leaver) plan->comms.emplace_back(c.comm_hash(), c.comm_name());
    if (c.n_ranks() > widest) {
      widest = c.n_ranks();
      plan->switch_comm_hash = c.comm_hash();
    }
  }
  if (unplaced > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", plan->job_id, " is not migratable now: the hosts of ", unplaced,
        " communicator members are not known yet (their agents have not "
        "reported them)"));
  }
  for (const auto& [host, set] : ranks) {
    plan->ranks_by_host[host].assign(set.begin(), set.end());
  }
  return absl::OkStatus();
}

// Every member's agent must be connected (but a dead leaver's, from a
// replica) and have a data plane; the leaver's global ranks must be known.
absl::Status CheckMembers(const v1::MigrateNodeRequest& r,
                          const FactsByHost& nodes, MigrationPlan* plan) {
  std::vector<std::string> unreachable, no_plane;
  for (const auto& [host, ranks] : plan->ranks_by_host) {
    auto it = nodes.find(host);
    if (it == nodes.end() || !it->second.connected) {
      unreachable.push_back(host);
    } else if (it->second.migration_data_plane.empty()) {
      no_plane.push_back(host);
    }
  }
  if (plan->ranks_by_host[r.host()].empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", plan->job_id, " is not migratable: the global ranks on ",
        r.host(), " are unknown (the interposer reports them)"));
  }
  if (!unreachable.empty() && !(r.from_replica() && unreachable.size() == 1 &&
                                unreachable[0] == r.host())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", plan->job_id, " is not migratable now: the agents of ",
        absl::StrJoin(unreachable, ","), " are not connected"));
  }
  if (!no_plane.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", plan->job_id, " is not migratable: the agents of ",
                     absl::StrJoin(no_plane, ","),
                     " have no migration data plane (pitstop-agent "
                     "--migration-data-plane)"));
  }
  return absl::OkStatus();
}

// The joiner: the standby named (`to`), else the first free one with a
// data plane.
absl::Status ChooseJoiner(const v1::MigrateNodeRequest& r,
                          const std::vector<v1::StandbyNode>& pool,
                          const FactsByHost& nodes, MigrationPlan* plan) {
  if (!r.to().empty()) {
    auto it = std::find_if(pool.begin(), pool.end(),
                           [&](const auto& n) { return n.host() == r.to(); });
    if (it == pool.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "to: ", r.to(),
          nodes.count(r.to()) ? " is not a standby node (start its agent "
                                "with --standby)"
                              : " is not known to the controller"));
    }
    if (it->state() != v1::STANDBY_STATE_FREE) {
      return absl::FailedPreconditionError(absl::StrCat(
          "standby ", r.to(), " is ", StandbyName(it->state()),
          it->migration_id().empty() ? "" : " (", it->migration_id(),
          it->migration_id().empty() ? "" : ")"));
    }
    if (it->migration_data_plane().empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("standby ", r.to(), " has no migration data plane"));
    }
    plan->joiner_host = r.to();
    plan->ids_from_joiner = it->migration_data_plane() == kLibraryPlane;
    return absl::OkStatus();
  }
  std::vector<std::string> seen;
  for (const v1::StandbyNode& n : pool) {
    if (n.state() == v1::STANDBY_STATE_FREE &&
        !n.migration_data_plane().empty()) {
      plan->joiner_host = n.host();
      plan->ids_from_joiner = n.migration_data_plane() == kLibraryPlane;
      return absl::OkStatus();
    }
    seen.push_back(absl::StrCat(n.host(), " ", StandbyName(n.state())));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("no free standby node (", pool.size(), " standby",
                   seen.empty() ? "" : ": ", absl::StrJoin(seen, ", "),
                   "); start pitstop-agent --standby on a spare node"));
}

std::vector<NodeFacts> Standbys(const std::vector<NodeFacts>& nodes) {
  std::vector<NodeFacts> out;
  for (const NodeFacts& f : nodes) {
    if (f.standby) out.push_back(f);
  }
  return out;
}

}  // namespace

std::vector<v1::StandbyNode> MigrationService::Pool(
    const std::vector<NodeFacts>& standbys,
    const std::vector<v1::Communicator>& comms) {
  std::set<std::string> hosts_in_jobs;
  std::set<std::string> jobs;
  for (const v1::Communicator& c : comms) {
    jobs.insert(c.job_id());
    for (const v1::MemberLocation& m : c.members()) {
      hosts_in_jobs.insert(m.host());
    }
  }
  std::map<std::string, v1::Migration> reserved, committed;
  if (manager_) {
    reserved = manager_->Reserved();
    committed = manager_->Committed();
  }
  std::vector<v1::StandbyNode> out;
  for (const NodeFacts& e : standbys) {
    v1::StandbyNode n;
    n.set_host(e.host);
    n.set_gpus(e.gpus);
    n.set_migration_data_plane(e.migration_data_plane);
    n.set_last_seen_unix_ns(e.last_seen_unix_ns);
    auto r = reserved.find(e.host);
    auto c = committed.find(e.host);
    if (r != reserved.end()) {
      n.set_state(v1::STANDBY_STATE_RESERVED);
      n.set_migration_id(r->second.migration_id());
      n.set_job_id(r->second.job_id());
    } else if (e.connected_ranks > 0 || hosts_in_jobs.count(e.host) ||
               (c != committed.end() && jobs.count(c->second.job_id()))) {
      n.set_state(v1::STANDBY_STATE_IN_USE);
      if (c != committed.end()) {
        n.set_migration_id(c->second.migration_id());
        n.set_job_id(c->second.job_id());
      }
    } else if (!e.connected) {
      n.set_state(v1::STANDBY_STATE_UNREACHABLE);
    } else {
      n.set_state(v1::STANDBY_STATE_FREE);
    }
    out.push_back(std::move(n));
  }
  return out;
}

std::vector<v1::StandbyNode> MigrationService::Standby() {
  // The registry first: the communicators (a snapshot of every member,
  // ~10 ms at 16,384 ranks under detection's lock) are read only when a
  // standby node is registered.
  const std::vector<NodeFacts> standbys =
      options_.nodes->ListFacts(/*standby_only=*/true);
  if (standbys.empty()) return {};
  const std::vector<v1::Communicator> comms =
      options_.detection->Communicators();
  ServiceLock lock(&mu_);
  return Pool(standbys, comms);
}

absl::StatusOr<MigrationPlan> MigrationService::Plan(
    const v1::MigrateNodeRequest& r, const std::vector<NodeFacts>& nodes,
    const std::vector<v1::Communicator>& comms,
    const std::vector<std::string>& scheduled) {
  const FactsByHost by_host = ByHost(nodes);
  if (absl::Status s = CheckLeaver(r, by_host); !s.ok()) return s;
  absl::StatusOr<std::string> job = JobOnLeaver(r, comms);
  if (!job.ok()) return job.status();
  const std::set<std::string> named(scheduled.begin(), scheduled.end());
  if (!named.empty() && !named.contains(r.host())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "host: ", r.host(),
        " is not one of the hosts the scheduler named for "
        "job ",
        *job, " (SetJobHosts): its ranks there are not the job's"));
  }
  MigrationPlan plan;
  plan.job_id = *job;
  plan.leaver_host = r.host();
  plan.requested_by = r.who();
  plan.reason = r.reason();
  plan.from_replica = r.from_replica();
  if (absl::Status s = CollectRanks(r.host(), comms, named, &plan); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckMembers(r, by_host, &plan); !s.ok()) return s;
  const std::vector<v1::StandbyNode> pool = Pool(Standbys(nodes), comms);
  if (absl::Status s = ChooseJoiner(r, pool, by_host, &plan); !s.ok()) {
    return s;
  }
  return plan;
}

absl::StatusOr<v1::Migration> MigrationService::MigrateNode(
    const v1::MigrateNodeRequest& req) {
  if (req.host().empty()) {
    return absl::InvalidArgumentError("host: required (the node to leave)");
  }
  if (absl::Status s = CheckLeader(options_.leadership); !s.ok()) return s;
  const std::vector<v1::Communicator> comms =
      options_.detection->Communicators();
  const std::vector<NodeFacts> nodes =
      options_.nodes->ListFacts(/*standby_only=*/false);
  // The scheduler's word on the job's hosts, read before mu_ (detection's
  // lock is never taken with it held).
  std::vector<std::string> scheduled;
  if (absl::StatusOr<std::string> job = JobOnLeaver(req, comms); job.ok()) {
    scheduled = options_.detection->JobHosts(*job);
  }
  absl::StatusOr<v1::Migration> m;
  {
    ServiceLock lock(&mu_);
    if (!manager_) return absl::UnavailableError("not leading");
    absl::StatusOr<MigrationPlan> plan = Plan(req, nodes, comms, scheduled);
    if (!plan.ok()) return plan.status();
    if (plan->requested_by.empty()) plan->requested_by = "api";
    m = manager_->Start(*plan);
  }
  if (m.ok()) NameJoiner(*m, std::move(scheduled));
  Flush();
  return m;
}

void MigrationService::NameJoiner(const v1::Migration& m,
                                  std::vector<std::string> scheduled) {
  if (scheduled.empty() || m.joiner_host().empty()) return;
  if (std::find(scheduled.begin(), scheduled.end(), m.joiner_host()) !=
      scheduled.end()) {
    return;
  }
  scheduled.push_back(m.joiner_host());
  options_.detection->SetJobHosts(m.job_id(), scheduled);
}

void MigrationService::ActOnFaults() {
  // Only when some job asks for it: a CONFIRMED hardware fault of an ACT
  // job (newest last, as stored) not migrated for yet, and a standby
  // registered.
  const std::vector<NodeFacts> standbys =
      options_.nodes->ListFacts(/*standby_only=*/true);
  if (standbys.empty()) return;
  absl::StatusOr<std::vector<v1::Fault>> open = options_.faults->OpenFaults();
  if (!open.ok()) return;
  std::vector<std::pair<v1::Fault, std::string>> wanted;  // fault, host
  for (auto f = open->rbegin(); f != open->rend(); ++f) {
    std::string host;
    if (f->state() != v1::FAULT_STATE_CONFIRMED ||
        !HardwareSuspect(*f, &host) ||
        options_.detection->JobPolicy(f->job_id()).mode() !=
            v1::POLICY_MODE_ACT) {
      continue;
    }
    wanted.emplace_back(*f, host);
  }
  // A fault already migrated for, or whose job is migrating now, needs
  // nothing (the loop below skips it too): dropped before the communicators
  // are read, a snapshot of every member under the ingest lock (~10 ms at
  // 16,384 ranks) that every cycle took while a policy migration ran.
  {
    ServiceLock lock(&mu_);
    if (!manager_) return;
    std::erase_if(wanted, [this](const auto& w) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      // Called right here, with mu_ held.
      return manager_->HasForFault(w.first.fault_id()) ||
             manager_->Busy(w.first.job_id());
    });
  }
  if (wanted.empty()) return;
  const std::vector<v1::Communicator> comms =
      options_.detection->Communicators();
  const std::vector<NodeFacts> nodes =
      options_.nodes->ListFacts(/*standby_only=*/false);
  std::map<std::string, std::vector<std::string>> scheduled;  // by job
  for (const auto& [f, host] : wanted) {
    if (!scheduled.contains(f.job_id())) {
      scheduled[f.job_id()] = options_.detection->JobHosts(f.job_id());
    }
  }
  std::vector<v1::Migration> started;
  {
    ServiceLock lock(&mu_);
    if (!manager_) return;
    started = StartForFaults(wanted, nodes, comms, &scheduled);
  }
  for (const v1::Migration& m : started) {
    NameJoiner(m, scheduled[m.job_id()]);
    if (options_.policy_actions != nullptr) {
      options_.policy_actions->Took(PolicyAction::kActMigrate);
    }
  }
  Flush();
}

std::vector<v1::Migration> MigrationService::StartForFaults(
    const std::vector<std::pair<v1::Fault, std::string>>& wanted,
    const std::vector<NodeFacts>& nodes,
    const std::vector<v1::Communicator>& comms,
    std::map<std::string, std::vector<std::string>>* scheduled) {
  std::vector<v1::Migration> started;
  const std::vector<v1::StandbyNode> pool = Pool(Standbys(nodes), comms);
  if (std::none_of(pool.begin(), pool.end(), [](const v1::StandbyNode& n) {
        return n.state() == v1::STANDBY_STATE_FREE;
      })) {
    return started;
  }
  for (const auto& [f, host] : wanted) {
    if (manager_->HasForFault(f.fault_id()) || manager_->Busy(f.job_id())) {
      continue;
    }
    v1::MigrateNodeRequest req;
    req.set_host(host);
    req.set_job_id(f.job_id());
    absl::StatusOr<MigrationPlan> plan =
        Plan(req, nodes, comms, (*scheduled)[f.job_id()]);
    if (plan.ok()) {
      plan->requested_by = "policy";
      plan->fault_id = f.fault_id();
      plan->reason =
          absl::StrCat("policy ACT: ", f.fault_id(), " ", f.summary());
      absl::StatusOr<v1::Migration> m = manager_->Start(*plan);
      if (m.ok()) {
        started.push_back(*std::move(m));
        continue;
      }
      plan = m.status();
    }
    // Tried again every cycle (agents may connect, hosts become known);
    // logged once per fault.
    if (!act_refused_.insert(f.fault_id()).second) continue;
    Logger("controller")
        ->warn("policy ACT: fault {} of job {} on {} not migrated: {}",
               f.fault_id(), f.job_id(), host,
               std::string(plan.status().message()));
  }
  return started;
}

}  // namespace pitstop::controller
