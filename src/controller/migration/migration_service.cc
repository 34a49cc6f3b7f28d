// MigrationService: the manager's lifecycle, agent input, watchers and the
// effects of a commit. Requests, the standby pool and policy ACT are in
// migration_requests.cc.
#include "src/controller/migration/migration_service.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pitstop/logging.h"
#include "src/controller/ha/leadership.h"

namespace pitstop::controller {
namespace {

// The leaver's drain reason and its mitigated faults' note.
std::string MigratedOffNote(const v1::Migration& m) {
  return absl::StrCat("migrated off by ", m.migration_id(), " (job ",
                      m.job_id(), ") to ", m.joiner_host());
}

}  // namespace

MigrationService::MigrationService(Options options)
    : options_(std::move(options)) {}

bool MigrationService::Outbox::SendMigration(const std::string& host,
                                             const v1::MigrationDirective& d)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // Called by the manager, inside a call of the service that holds mu_.
  s_->outbox_.push_back(Directive{host, d});
  ++s_->queued_;
  return s_->connected_.count(host) > 0;
}

absl::Status MigrationService::Load() {
  MigrationManager::Options o = options_.manager;
  o.clock = options_.clock;
  {
    ServiceLock lock(&mu_);
    absl::StatusOr<std::unique_ptr<MigrationManager>> m =
        MigrationManager::Create(o, options_.store, &outbox_sender_);
    if (!m.ok()) return m.status();
    manager_ = std::move(*m);
    manager_->Subscribe(
        [this](v1::WatchMigrationsResponse::Change change,
               const v1::Migration& mig) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          // Called by the manager with mu_ held.
          if (change == v1::WatchMigrationsResponse::CHANGE_FINISHED &&
              mig.state() == v1::MIGRATION_STATE_COMMITTED) {
            outbox_.push_back(Committed{mig});
            ++queued_;
            NoteMigratedOff(mig);
          }
          v1::WatchMigrationsResponse resp;
          resp.set_change(change);
          *resp.mutable_migration() = mig;
          watchers_.Notify(mig.job_id(), resp);
        });
    // The hosts jobs were moved off, from the stored history (oldest
    // first); commits of this term update it as they happen.
    migrated_off_.clear();
    for (const v1::Migration& m : manager_->List("", true)) {
      if (m.state() == v1::MIGRATION_STATE_COMMITTED) NoteMigratedOff(m);
    }
    // A new term: the previous term's client watches missed what happened
    // in between; their clients watch again here.
    const size_t n = watchers_.ending_count();
    const absl::Status why = watchers_.EndFormer(
        KnownLeader(options_.leadership), /*now=*/true, options_.clock->Now());
    if (!why.ok()) {
      Logger("controller")
          ->info("{} migration watch streams of the former term ended: {}", n,
                 std::string(why.message()));
    }
  }
  Flush();
  return absl::OkStatus();
}

void MigrationService::StepDown(const std::string& why) {
  ServiceLock lock(&mu_);
  manager_.reset();  // the next leader drives them from the store
  migrated_off_.clear();
  connected_.clear();
  outbox_.clear();
  Applied(queued_);  // dropped: nobody waits for them
  if (watchers_.DetachClients(why, options_.clock->Now() + kWatchEndWait) ==
      0) {
    return;
  }
  // Usually the new leader is not known yet (its campaign follows the
  // lease's end); the controller's loop ends them once it is.
  const size_t n = watchers_.ending_count();
  const absl::Status ended = watchers_.EndFormer(
      KnownLeader(options_.leadership), /*now=*/false, options_.clock->Now());
  if (!ended.ok()) {
    Logger("controller")
        ->info("{} migration watch streams of the former term ended: {}", n,
               std::string(ended.message()));
  }
}

