// ControllerCore's side of standby migration (docs/migration.md): requests
// resolved against nodes, communicators and the standby pool; agent acks and
// deaths fed to the MigrationManager; policy ACT.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pitstop/logging.h"
#include "src/controller/controller_core.h"

namespace pitstop::controller {

bool ControllerCore::MigrationLink::SendMigration(
    const std::string& host,
    const v1::MigrationDirective& d) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  auto it = core_->nodes_.find(host);
  if (it == core_->nodes_.end() || it->second.sink == nullptr) return false;
  v1::ConnectResponse resp;
  v1::AgentCommand* cmd = resp.add_commands();
  cmd->set_command_id(core_->next_command_id_++);
  *cmd->mutable_migration() = d;
  it->second.sink->Send(resp);
  return true;
}

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

// The leaver's drain reason and its mitigated faults' note.
std::string MigratedOffNote(const v1::Migration& m) {
  return absl::StrCat("migrated off by ", m.migration_id(), " (job ",
                      m.job_id(), ") to ", m.joiner_host());
}

}  // namespace

absl::Status ControllerCore::LoadMigrations() {
  if (!migration_link_) migration_link_ = std::make_unique<MigrationLink>(this);
  MigrationManager::Options o = options_.migrate;
  o.clock = options_.clock;
  absl::StatusOr<std::unique_ptr<MigrationManager>> m =
      MigrationManager::Create(o, store_.get(), migration_link_.get());
  if (!m.ok()) return m.status();
  migrations_ = std::move(*m);
  migrations_->Subscribe(
      [this](v1::WatchMigrationsResponse::Change change,
             const v1::Migration& mig) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        if (change == v1::WatchMigrationsResponse::CHANGE_FINISHED) {
          MigrationFinished(mig);
        }
        v1::WatchMigrationsResponse resp;
        resp.set_change(change);
        *resp.mutable_migration() = mig;
        for (const auto& [id, w] : migration_watchers_) {
          if (w.job_id.empty() || w.job_id == mig.job_id()) w.fn(resp);
        }
      });
  return absl::OkStatus();
}

std::vector<v1::StandbyNode> ControllerCore::StandbyLocked() const {
  // Every cycle asks (RunMigrations), under the lock: the engine's
  // communicators (a snapshot of every member, ~10 ms at 16,384 ranks) are
  // read only when a standby node is registered (docs/reliability.md,
  // "Round 8").
  if (std::none_of(nodes_.begin(), nodes_.end(), [](const auto& n) {
        return n.second.registration.standby();
      })) {
    return {};
  }
  std::set<std::string> hosts_in_jobs;
  std::set<std::string> jobs;
  for (const v1::Communicator& c : engine_->Communicators()) {
    jobs.insert(c.job_id());
    for (const v1::MemberLocation& m : c.members()) {
      hosts_in_jobs.insert(m.host());
    }
  }
  std::map<std::string, v1::Migration> reserved, committed;
  if (migrations_) {
    reserved = migrations_->Reserved();
    committed = migrations_->Committed();
  }
  std::vector<v1::StandbyNode> out;
  for (const auto& [host, e] : nodes_) {
    if (!e.registration.standby()) continue;
    v1::StandbyNode n;
    n.set_host(host);
    n.set_gpus(e.registration.gpus_size());
    n.set_migration_data_plane(e.registration.migration_data_plane());
    n.set_last_seen_unix_ns(e.last_seen_unix_ns);
    auto r = reserved.find(host);
    auto c = committed.find(host);
    if (r != reserved.end()) {
      n.set_state(v1::STANDBY_STATE_RESERVED);
      n.set_migration_id(r->second.migration_id());
      n.set_job_id(r->second.job_id());
    } else if (e.connected_ranks > 0 || hosts_in_jobs.count(host) ||
               (c != committed.end() && jobs.count(c->second.job_id()))) {
      n.set_state(v1::STANDBY_STATE_IN_USE);
      if (c != committed.end()) {
        n.set_migration_id(c->second.migration_id());
        n.set_job_id(c->second.job_id());
      }
    } else if (e.session == 0) {
      n.set_state(v1::STANDBY_STATE_UNREACHABLE);
    } else {
      n.set_state(v1::STANDBY_STATE_FREE);
    }
    out.push_back(std::move(n));
  }
  return out;
}

