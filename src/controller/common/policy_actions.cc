#include "src/controller/common/policy_actions.h"

namespace pitstop::controller {

std::pair<const char*, const char*> PolicyActionLabels(PolicyAction a) {
  switch (a) {
    case PolicyAction::kActMigrate:
      return {"act", "migrate"};
    case PolicyAction::kDrainLeaver:
      return {"migration", "drain"};
    case PolicyAction::kSyncToLocalSgd:
      return {"sync", "local_sgd"};
    case PolicyAction::kSyncToTimed:
      return {"sync", "timed"};
    case PolicyAction::kSyncToSync:
      return {"sync", "sync"};
    case PolicyAction::kLoraReschedule:
      return {"lora", "reschedule"};
  }
  return {"act", "migrate"};
}

PolicyActionMetrics::PolicyActionMetrics(prometheus::Registry* registry)
    : family_(&prometheus::BuildCounter()
                   .Name("pitstop_controller_policy_actions_total")
                   .Help("What the controller's policies did on their own, "
                         "by policy and action: act/migrate, "
                         "migration/drain, sync/{local_sgd,timed,sync}, "
                         "lora/reschedule")
                   .Register(*registry)) {
  for (PolicyAction a : kPolicyActions) {
    const auto [policy, action] = PolicyActionLabels(a);
    family_->Add({{"policy", policy}, {"action", action}});
  }
}

void PolicyActionMetrics::Took(PolicyAction a) {
  const auto [policy, action] = PolicyActionLabels(a);
  family_->Add({{"policy", policy}, {"action", action}}).Increment();
}

}  // namespace pitstop::controller
