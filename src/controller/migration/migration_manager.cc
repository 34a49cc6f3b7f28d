#include "src/controller/migration/migration_manager.h"

#include <algorithm>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pitstop/logging.h"

namespace pitstop::controller {
namespace {

using Change = v1::WatchMigrationsResponse;
using Phase = v1::MigrationDirective;

std::string StateName(v1::MigrationState s) {
  std::string n = v1::MigrationState_Name(s);
  constexpr absl::string_view kPrefix = "MIGRATION_STATE_";
  return n.size() > kPrefix.size() ? n.substr(kPrefix.size()) : n;
}

std::string RoleName(v1::MigrationRole r) {
  switch (r) {
    case v1::MIGRATION_ROLE_STAYER:
      return "stayer";
    case v1::MIGRATION_ROLE_LEAVER:
      return "leaver";
    case v1::MIGRATION_ROLE_JOINER:
      return "joiner";
    default:
      return "member";
  }
}

bool Running(const v1::Migration& m) {
  return m.state() == v1::MIGRATION_STATE_PREPARING ||
         m.state() == v1::MIGRATION_STATE_SWITCHING;
}

}  // namespace

MigrationManager::MigrationManager(Options options, FaultStore* store,
                                   MigrationSender* sender)
    : options_(std::move(options)),
      store_(store),
      sender_(sender),
      rng_(std::random_device{}()) {}

absl::StatusOr<std::unique_ptr<MigrationManager>> MigrationManager::Create(
    Options options, FaultStore* store, MigrationSender* sender) {
  absl::StatusOr<std::vector<v1::Migration>> stored = store->Migrations();
  if (!stored.ok()) {
    return absl::InternalError(absl::StrCat("reading migrations from ",
                                            store->path(), ": ",
                                            stored.status().message()));
  }
  std::unique_ptr<MigrationManager> mm(
      new MigrationManager(std::move(options), store, sender));
  std::set<std::string> jobs;
  for (v1::Migration& m : *stored) {
    mm->next_number_ = std::max<uint64_t>(mm->next_number_,
                                          FaultNumberOf(m.migration_id()) + 1);
    jobs.insert(m.job_id());
    mm->migrations_[m.migration_id()] = std::move(m);
  }
  const uint64_t now = mm->NowUnixNs();
  for (auto& [id, m] : mm->migrations_) {
    if (!Running(m)) continue;
    if (!mm->options_.resume) {
      mm->AbortLocked(&m, "controller restarted (migration resume is off)",
                      AbortCause::kRestart);
      continue;
    }
    // What agents answered before the restart is not kept: they answer the
    // re-sent directive again when they reconnect.
    for (v1::MigrationMember& mem : *m.mutable_members()) {
      mem.set_ready(false);
      mem.set_switched(false);
    }
    const absl::Duration t = m.state() == v1::MIGRATION_STATE_PREPARING
                                 ? mm->options_.prepare_timeout
                                 : mm->options_.switch_timeout;
    m.set_phase_deadline_unix_ns(now + absl::ToInt64Nanoseconds(t));
    m.set_resumed(m.resumed() + 1);
    Logger("migrate")->warn("migration {} of job {} resumed in state {}", id,
                            m.job_id(), StateName(m.state()));
    mm->Persist(m, Change::CHANGE_UPDATED);
  }
  for (const std::string& job : jobs) {
    mm->StartNextQueued(job, /*abort_unreachable=*/false);
  }
  return mm;
}

bool MigrationManager::Finished(const v1::Migration& m) {
  return m.state() == v1::MIGRATION_STATE_COMMITTED ||
         m.state() == v1::MIGRATION_STATE_ABORTED;
}

uint64_t MigrationManager::NowUnixNs() const {
  return static_cast<uint64_t>(absl::ToUnixNanos(options_.clock->Now()));
}

v1::Migration* MigrationManager::Find(const std::string& id) {
  auto it = migrations_.find(id);
  return it == migrations_.end() ? nullptr : &it->second;
}

absl::StatusOr<v1::Migration> MigrationManager::Start(
    const MigrationPlan& plan) {
  if (plan.job_id.empty()) return absl::InvalidArgumentError("job_id: empty");
  if (plan.leaver_host.empty() || plan.joiner_host.empty()) {
    return absl::InvalidArgumentError("leaver and joiner host are required");
  }
  if (plan.leaver_host == plan.joiner_host) {
    return absl::InvalidArgumentError(
        absl::StrCat("leaver and joiner are the same host ", plan.leaver_host));
  }
  auto leaver = plan.ranks_by_host.find(plan.leaver_host);
  if (leaver == plan.ranks_by_host.end() || leaver->second.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job ", plan.job_id, " has no ranks on ", plan.leaver_host));
  }
  if (plan.ranks_by_host.count(plan.joiner_host)) {
    return absl::InvalidArgumentError(
        absl::StrCat("joiner ", plan.joiner_host, " already runs ranks of job ",
                     plan.job_id));
  }
  if (plan.from_replica) {
    size_t stayer_ranks = 0;
    for (const auto& [host, ranks] : plan.ranks_by_host) {
      if (host != plan.leaver_host) stayer_ranks += ranks.size();
    }
    if (stayer_ranks < leaver->second.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("from_replica: ", leaver->second.size(), " ranks on ",
                       plan.leaver_host, " need as many replicas, the job has ",
                       stayer_ranks, " other ranks"));
    }
  }
  for (const auto& [id, m] : migrations_) {
    if (!Finished(m) && m.joiner_host() == plan.joiner_host) {
      return absl::FailedPreconditionError(
          absl::StrCat("standby ", plan.joiner_host, " is reserved by ", id));
    }
  }
  v1::Migration m;
  m.set_migration_id(absl::StrCat("M", next_number_));
  m.set_job_id(plan.job_id);
  m.set_leaver_host(plan.leaver_host);
  m.set_joiner_host(plan.joiner_host);
  uint64_t epoch = 0;
  for (const auto& [id, o] : migrations_) {
    if (o.job_id() == plan.job_id) epoch = std::max(epoch, o.epoch());
  }
  m.set_epoch(epoch + 1);
  for (const auto& [hash, name] : plan.comms) {
    v1::CommRebuild* c = m.add_comms();
    c->set_old_comm_hash(hash);
    c->set_comm_name(name);
  }
  for (const auto& [host, ranks] : plan.ranks_by_host) {
    v1::MigrationMember* mem = m.add_members();
    mem->set_host(host);
    mem->set_role(host == plan.leaver_host ? v1::MIGRATION_ROLE_LEAVER
                                           : v1::MIGRATION_ROLE_STAYER);
    mem->mutable_global_ranks()->Assign(ranks.begin(), ranks.end());
  }
  v1::MigrationMember* joiner = m.add_members();
  joiner->set_host(plan.joiner_host);
  joiner->set_role(v1::MIGRATION_ROLE_JOINER);
  joiner->mutable_global_ranks()->Assign(leaver->second.begin(),
                                         leaver->second.end());
  m.set_switch_comm_hash(plan.switch_comm_hash);
  m.set_requested_by(plan.requested_by);
  m.set_reason(plan.reason);
  m.set_fault_id(plan.fault_id);
  m.set_from_replica(plan.from_replica);
  m.set_ids_from_joiner(plan.ids_from_joiner);
  if (!plan.ids_from_joiner) MakeIds(&m);
  m.set_created_unix_ns(NowUnixNs());
  const bool queued = Busy(plan.job_id);
  m.set_state(v1::MIGRATION_STATE_QUEUED);
  // Durable before anything is sent, so a restart knows about it.
  if (absl::Status s = store_->SaveMigration(m); !s.ok()) return s;
  ++next_number_;
  v1::Migration& stored = migrations_[m.migration_id()] = std::move(m);
  Logger("migrate")->info(
      "migration {} of job {}: {} -> {} ({} members, {} communicators){}",
      stored.migration_id(), stored.job_id(), stored.leaver_host(),
      stored.joiner_host(), stored.members_size(), stored.comms_size(),
      queued ? ", queued behind a running migration" : "");
  Notify(Change::CHANGE_CREATED, stored);
  if (options_.events != nullptr) options_.events->Started(stored);
  if (!queued) BeginPrepare(&stored, /*abort_unreachable=*/true);
  return migrations_[stored.migration_id()];
}

