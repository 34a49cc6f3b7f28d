// ControllerCore's side of several controllers (docs/ha.md): the leader
// check before every write and agent stream, taking over and stepping down.
#include <utility>

#include "absl/strings/str_cat.h"
#include "pitstop/leader_hint.h"
#include "pitstop/logging.h"
#include "src/controller/controller_core.h"

namespace pitstop::controller {

absl::Status ControllerCore::CheckLeader() const {
  return options_.leadership == nullptr ? absl::OkStatus()
                                        : options_.leadership->CheckLeader();
}

absl::Status ControllerCore::BecomeLeader() {
  // Read everything before touching state: a failed read leaves the old
  // state and the election gives the leadership up again.
  absl::StatusOr<std::vector<v1::Fault>> open =
      store_->List("", /*include_resolved=*/false, 0);
  if (!open.ok()) return open.status();
  DetectionEngine::Options engine_options = options_.engine;
  engine_options.first_fault_number = store_->NextFaultNumber();
  absl::StatusOr<std::unique_ptr<DetectionEngine>> engine =
      DetectionEngine::Create(options_.clock, engine_options);
  if (!engine.ok()) return engine.status();
  for (const auto& [job, policy] : store_->Policies()) {
    (void)(*engine)->SetJobPolicy(job, policy);
  }
  (*engine)->AdoptOpenFaults(*open);
  std::map<std::string, std::string> drains = store_->Drains();
  absl::StatusOr<TrainerSettings> trainer = ReadTrainerSettings();
  if (!trainer.ok()) return trainer.status();
  // Fresh trainer policies (their state is soft: the trainers report
  // again) with the settings operators gave any earlier leader.
  SyncPolicyEngine::Options sync_options = options_.sync;
  sync_options.directive_ids = &directive_ids_;
  auto sync = std::make_unique<SyncPolicyEngine>(options_.clock, sync_options);
  LoraPolicyEngine::Options lora_options = options_.lora;
  lora_options.directive_ids = &directive_ids_;
  auto lora = std::make_unique<LoraPolicyEngine>(options_.clock, lora_options);
  ApplyTrainerSettings(*trainer, sync.get(), lora.get());
  // A cycle of the previous term may still run on the old engine.
  MutexLock cycle(&cycle_mu_);
  CoreLock lock(this);
  for (auto& [host, e] : nodes_) {
    if (e.sink != nullptr) {
      e.sink->Close(
          absl::UnavailableError("controller taking over; reconnect"));
    }
  }
  nodes_.clear();
  sessions_.clear();
  engine_ = std::move(*engine);
  sync_ = std::move(sync);
  lora_ = std::move(lora);
  drains_ = std::move(drains);
  last_joined_ = 0;
  input_.members_refused = 0;
  input_.comms_refused = 0;
  if (options_.metrics) options_.metrics->SetAgentsConnected(0);
  // Unfinished migrations resume (or abort) under this leader.
  if (absl::Status s = LoadMigrations(); !s.ok()) {
    Logger("controller")->error("{}", s.ToString());
  }
  // The previous leader acted on these (or chose not to): watchers such as
  // the fault actions take them as existing, so a failover never runs a
  // hook or a Slurm drain twice.
  for (auto it = open->rbegin(); it != open->rend(); ++it) {
    Notify(v1::WatchFaultsResponse::CHANGE_EXISTING, *it);
  }
  // Watches of an earlier term of this controller: they missed what
  // happened in between; their clients watch again here.
  EndFormerWatches(/*now=*/true);
  Logger("controller")
      ->info(
          "leading: {} open faults, {} drains, {} sync and {} lora "
          "policies loaded from {}; next fault number {}",
          open->size(), drains_.size(), trainer->sync.size(),
          trainer->lora.size(), store_->path(),
          engine_options.first_fault_number);
  return absl::OkStatus();
}

void ControllerCore::StepDown(const std::string& why) {
  CoreLock lock(this);
  size_t closed = 0;
  for (auto& [host, e] : nodes_) {
    if (e.sink != nullptr) {
      e.sink->Close(absl::UnavailableError(
          absl::StrCat("controller stepped down (", why, "); reconnect")));
      ++closed;
    }
    commands_.Forget(host);  // the next leader sends its own
  }
  nodes_.clear();
  sessions_.clear();
  migrations_.reset();  // the next leader drives them from the store
  DetachClientWatches(why);
  if (options_.metrics) options_.metrics->SetAgentsConnected(0);
  Logger("controller")
      ->warn("stepped down ({}): {} agent streams closed", why, closed);
}

absl::StatusOr<uint64_t> ControllerCore::SubscribeClient(
    const std::string& job_id, bool include_existing, WatchFn fn,
    WatchEndFn end) {
  CoreLock lock(this);
  // Checked under the lock: the election stops leading before it calls
  // StepDown (which takes the lock), so a watch is either refused here or
  // ended by StepDown, never left silent.
  if (absl::Status s = CheckLeader(); !s.ok()) return s;
  return AddWatcher(job_id, include_existing, std::move(fn), std::move(end));
}

absl::StatusOr<uint64_t> ControllerCore::SubscribeMigrationsClient(
    const std::string& job_id, bool include_existing, MigrationWatchFn fn,
    WatchEndFn end) {
  CoreLock lock(this);
  if (absl::Status s = CheckLeader(); !s.ok()) return s;
  return AddMigrationWatcher(job_id, include_existing, std::move(fn),
                             std::move(end));
}

void ControllerCore::DetachClientWatches(const std::string& why) {
  size_t n = 0;
  for (auto it = watchers_.begin(); it != watchers_.end();) {
    if (!it->second.end) {
      ++it;
      continue;
    }
    ending_watches_[it->first] = std::move(it->second.end);
    it = watchers_.erase(it);
    ++n;
  }
  for (auto it = migration_watchers_.begin();
       it != migration_watchers_.end();) {
    if (!it->second.end) {
      ++it;
      continue;
    }
    ending_watches_[it->first] = std::move(it->second.end);
    it = migration_watchers_.erase(it);
    ++n;
  }
  if (n == 0) return;
  ending_why_ = why;
  ending_deadline_ = options_.clock->Now() + kWatchEndWait;
  // Usually the new leader is not known yet (its campaign follows the
  // lease's end); the loop ends them once it is (RunCycle).
  EndFormerWatches(/*now=*/false);
}

void ControllerCore::EndFormerWatches(bool now) {
  if (ending_watches_.empty()) return;
  std::string leader;
  if (options_.leadership != nullptr) {
    v1::ControllerStatus st;
    options_.leadership->FillStatus(&st);
    const absl::Status leading = CheckLeader();
    leader = leading.ok() ? st.leader() : LeaderFromMessage(leading.message());
  }
  if (leader.empty() && !now && options_.clock->Now() < ending_deadline_) {
    return;
  }
  const absl::Status why = absl::UnavailableError(absl::StrCat(
      "controller stepped down (", ending_why_, "); watch again at ",
      leader.empty() ? "another controller (no leader known yet)"
                     : absl::StrCat("the leader; leader=", leader)));
  Logger("controller")
      ->info("{} watch streams of the former term ended: {}",
             ending_watches_.size(), std::string(why.message()));
  for (auto& [id, end] : ending_watches_) end(why);
  ending_watches_.clear();
}

}  // namespace pitstop::controller