std::vector<v1::StandbyNode> ControllerCore::Standby() {
  CoreLock lock(this);
  return StandbyLocked();
}

absl::StatusOr<MigrationPlan> ControllerCore::PlanMigration(
    const v1::MigrateNodeRequest& r) {
  auto node = nodes_.find(r.host());
  if (node == nodes_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", r.host(),
                     " is not known to the controller (no agent has "
                     "registered it)"));
  }
  if (node->second.registration.standby()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host: ", r.host(),
        " is a standby node; name a node that runs ranks (pitstopctl "
        "standby lists the standbys)"));
  }
  const std::vector<v1::Communicator> comms = engine_->Communicators();
  std::set<std::string> jobs_here;
  for (const v1::Communicator& c : comms) {
    for (const v1::MemberLocation& m : c.members()) {
      if (m.host() == r.host()) jobs_here.insert(c.job_id());
    }
  }
  std::string job = r.job_id();
  if (job.empty()) {
    if (jobs_here.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "no job has ranks on ", r.host(), ": nothing to migrate"));
    }
    if (jobs_here.size() > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("job_id: several jobs run on ", r.host(), " (",
                       absl::StrJoin(jobs_here, ", "), "); name one"));
    }
    job = *jobs_here.begin();
  } else if (!jobs_here.count(job)) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job, " has no ranks on ", r.host()));
  }
  MigrationPlan plan;
  plan.job_id = job;
  plan.leaver_host = r.host();
  plan.requested_by = r.who();
  plan.reason = r.reason();
  plan.from_replica = r.from_replica();
  std::map<std::string, std::set<int32_t>> ranks;
  int32_t widest = -1;
  int unplaced = 0;
  for (const v1::Communicator& c : comms) {
    if (c.job_id() != job) continue;
    bool on_leaver = false;
    for (const v1::MemberLocation& m : c.members()) {
      if (m.host().empty()) {
        ++unplaced;
        continue;
      }
      std::set<int32_t>& s = ranks[m.host()];
      if (m.global_rank() >= 0) s.insert(m.global_rank());
      on_leaver |= m.host() == r.host();
    }
    if (on_leaver) plan.comms.emplace_back(c.comm_hash(), c.comm_name());
    if (c.n_ranks() > widest) {
      widest = c.n_ranks();
      plan.switch_comm_hash = c.comm_hash();
    }
  }
  if (unplaced > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job, " is not migratable now: the hosts of ", unplaced,
        " communicator members are not known yet (their agents have not "
        "reported them)"));
  }
  std::vector<std::string> unreachable, no_plane;
  for (const auto& [host, set] : ranks) {
    plan.ranks_by_host[host].assign(set.begin(), set.end());
    auto it = nodes_.find(host);
    if (it == nodes_.end() || it->second.session == 0) {
      unreachable.push_back(host);
    } else if (it->second.registration.migration_data_plane().empty()) {
      no_plane.push_back(host);
    }
  }
  if (plan.ranks_by_host[r.host()].empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job, " is not migratable: the global ranks on ",
                     r.host(), " are unknown (the interposer reports them)"));
  }
  if (!unreachable.empty() && !(r.from_replica() && unreachable.size() == 1 &&
                                unreachable[0] == r.host())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job, " is not migratable now: the agents of ",
                     absl::StrJoin(unreachable, ","), " are not connected"));
  }
  if (!no_plane.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job, " is not migratable: the agents of ",
                     absl::StrJoin(no_plane, ","),
                     " have no migration data plane (pitstop-agent "
                     "--migration-data-plane)"));
  }
  const std::vector<v1::StandbyNode> pool = StandbyLocked();
  if (!r.to().empty()) {
    auto it = std::find_if(pool.begin(), pool.end(),
                           [&](const auto& n) { return n.host() == r.to(); });
    if (it == pool.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "to: ", r.to(),
          nodes_.count(r.to()) ? " is not a standby node (start its agent "
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
    plan.joiner_host = r.to();
    plan.ids_from_joiner = it->migration_data_plane() == kLibraryPlane;
    return plan;
  }
  std::vector<std::string> seen;
  for (const v1::StandbyNode& n : pool) {
    if (n.state() == v1::STANDBY_STATE_FREE &&
        !n.migration_data_plane().empty()) {
      plan.joiner_host = n.host();
      plan.ids_from_joiner = n.migration_data_plane() == kLibraryPlane;
      return plan;
    }
    seen.push_back(absl::StrCat(n.host(), " ", StandbyName(n.state())));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("no free standby node (", pool.size(), " standby",
                   seen.empty() ? "" : ": ", absl::StrJoin(seen, ", "),
                   "); start pitstop-agent --standby on a spare node"));
}

