#include "src/controller/actions/daemon_actions.h"

#include <utility>

namespace pitstop::controller {

absl::StatusOr<std::unique_ptr<DaemonActions>> DaemonActions::Start(
    FaultService* faults, PolicyOf policy_of, prometheus::Registry* registry,
    std::optional<FaultActions::Options> actions) {
  std::unique_ptr<DaemonActions> d(new DaemonActions(faults, registry));
  if (actions.has_value()) {
    actions->may_act = [policy_of =
                            std::move(policy_of)](const std::string& job) {
      return !job.empty() && policy_of(job).mode() == v1::POLICY_MODE_ACT;
    };
    actions->registry = registry;
    absl::StatusOr<std::unique_ptr<FaultActions>> created =
        FaultActions::Create(std::move(*actions));
    if (!created.ok()) return created.status();
    d->actions_ = std::move(*created);
    d->actions_watch_ = faults->Subscribe(
        "", /*include_existing=*/true,
        [a = d->actions_.get()](const v1::WatchFaultsResponse& change) {
          a->OnFaultChange(change);
        });
  }
  d->metrics_watch_ = faults->Subscribe(
      "", /*include_existing=*/true,
      [m = &d->metrics_](const v1::WatchFaultsResponse& change) {
        m->OnFaultChange(change);
      });
  return d;
}

DaemonActions::~DaemonActions() {
  faults_->Unsubscribe(metrics_watch_);
  if (actions_ != nullptr) {
    faults_->Unsubscribe(actions_watch_);
    actions_->Stop();
  }
}

}  // namespace pitstop::controller
