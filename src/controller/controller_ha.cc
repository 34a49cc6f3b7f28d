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
  absl::StatusOr<TrainerPolicyService::Settings> trainer =
      trainers_->ReadSettings();
  if (!trainer.ok()) return trainer.status();
  // A cycle of the previous term may still run on the old engine.
  MutexLock cycle(&cycle_mu_);
  (void)nodes_->CloseAll(
      absl::UnavailableError("controller taking over; reconnect"),
      /*forget_commands=*/false);
  const size_t drain_count = drains.size();
  nodes_->SetDrains(std::move(drains));
  // Fresh trainer policies (their state is soft: the trainers report
  // again) with the settings operators gave any earlier leader.
  trainers_->Reset(*trainer);
  {
    CoreLock lock(this);
    liveness_.clear();
    sessions_.clear();
    engine_ = std::move(*engine);
    last_joined_ = 0;
    input_.members_refused = 0;
    input_.comms_refused = 0;
  }
  // Unfinished migrations resume (or abort) under this leader; its client
  // watches of an earlier term are ended.
  if (absl::Status s = migration_->Load(); !s.ok()) {
    Logger("controller")->error("{}", s.ToString());
  }
  // The previous leader acted on these (or chose not to): watchers such as
  // the fault actions take them as existing, so a failover never runs a
  // hook or a Slurm drain twice. Watches of an earlier term of this
  // controller missed what happened in between; their clients watch again
  // here.
  faults_->AnnounceExisting(*open);
  Logger("controller")
      ->info(
          "leading: {} open faults, {} drains, {} sync and {} lora "
          "policies loaded from {}; next fault number {}",
          open->size(), drain_count, trainer->sync.size(), trainer->lora.size(),
          store_->path(), engine_options.first_fault_number);
  return absl::OkStatus();
}

void ControllerCore::StepDown(const std::string& why) {
  const size_t closed = nodes_->CloseAll(
      absl::UnavailableError(
          absl::StrCat("controller stepped down (", why, "); reconnect")),
      /*forget_commands=*/true);  // the next leader sends its own
  {
    CoreLock lock(this);
    liveness_.clear();
    sessions_.clear();
  }
  migration_->StepDown(why);  // the next leader drives them from the store
  faults_->DetachClientWatches(why);
  Logger("controller")
      ->warn("stepped down ({}): {} agent streams closed", why, closed);
}

}  // namespace pitstop::controller
