// What pitstop-controller hangs on the fault event stream (FaultService):
// the open-fault gauges always, FaultActions (hooks, Slurm) when configured.
// Subscribes on Start, unsubscribes and stops the actions in its destructor,
// which must run before the fault service is destroyed.
#ifndef PITSTOP_CONTROLLER_ACTIONS_DAEMON_ACTIONS_H_
#define PITSTOP_CONTROLLER_ACTIONS_DAEMON_ACTIONS_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/registry.h"
#include "src/controller/actions/fault_actions.h"
#include "src/controller/actions/fault_metrics.h"
#include "src/controller/faults/fault_service.h"

namespace pitstop::controller {

// Created and destroyed by main(); the watchers it registers run on the
// fault service's callers' threads, with its lock held (they only queue).
class DaemonActions {
 public:
  // A job's resolved policy (IngestService::JobPolicy); called from the
  // actions' own thread, never from a watcher.
  using PolicyOf = std::function<v1::JobPolicy(const std::string& job_id)>;
  // `actions`: FaultActions options, or nullopt when no hook or Slurm is
  // configured. Fails when the actions cannot start (journal not writable).
  static absl::StatusOr<std::unique_ptr<DaemonActions>> Start(
      FaultService* faults, PolicyOf policy_of, prometheus::Registry* registry,
      std::optional<FaultActions::Options> actions);
  ~DaemonActions();

 private:
  DaemonActions(FaultService* faults, prometheus::Registry* registry)
      : faults_(faults), metrics_(registry) {}

  FaultService* const faults_;
  FaultMetrics metrics_;
  std::unique_ptr<FaultActions> actions_;
  uint64_t metrics_watch_ = 0;
  uint64_t actions_watch_ = 0;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_ACTIONS_DAEMON_ACTIONS_H_
