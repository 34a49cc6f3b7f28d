// Controller's side of several controllers (docs/ha.md): taking over and
// stepping down, service by service, with the cycle lock held so that no
// detection cycle runs on a term's state while it changes.
#include <utility>

#include "absl/strings/str_cat.h"
#include "pitstop/logging.h"
#include "src/controller/controller.h"
#include "src/controller/store/fault_store.h"

namespace pitstop::controller {

absl::Status Controller::BecomeLeader() {
  // Read everything before touching state: a failed read leaves the old
  // state and the election gives the leadership up again.
  absl::StatusOr<std::vector<v1::Fault>> open = faults_->OpenFaults();
  if (!open.ok()) return open.status();
  IngestService::Options io;
  io.clock = options_.clock;
  io.engine = options_.engine;
  absl::StatusOr<std::unique_ptr<DetectionEngine>> engine =
      IngestService::NewEngine(io, store_.get(), &*open);
  if (!engine.ok()) return engine.status();
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
  ingest_->Reset(std::move(*engine));
  // Fresh trainer policies (their state is soft: the trainers report
  // again) with the settings operators gave any earlier leader.
  trainers_->Reset(*trainer);
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
          store_->path(), store_->NextFaultNumber());
  return absl::OkStatus();
}

void Controller::StepDown(const std::string& why) {
  const size_t closed = nodes_->CloseAll(
      absl::UnavailableError(
          absl::StrCat("controller stepped down (", why, "); reconnect")),
      /*forget_commands=*/true);  // the next leader sends its own
  ingest_->CloseSessions();
  migration_->StepDown(why);  // the next leader drives them
  faults_->DetachClientWatches(why);
  Logger("controller")
      ->warn("stepped down ({}): {} agent streams closed", why, closed);
}

}  // namespace pitstop::controller
