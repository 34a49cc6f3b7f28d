// What the controller's policies did on their own (docs/controller.md,
// "Metrics"): the services that decide tell a PolicyActions, which
// pitstop-controller counts as
//   pitstop_controller_policy_actions_total{policy,action}
// with a fixed set of label pairs (PolicyActionLabels).
#ifndef PITSTOP_CONTROLLER_COMMON_POLICY_ACTIONS_H_
#define PITSTOP_CONTROLLER_COMMON_POLICY_ACTIONS_H_

#include <utility>

#include "prometheus/counter.h"
#include "prometheus/registry.h"

namespace pitstop::controller {

enum class PolicyAction {
  kActMigrate,      // act/migrate: policy ACT started a migration
  kDrainLeaver,     // migration/drain: a commit drained the leaver
  kSyncToLocalSgd,  // sync/local_sgd: a switch sent to the trainers
  kSyncToTimed,     // sync/timed
  kSyncToSync,      // sync/sync: back to synchronous training
  kLoraReschedule,  // lora/reschedule: a new placement sent
};
inline constexpr PolicyAction kPolicyActions[] = {
    PolicyAction::kActMigrate,     PolicyAction::kDrainLeaver,
    PolicyAction::kSyncToLocalSgd, PolicyAction::kSyncToTimed,
    PolicyAction::kSyncToSync,     PolicyAction::kLoraReschedule};
// {policy, action} label values of `a`.
std::pair<const char*, const char*> PolicyActionLabels(PolicyAction a);

// Told from the deciding service's threads, possibly under its lock: must
// not block nor call back into a service.
class PolicyActions {
 public:
  virtual ~PolicyActions() = default;
  virtual void Took(PolicyAction a) = 0;
};

// The counter; every label pair exists (at 0) from the start. Thread-safe.
class PolicyActionMetrics final : public PolicyActions {
 public:
  explicit PolicyActionMetrics(prometheus::Registry* registry);
  void Took(PolicyAction a) override;

 private:
  prometheus::Family<prometheus::Counter>* family_;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_COMMON_POLICY_ACTIONS_H_
