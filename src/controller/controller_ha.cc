// ControllerCore's side of several controllers (docs/ha.md): the leader
// check before every write and agent stream, taking over and stepping down.
#include <utility>

#include "absl/strings/str_cat.h"
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
  sync_ = std::make_unique<SyncPolicyEngine>(options_.clock, options_.sync);
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
  Logger("controller")
      ->info(
          "leading: {} open faults, {} drains loaded from {}; next fault "
          "number {}",
          open->size(), drains_.size(), store_->path(),
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
  }
  nodes_.clear();
  sessions_.clear();
  migrations_.reset();  // the next leader drives them from the store
  if (options_.metrics) options_.metrics->SetAgentsConnected(0);
  Logger("controller")
      ->warn("stepped down ({}): {} agent streams closed", why, closed);
}

}  // namespace pitstop::controller