void MigrationService::EndFormerWatches(bool now) {
  ServiceLock lock(&mu_);
  if (!watchers_.ending()) return;
  const size_t n = watchers_.ending_count();
  const absl::Status why = watchers_.EndFormer(KnownLeader(options_.leadership),
                                               now, options_.clock->Now());
  if (why.ok()) return;
  Logger("controller")
      ->info("{} migration watch streams of the former term ended: {}", n,
             std::string(why.message()));
}

absl::StatusOr<v1::Migration> MigrationService::GetMigration(
    const std::string& id) {
  if (id.empty()) return absl::InvalidArgumentError("migration_id: required");
  Settle();
  ServiceLock lock(&mu_);
  if (!manager_) {
    return absl::NotFoundError(absl::StrCat("migration ", id, " not found"));
  }
  return manager_->Get(id);
}

std::vector<v1::Migration> MigrationService::ListMigrations(
    const std::string& job_id, bool include_finished) {
  Settle();
  ServiceLock lock(&mu_);
  if (!manager_) return {};
  return manager_->List(job_id, include_finished);
}

uint64_t MigrationService::Subscribe(const std::string& job_id,
                                     bool include_existing, WatchFn fn) {
  ServiceLock lock(&mu_);
  return AddWatcher(job_id, include_existing, std::move(fn), nullptr);
}

absl::StatusOr<uint64_t> MigrationService::SubscribeClient(
    const std::string& job_id, bool include_existing, WatchFn fn,
    WatchEndFn end) {
  ServiceLock lock(&mu_);
  // Checked under the lock: the election stops leading before it steps
  // down (StepDown takes the lock), so a watch is either refused here or
  // detached then, never left silent.
  if (absl::Status s = CheckLeader(options_.leadership); !s.ok()) return s;
  return AddWatcher(job_id, include_existing, std::move(fn), std::move(end));
}

uint64_t MigrationService::AddWatcher(const std::string& job_id,
                                      bool include_existing, WatchFn fn,
                                      WatchEndFn end) {
  if (include_existing && manager_) {
    v1::WatchMigrationsResponse resp;
    resp.set_change(v1::WatchMigrationsResponse::CHANGE_EXISTING);
    for (const v1::Migration& m : manager_->List(job_id, false)) {
      *resp.mutable_migration() = m;
      fn(resp);
    }
  }
  const uint64_t id = next_watcher_++;
  watchers_.Add(id, job_id, std::move(fn), std::move(end));
  return id;
}

void MigrationService::Unsubscribe(uint64_t id) {
  ServiceLock lock(&mu_);
  watchers_.Remove(id);
}

absl::Status MigrationService::OnBatch(const std::string& host,
                                       const v1::ConnectRequest& batch) {
  if (batch.lifecycle_size() == 0 && batch.migration_acks_size() == 0) {
    return absl::OkStatus();
  }
  absl::Status first;
  {
    ServiceLock lock(&mu_);
    if (!manager_) return absl::OkStatus();
    // Answers first: a rank's answer in the batch was given before its
    // death in the same batch was seen (a leaver's SWITCHED says its state
    // went; its death after that must not abort the migration).
    for (int i = 0; i < batch.migration_acks_size(); ++i) {
      absl::Status s = manager_->OnAck(host, batch.migration_acks(i));
      if (!s.ok() && first.ok()) {
        first = absl::InvalidArgumentError(
            absl::StrCat("migration_acks[", i, "]: ", s.message()));
      }
    }
    for (const v1::RankLifecycle& l : batch.lifecycle()) {
      if (l.kind() == v1::RankLifecycle::KIND_DIED) {
        manager_->OnHostDown(
            host, l.job_id(),
            absl::StrCat("rank ", l.global_rank(), " pid ", l.pid(), " died"));
      }
    }
  }
  Flush();
  return first;
}

void MigrationService::OnHostUp(const std::string& host) {
  {
    ServiceLock lock(&mu_);
    connected_.insert(host);
    if (manager_) manager_->OnHostUp(host);
  }
  Flush();
}

void MigrationService::OnHostDown(const std::string& host) {
  {
    ServiceLock lock(&mu_);
    connected_.erase(host);
    if (manager_) manager_->OnHostDown(host, "", "agent stream lost");
  }
  Flush();
}