absl::StatusOr<v1::Migration> ControllerCore::MigrateNode(
    const v1::MigrateNodeRequest& req) {
  if (req.host().empty()) {
    return absl::InvalidArgumentError("host: required (the node to leave)");
  }
  if (absl::Status s = CheckLeader(); !s.ok()) return s;
  CoreLock lock(this);
  if (!migrations_) return absl::UnavailableError("not leading");
  absl::StatusOr<MigrationPlan> plan = PlanMigration(req);
  if (!plan.ok()) return plan.status();
  if (plan->requested_by.empty()) plan->requested_by = "api";
  return migrations_->Start(*plan);
}

absl::StatusOr<v1::Migration> ControllerCore::GetMigration(
    const std::string& id) {
  if (id.empty()) return absl::InvalidArgumentError("migration_id: required");
  CoreLock lock(this);
  if (!migrations_) {
    return absl::NotFoundError(absl::StrCat("migration ", id, " not found"));
  }
  return migrations_->Get(id);
}

std::vector<v1::Migration> ControllerCore::ListMigrations(
    const std::string& job_id, bool include_finished) {
  CoreLock lock(this);
  if (!migrations_) return {};
  return migrations_->List(job_id, include_finished);
}

uint64_t ControllerCore::SubscribeMigrations(const std::string& job_id,
                                             bool include_existing,
                                             MigrationWatchFn fn) {
  CoreLock lock(this);
  return AddMigrationWatcher(job_id, include_existing, std::move(fn), nullptr);
}

uint64_t ControllerCore::AddMigrationWatcher(const std::string& job_id,
                                             bool include_existing,
                                             MigrationWatchFn fn,
                                             WatchEndFn end) {
  if (include_existing && migrations_) {
    v1::WatchMigrationsResponse resp;
    resp.set_change(v1::WatchMigrationsResponse::CHANGE_EXISTING);
    for (const v1::Migration& m : migrations_->List(job_id, false)) {
      *resp.mutable_migration() = m;
      fn(resp);
    }
  }
  const uint64_t id = next_id_++;
  migration_watchers_[id] =
      MigrationWatcher{job_id, std::move(fn), std::move(end)};
  return id;
}

void ControllerCore::UnsubscribeMigrations(uint64_t id) {
  CoreLock lock(this);
  migration_watchers_.erase(id);
  ending_watches_.erase(id);
}

absl::Status ControllerCore::MigrationInput(const std::string& host,
                                            const v1::ConnectRequest& batch) {
  if (!migrations_) return absl::OkStatus();
  absl::Status first;
  for (const v1::RankLifecycle& l : batch.lifecycle()) {
    if (l.kind() == v1::RankLifecycle::KIND_DIED) {
      migrations_->OnHostDown(
          host, l.job_id(),
          absl::StrCat("rank ", l.global_rank(), " pid ", l.pid(), " died"));
    }
  }
  for (int i = 0; i < batch.migration_acks_size(); ++i) {
    absl::Status s = migrations_->OnAck(host, batch.migration_acks(i));
    if (!s.ok() && first.ok()) {
      first = absl::InvalidArgumentError(
          absl::StrCat("migration_acks[", i, "]: ", s.message()));
    }
  }
  return first;
}