void MigrationManager::BeginPrepare(v1::Migration* m, bool abort_unreachable) {
  const uint64_t now = NowUnixNs();
  m->set_state(v1::MIGRATION_STATE_PREPARING);
  m->set_prepare_unix_ns(now);
  m->set_phase_deadline_unix_ns(
      now + absl::ToInt64Nanoseconds(options_.prepare_timeout));
  Persist(*m, Change::CHANGE_UPDATED);
  SendToAll(m, abort_unreachable);
}

void MigrationManager::SendToAll(v1::Migration* m, bool abort_unreachable) {
  std::vector<std::string> unreachable;
  for (const v1::MigrationMember& mem : m->members()) {
    // SendCurrent skips a from_replica leaver: it may well be dead.
    if (!SendCurrent(*m, mem)) unreachable.push_back(mem.host());
  }
  if (abort_unreachable && !unreachable.empty()) {
    AbortLocked(
        m,
        absl::StrCat("agents not connected: ", absl::StrJoin(unreachable, ",")),
        AbortCause::kUnreachable);
  }
}

void MigrationManager::BeginSwitch(v1::Migration* m) {
  const uint64_t now = NowUnixNs();
  m->set_switch_seq(SwitchPoint(*m));
  m->set_state(v1::MIGRATION_STATE_SWITCHING);
  m->set_ready_unix_ns(now);
  m->set_phase_deadline_unix_ns(
      now + absl::ToInt64Nanoseconds(options_.switch_timeout));
  Persist(*m, Change::CHANGE_UPDATED);
  for (const v1::MigrationMember& mem : m->members()) SendCurrent(*m, mem);
}

