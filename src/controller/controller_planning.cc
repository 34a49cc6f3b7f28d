// ControllerCore's part of C4P flow planning (docs/planning.md): the
// planning service (src/controller/planning/) plans off the core's lock;
// the core feeds it agent batches and the fault event stream.
#include "src/controller/controller_core.h"

namespace pitstop::controller {

absl::Status ControllerCore::StartPlanning() {
  PlanningService::Options o;
  o.planner = options_.planning;
  o.planner.clock = options_.clock;
  o.planner.store = store_.get();
  o.leadership = options_.leadership;
  o.sender = &planning_link_;
  absl::StatusOr<std::unique_ptr<PlanningService>> p =
      PlanningService::Create(std::move(o));
  if (!p.ok()) return p.status();
  planning_ = std::move(*p);
  if (!planning_->enabled()) return absl::OkStatus();
  // Every fault change (cycles, operators' resolves, mitigations) reaches
  // the planner: COMM_SLOW verdicts mark links (LivePlanner::ObserveFault
  // takes only its own short lock).
  faults_->Subscribe("", /*include_existing=*/false,
                     [p = planning_.get()](const v1::WatchFaultsResponse& r) {
                       p->ObserveFault(r.fault());
                     });
  return absl::OkStatus();
}

}  // namespace pitstop::controller