void ControllerCore::RunMigrations() {
  if (!migrations_) return;
  migrations_->Tick();
  // A fault reported after its node was migrated off (a dead rank's
  // PROCESS_DIED can come a cycle after a quick --from-replica commit).
  MitigateMigratedFaults();
  // Policy ACT, only when some job asks for it and a standby is free.
  const std::vector<v1::StandbyNode> pool = StandbyLocked();
  if (std::none_of(pool.begin(), pool.end(), [](const v1::StandbyNode& n) {
        return n.state() == v1::STANDBY_STATE_FREE;
      })) {
    return;
  }
  absl::StatusOr<std::vector<v1::Fault>> open = store_->List("", false, 0);
  if (!open.ok()) return;
  for (auto f = open->rbegin(); f != open->rend(); ++f) {
    std::string host;
    if (f->state() != v1::FAULT_STATE_CONFIRMED ||
        !HardwareSuspect(*f, &host) ||
        engine_->GetJobPolicy(f->job_id()).mode() != v1::POLICY_MODE_ACT ||
        migrations_->HasForFault(f->fault_id()) ||
        migrations_->Busy(f->job_id())) {
      continue;
    }
    v1::MigrateNodeRequest req;
    req.set_host(host);
    req.set_job_id(f->job_id());
    absl::StatusOr<MigrationPlan> plan = PlanMigration(req);
    if (plan.ok()) {
      plan->requested_by = "policy";
      plan->fault_id = f->fault_id();
      plan->reason =
          absl::StrCat("policy ACT: ", f->fault_id(), " ", f->summary());
      absl::StatusOr<v1::Migration> m = migrations_->Start(*plan);
      if (m.ok()) continue;
      plan = m.status();
    }
    // Tried again every cycle (agents may connect, hosts become known);
    // logged once per fault.
    if (!act_refused_.insert(f->fault_id()).second) continue;
    Logger("controller")
        ->warn("policy ACT: fault {} of job {} on {} not migrated: {}",
               f->fault_id(), f->job_id(), host,
               std::string(plan.status().message()));
  }
}

void ControllerCore::MigrationFinished(const v1::Migration& m) {
  if (m.state() != v1::MIGRATION_STATE_COMMITTED) return;
  const std::string why = MigratedOffNote(m);
  // Every member switched to the new communicators and destroys the old
  // ones: their progress stops at the switch and must not read as a hang.
  std::vector<uint64_t> replaced;
  for (const v1::CommRebuild& c : m.comms()) {
    replaced.push_back(c.old_comm_hash());
  }
  engine_->RetireComms(replaced,
                       absl::StrCat("communicator replaced by migration ",
                                    m.migration_id(), " (committed)"));
  if (absl::Status s = store_->SetDrain(m.leaver_host(), why); s.ok()) {
    drains_[m.leaver_host()] = why;
  } else {
    Logger("controller")
        ->error("draining {}: {}", m.leaver_host(), s.ToString());
  }
  // The fault the policy migrated for; the job's other faults that blame
  // the leaver are found by the sweep.
  if (!m.fault_id().empty()) {
    if (absl::StatusOr<v1::Fault> f = store_->Get(m.fault_id()); f.ok()) {
      MarkMitigating(*f, why);
    }
  }
  MitigateMigratedFaults();
}

void ControllerCore::MarkMitigating(v1::Fault f, const std::string& why) {
  if (f.state() != v1::FAULT_STATE_CONFIRMED &&
      f.state() != v1::FAULT_STATE_SUSPECTED &&
      f.state() != v1::FAULT_STATE_ACKNOWLEDGED) {
    return;
  }
  f.set_state(v1::FAULT_STATE_MITIGATING);
  f.set_updated_unix_ns(NowUnixNs());
  f.set_resolution_note(why);
  bool ignored = false;
  absl::StatusOr<v1::Fault> stored = store_->Upsert(f, &ignored);
  if (stored.ok() && !ignored) {
    Notify(v1::WatchFaultsResponse::CHANGE_UPDATED, *stored);
  }
}

void ControllerCore::MitigateMigratedFaults() {
  if (!migrations_) return;
  // (job, host) -> note, for each host a committed migration moved its job
  // off and no later one moved it back onto (List is oldest first).
  std::map<std::pair<std::string, std::string>, std::string> off;
  for (const v1::Migration& m : migrations_->List("", true)) {
    if (m.state() != v1::MIGRATION_STATE_COMMITTED) continue;
    off[{m.job_id(), m.leaver_host()}] = MigratedOffNote(m);
    off.erase({m.job_id(), m.joiner_host()});
  }
  if (off.empty()) return;
  absl::StatusOr<std::vector<v1::Fault>> open = store_->List("", false, 0);
  if (!open.ok()) return;
  for (const v1::Fault& f : *open) {
    if (f.suspects_size() == 0) continue;
    const auto it = off.find({f.job_id(), f.suspects(0).host()});
    if (it != off.end()) MarkMitigating(f, it->second);
  }
}

}  // namespace pitstop::controller