void MigrationManager::Commit(v1::Migration* m) {
  const uint64_t now = NowUnixNs();
  m->set_state(v1::MIGRATION_STATE_COMMITTED);
  m->set_switched_unix_ns(now);
  m->set_finished_unix_ns(now);
  m->set_phase_deadline_unix_ns(0);
  Persist(*m, Change::CHANGE_FINISHED);
  if (options_.events != nullptr) options_.events->Committed(*m);
  for (const v1::MigrationMember& mem : m->members()) {
    sender_->SendMigration(mem.host(), Directive(*m, Phase::PHASE_COMMIT, mem));
  }
  Logger("migrate")->info(
      "migration {} of job {} committed: the ranks of {} now run on {} "
      "(prepare {} ms, switch {} ms)",
      m->migration_id(), m->job_id(), m->leaver_host(), m->joiner_host(),
      (m->ready_unix_ns() - m->prepare_unix_ns()) / 1000000,
      (now - m->ready_unix_ns()) / 1000000);
  StartNextQueued(m->job_id(), /*abort_unreachable=*/true);
}

void MigrationManager::AbortLocked(v1::Migration* m, const std::string& why,
                                   AbortCause cause) {
  const bool was_running = Running(*m);
  m->set_state(v1::MIGRATION_STATE_ABORTED);
  m->set_abort_reason(why);
  m->set_finished_unix_ns(NowUnixNs());
  m->set_phase_deadline_unix_ns(0);
  Persist(*m, Change::CHANGE_FINISHED);
  if (options_.events != nullptr) options_.events->Aborted(*m, cause);
  if (was_running) {
    for (const v1::MigrationMember& mem : m->members()) {
      sender_->SendMigration(mem.host(),
                             Directive(*m, Phase::PHASE_ABORT, mem));
    }
  }
  Logger("migrate")->warn("migration {} of job {} aborted: {}",
                          m->migration_id(), m->job_id(), why);
  StartNextQueued(m->job_id(), /*abort_unreachable=*/true);
}

void MigrationManager::StartNextQueued(const std::string& job_id,
                                       bool abort_unreachable) {
  for (const auto& [id, m] : migrations_) {
    if (m.job_id() == job_id && Running(m)) return;
  }
  v1::Migration* next = nullptr;
  for (auto& [id, m] : migrations_) {
    if (m.job_id() != job_id || m.state() != v1::MIGRATION_STATE_QUEUED) {
      continue;
    }
    if (next == nullptr ||
        FaultNumberOf(m.migration_id()) < FaultNumberOf(next->migration_id())) {
      next = &m;
    }
  }
  if (next != nullptr) BeginPrepare(next, abort_unreachable);
}