void MigrationService::HostGone(const std::string& host) {
  ServiceLock lock(&mu_);
  connected_.erase(host);
}

void MigrationService::RunCycle() {
  {
    ServiceLock lock(&mu_);
    if (!manager_) return;
    manager_->Tick();
  }
  Flush();
  // A fault reported after its node was migrated off (a dead rank's
  // PROCESS_DIED can come a cycle after a quick --from-replica commit).
  MitigateMigratedFaults();
  ActOnFaults();
}

void MigrationService::Flush() {
  std::vector<Effect> batch;
  uint64_t through = 0;  // the last effect of `batch`
  {
    ServiceLock lock(&mu_);
    if (flushing_ || outbox_.empty()) return;
    flushing_ = true;
    batch.swap(outbox_);
    through = queued_;
  }
  for (;;) {
    for (Effect& e : batch) {
      if (Directive* d = std::get_if<Directive>(&e)) {
        (void)options_.nodes->SendMigration(d->host, d->directive);
      } else {
        Finished(std::get<Committed>(e).migration);
      }
    }
    batch.clear();
    ServiceLock lock(&mu_);
    Applied(through);
    if (outbox_.empty()) {
      flushing_ = false;
      return;
    }
    batch.swap(outbox_);
    through = queued_;
  }
}

void MigrationService::Applied(uint64_t seq) {
  MutexLock lock(&settle_mu_);
  if (seq > applied_) applied_ = seq;
  settled_.SignalAll();
}

void MigrationService::Settle() {
  Flush();
  uint64_t target = 0;
  {
    ServiceLock lock(&mu_);
    target = queued_;
  }
  MutexLock lock(&settle_mu_);
  while (applied_ < target) settled_.Wait(&settle_mu_);
}

void MigrationService::Finished(const v1::Migration& m) {
  const std::string why = MigratedOffNote(m);
  // Every member switched to the new communicators and destroys the old
  // ones: their progress stops at the switch and must not read as a hang.
  std::vector<uint64_t> replaced;
  for (const v1::CommRebuild& c : m.comms()) {
    replaced.push_back(c.old_comm_hash());
  }
  options_.detection->RetireComms(
      replaced, absl::StrCat("communicator replaced by migration ",
                             m.migration_id(), " (committed)"));
  options_.nodes->DrainMigrated(m.leaver_host(), why);
  if (options_.policy_actions != nullptr) {
    options_.policy_actions->Took(PolicyAction::kDrainLeaver);
  }
  // The fault the policy migrated for; the job's other faults that blame
  // the leaver are found by the sweep.
  if (!m.fault_id().empty()) {
    if (absl::StatusOr<v1::Fault> f = options_.faults->Fault(m.fault_id());
        f.ok()) {
      options_.faults->MarkMitigating(*f, why);
    }
  }
  MitigateMigratedFaults();
}

void MigrationService::NoteMigratedOff(const v1::Migration& m) {
  migrated_off_[{m.job_id(), m.leaver_host()}] = MigratedOffNote(m);
  migrated_off_.erase({m.job_id(), m.joiner_host()});
}

void MigrationService::MitigateMigratedFaults() {
  // A copy of the (job, host) index, not of the migration history: this
  // runs every cycle, and the history only grows.
  std::map<std::pair<std::string, std::string>, std::string> off;
  {
    ServiceLock lock(&mu_);
    if (!manager_) return;
    off = migrated_off_;
  }
  if (off.empty()) return;
  absl::StatusOr<std::vector<v1::Fault>> open = options_.faults->OpenFaults();
  if (!open.ok()) return;
  for (const v1::Fault& f : *open) {
    if (f.suspects_size() == 0) continue;
    const auto it = off.find({f.job_id(), f.suspects(0).host()});
    if (it != off.end()) options_.faults->MarkMitigating(f, it->second);
  }
}

}  // namespace pitstop::controller
