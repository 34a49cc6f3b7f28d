// What pitstop-controller hangs on its fault watcher: the open-fault gauges
// always, FaultActions (hooks, Slurm) when configured. Subscribes on Start,
// unsubscribes and stops the actions in its destructor, which must run
// before the core is destroyed.
#ifndef PITSTOP_CONTROLLER_ACTIONS_DAEMON_ACTIONS_H_
#define PITSTOP_CONTROLLER_ACTIONS_DAEMON_ACTIONS_H_

#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "prometheus/registry.h"
#include "src/controller/actions/fault_actions.h"
#include "src/controller/actions/fault_metrics.h"
#include "src/controller/controller_core.h"

namespace pitstop::controller {

// Created and destroyed by main(); the watchers it registers run on the
// core's threads.
class DaemonActions {
 public:
  // `actions`: FaultActions options, or nullopt when no hook or Slurm is
  // configured. Fails when the actions cannot start (journal not writable).
  static absl::StatusOr<std::unique_ptr<DaemonActions>> Start(
      ControllerCore* core, prometheus::Registry* registry,
      std::optional<FaultActions::Options> actions);
  ~DaemonActions();

 private:
  DaemonActions(ControllerCore* core, prometheus::Registry* registry)
      : core_(core), metrics_(registry) {}

  ControllerCore* const core_;
  FaultMetrics metrics_;
  std::unique_ptr<FaultActions> actions_;
  uint64_t metrics_watch_ = 0;
  uint64_t actions_watch_ = 0;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_ACTIONS_DAEMON_ACTIONS_H_