v1::MigrationDirective MigrationManager::Directive(
    const v1::Migration& m, v1::MigrationDirective::Phase phase,
    const v1::MigrationMember& member) const {
  v1::MigrationDirective d;
  d.set_phase(phase);
  d.set_migration_id(m.migration_id());
  d.set_job_id(m.job_id());
  d.set_epoch(m.epoch());
  d.set_role(member.role());
  d.set_leaver_host(m.leaver_host());
  d.set_joiner_host(m.joiner_host());
  d.set_switch_comm_hash(m.switch_comm_hash());
  d.set_from_replica(m.from_replica());
  if (phase == Phase::PHASE_PREPARE) {
    for (const v1::MigrationMember& mem : m.members()) {
      if (mem.role() == v1::MIGRATION_ROLE_JOINER) {
        *d.mutable_moved_global_ranks() = mem.global_ranks();
      }
    }
    *d.mutable_comms() = m.comms();
    *d.mutable_transfers() = m.transfers();
  }
  if (phase == Phase::PHASE_MAKE_IDS) {
    *d.mutable_moved_global_ranks() = member.global_ranks();
    for (const v1::CommRebuild& c : m.comms()) {
      v1::CommRebuild* out = d.add_comms();
      out->set_old_comm_hash(c.old_comm_hash());
      out->set_comm_name(c.comm_name());
    }
  }
  if (phase == Phase::PHASE_SWITCH_AT) d.set_switch_seq(m.switch_seq());
  if (phase == Phase::PHASE_ABORT) d.set_reason(m.abort_reason());
  return d;
}

uint64_t MigrationManager::SwitchPoint(const v1::Migration& m) const {
  if (m.from_replica()) {
    // The stayers wait at the step whose collective failed; they all redo
    // the lowest (a rank may have finished that step before the death).
    uint64_t redo = std::numeric_limits<uint64_t>::max();
    for (const v1::MigrationMember& mem : m.members()) {
      if (mem.role() == v1::MIGRATION_ROLE_STAYER) {
        redo = std::min(redo, mem.progress_seq());
      }
    }
    return redo == std::numeric_limits<uint64_t>::max() ? 0 : redo;
  }
  uint64_t progress = 0;
  for (const v1::MigrationMember& mem : m.members()) {
    progress = std::max(progress, mem.progress_seq());
  }
  return progress + options_.switch_margin;
}

bool MigrationManager::SendCurrent(const v1::Migration& m,
                                   const v1::MigrationMember& member) {
  // A node-failure migration leaves the dead leaver out of every phase.
  if (m.from_replica() && member.role() == v1::MIGRATION_ROLE_LEAVER) {
    return true;
  }
  if (AwaitingIds(m)) {
    if (member.role() != v1::MIGRATION_ROLE_JOINER) return true;
    return sender_->SendMigration(member.host(),
                                  Directive(m, Phase::PHASE_MAKE_IDS, member));
  }
  if (m.state() == v1::MIGRATION_STATE_PREPARING && !member.ready()) {
    return sender_->SendMigration(member.host(),
                                  Directive(m, Phase::PHASE_PREPARE, member));
  }
  if (m.state() == v1::MIGRATION_STATE_SWITCHING && !member.switched()) {
    return sender_->SendMigration(member.host(),
                                  Directive(m, Phase::PHASE_SWITCH_AT, member));
  }
  return true;
}

absl::Status MigrationManager::OnAck(const std::string& host,
                                     const v1::MigrationAck& ack) {
  v1::Migration* m = Find(ack.migration_id());
  if (m == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("migration ", ack.migration_id(), " not found"));
  }
  if (!Running(*m) || ack.epoch() != m->epoch()) return absl::OkStatus();
  v1::MigrationMember* mem = nullptr;
  for (v1::MigrationMember& x : *m->mutable_members()) {
    if (x.host() == host) mem = &x;
  }
  if (mem == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host ", host, " is not a member of migration ", m->migration_id()));
  }
  if (AwaitingIds(*m)) {
    if (ack.phase() == Phase::PHASE_MAKE_IDS &&
        mem->role() == v1::MIGRATION_ROLE_JOINER) {
      OnIds(m, ack);
    }
    return absl::OkStatus();
  }
  const bool preparing = m->state() == v1::MIGRATION_STATE_PREPARING;
  if ((preparing && ack.phase() != Phase::PHASE_PREPARE) ||
      (!preparing && ack.phase() != Phase::PHASE_SWITCH_AT)) {
    return absl::OkStatus();  // an answer to an earlier phase
  }
  if (!ack.ok()) {
    AbortLocked(m,
                absl::StrCat(RoleName(mem->role()), " ", host, " failed ",
                             preparing ? "PREPARE" : "SWITCH_AT", ": ",
                             ack.error().empty() ? "no reason" : ack.error()),
                AbortCause::kMemberFailed);
    return absl::OkStatus();
  }
  if (preparing) {
    mem->set_ready(true);
    mem->set_progress_seq(ack.progress_seq());
    for (const v1::MigrationMember& x : m->members()) {
      // From a replica, nothing waits for the (possibly dead) leaver.
      if (!x.ready() &&
          !(m->from_replica() && x.role() == v1::MIGRATION_ROLE_LEAVER)) {
        return absl::OkStatus();
      }
    }
    BeginSwitch(m);
    return absl::OkStatus();
  }
  mem->set_switched(true);
  for (const v1::MigrationMember& x : m->members()) {
    // The leaver's ranks leave at the switch point; nobody waits for them.
    if (x.role() != v1::MIGRATION_ROLE_LEAVER && !x.switched()) {
      return absl::OkStatus();
    }
  }
  Commit(m);
  return absl::OkStatus();
}

void MigrationManager::OnHostUp(const std::string& host) {
  for (auto& [id, m] : migrations_) {
    if (!Running(m)) continue;
    for (const v1::MigrationMember& mem : m.members()) {
      if (mem.host() == host) SendCurrent(m, mem);
    }
  }
}

void MigrationManager::OnHostDown(const std::string& host,
                                  const std::string& job_id,
                                  absl::string_view why) {
  struct PendingAbort {
    std::string id, why;
    AbortCause cause;
  };
  std::vector<PendingAbort> aborts;
  for (auto& [id, m] : migrations_) {
    if (!Running(m) || (!job_id.empty() && job_id != m.job_id())) continue;
    const bool preparing = m.state() == v1::MIGRATION_STATE_PREPARING;
    for (const v1::MigrationMember& mem : m.members()) {
      if (mem.host() != host) continue;
      switch (mem.role()) {
        case v1::MIGRATION_ROLE_JOINER:
          aborts.push_back(
              {id,
               absl::StrCat(
                   "joiner ", host, " died (", why, ") while ",
                   preparing ? "warming up in the sandbox" : "switching"),
               AbortCause::kJoinerDied});
          break;
        case v1::MIGRATION_ROLE_LEAVER:
          // Its ranks leave at the switch anyway, once they sent their
          // state (its SWITCHED says so). Before that the state is still
          // to be transferred, unless a replica is the source: the joiner
          // would wait in its join for a sender that is gone.
          if (!m.from_replica() && (preparing || !mem.switched())) {
            aborts.push_back(
                {id,
                 absl::StrCat("leaver ", host, " died (", why, ") ",
                              preparing ? "during state transfer"
                                        : "before it handed its state "
                                          "to the joiner",
                              "; migrate again with --from-replica"),
                 AbortCause::kLeaverDied});
          }
          break;
        default:
          aborts.push_back({id,
                            absl::StrCat("member ", host, " died (", why, ")"),
                            AbortCause::kMemberDied});
      }
    }
  }
  for (const PendingAbort& a : aborts) {
    v1::Migration* m = Find(a.id);
    if (m != nullptr && Running(*m)) AbortLocked(m, a.why, a.cause);
  }
}

void MigrationManager::Tick() {
  const uint64_t now = NowUnixNs();
  std::vector<std::string> expired;
  for (const auto& [id, m] : migrations_) {
    if (Running(m) && now >= m.phase_deadline_unix_ns()) expired.push_back(id);
  }
  for (const std::string& id : expired) {
    v1::Migration* m = Find(id);
    if (m == nullptr || !Running(*m)) continue;  // an earlier abort's queue
    const bool preparing = m->state() == v1::MIGRATION_STATE_PREPARING;
    const absl::Duration t =
        preparing ? options_.prepare_timeout : options_.switch_timeout;
    if (AwaitingIds(*m)) {
      AbortLocked(m,
                  absl::StrCat("MAKE_IDS timed out after ",
                               absl::FormatDuration(t), ": no ids from joiner ",
                               m->joiner_host(), " (are its ranks started?)"),
                  AbortCause::kPrepareTimeout);
      continue;
    }
    AbortLocked(
        m,
        absl::StrCat(preparing ? "PREPARE" : "SWITCH_AT", " timed out after ",
                     absl::FormatDuration(t), ": no ",
                     preparing ? "READY" : "SWITCHED", " from ",
                     Missing(*m, !preparing)),
        preparing ? AbortCause::kPrepareTimeout : AbortCause::kSwitchTimeout);
  }
}

absl::StatusOr<v1::Migration> MigrationManager::Abort(
    const std::string& migration_id, const std::string& why) {
  v1::Migration* m = Find(migration_id);
  if (m == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("migration ", migration_id, " not found"));
  }
  if (Finished(*m)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "migration ", migration_id, " is ", StateName(m->state())));
  }
  AbortLocked(m, why, AbortCause::kOperator);
  return *m;
}

std::string MigrationManager::Missing(const v1::Migration& m,
                                      bool switched) const {
  std::vector<std::string> hosts;
  for (const v1::MigrationMember& mem : m.members()) {
    if (switched ? (!mem.switched() && mem.role() != v1::MIGRATION_ROLE_LEAVER)
                 : !mem.ready() && !(m.from_replica() &&
                                     mem.role() == v1::MIGRATION_ROLE_LEAVER)) {
      hosts.push_back(mem.host());
    }
  }
  const size_t n = hosts.size();
  if (hosts.size() > 8) {
    hosts.resize(8);
    hosts.push_back("...");
  }
  return absl::StrCat(absl::StrJoin(hosts, ","), " (", n, " of ",
                      m.members_size(), " members)");
}

absl::StatusOr<v1::Migration> MigrationManager::Get(
    const std::string& migration_id) const {
  auto it = migrations_.find(migration_id);
  if (it == migrations_.end()) {
    return absl::NotFoundError(
        absl::StrCat("migration ", migration_id, " not found"));
  }
  return it->second;
}

std::vector<v1::Migration> MigrationManager::List(const std::string& job_id,
                                                  bool include_finished) const {
  std::vector<v1::Migration> out;
  for (const auto& [id, m] : migrations_) {
    if (!job_id.empty() && m.job_id() != job_id) continue;
    if (!include_finished && Finished(m)) continue;
    out.push_back(m);
  }
  std::sort(out.begin(), out.end(),
            [](const v1::Migration& a, const v1::Migration& b) {
              return FaultNumberOf(a.migration_id()) <
                     FaultNumberOf(b.migration_id());
            });
  return out;
}

std::map<std::string, v1::Migration> MigrationManager::Reserved() const {
  std::map<std::string, v1::Migration> out;
  for (const auto& [id, m] : migrations_) {
    if (!Finished(m)) out[m.joiner_host()] = m;
  }
  return out;
}

std::map<std::string, v1::Migration> MigrationManager::Committed() const {
  std::map<std::string, v1::Migration> out;
  for (const v1::Migration& m : List("", true)) {
    if (m.state() == v1::MIGRATION_STATE_COMMITTED) out[m.joiner_host()] = m;
  }
  return out;
}

bool MigrationManager::Busy(const std::string& job_id) const {
  for (const auto& [id, m] : migrations_) {
    if (m.job_id() == job_id && !Finished(m)) return true;
  }
  return false;
}

bool MigrationManager::HasForFault(const std::string& fault_id) const {
  for (const auto& [id, m] : migrations_) {
    if (m.fault_id() == fault_id) {
      return true;
    }
  }
  return false;
}

void MigrationManager::Persist(const v1::Migration& m,
                               v1::WatchMigrationsResponse::Change change) {
  if (absl::Status s = store_->SaveMigration(m); !s.ok()) {
    Logger("migrate")->error("storing migration {}: {}", m.migration_id(),
                             s.ToString());
  }
  Notify(change, m);
}

void MigrationManager::Notify(v1::WatchMigrationsResponse::Change change,
                              const v1::Migration& m) {
  for (const auto& [id, fn] : watchers_) fn(change, m);
}

uint64_t MigrationManager::Subscribe(WatchFn fn) {
  const uint64_t id = next_watcher_++;
  watchers_[id] = std::move(fn);
  return id;
}

void MigrationManager::Unsubscribe(uint64_t id) { watchers_.erase(id); }

}  // namespace pitstop::controller
