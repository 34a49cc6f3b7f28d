// ControllerCore's part of C4P flow planning (docs/planning.md): the live
// planner (src/controller/planning/) plans off the core's lock; the core
// feeds it agent batches and fault changes and sends its directives.
#include "absl/strings/str_cat.h"
#include "pitstop/logging.h"
#include "src/controller/controller_core.h"

namespace pitstop::controller {
namespace {

absl::Status PlanningOff() {
  return absl::FailedPreconditionError(
      "flow planning is off: start pitstop-controller with --fabric "
      "FILE|gen:... (docs/planning.md)");
}

}  // namespace

absl::Status ControllerCore::StartPlanning() {
  if (options_.planning.fabric.empty()) {
    Logger("planner")->info(
        "flow planning off: no --fabric given (docs/planning.md)");
    return absl::OkStatus();
  }
  LivePlanner::Options o = options_.planning;
  o.clock = options_.clock;
  o.store = store_.get();
  absl::StatusOr<std::unique_ptr<LivePlanner>> p = LivePlanner::Create(o);
  if (!p.ok()) {
    return absl::Status(
        p.status().code(),
        absl::StrCat("--fabric ", o.fabric, ": ", p.status().message()));
  }
  planner_ = std::move(*p);
  Logger("planner")->info("flow planning on: {}",
                          planner_->fabric_description());
  return absl::OkStatus();
}

std::map<std::string, uint64_t> ControllerCore::RunPlanning() {
  if (!planner_ || !CheckLeader().ok()) return {};
  LivePlanner::RunResult r = planner_->Run();
  if (r.directives.empty()) return r.planned;
  CoreLock lock(this);
  for (const LivePlanner::Directive& d : r.directives) {
    v1::AgentCommand cmd;
    const uint64_t id = next_command_id_++;
    cmd.set_command_id(id);
    *cmd.mutable_path() = d.directive;
    const bool written = SendToAgent(d.host, cmd);
    const bool known = nodes_.count(d.host) > 0;
    // A known host's directive waits in commands_ for its agent.
    if (known) planner_->Sent(d.host, id, d.directive);
    if (!written) {
      Logger("planner")->warn(
          "job {}: plan epoch {} not sent to {}: its agent is not connected{}",
          d.directive.job_id(), d.directive.epoch(), d.host,
          known ? " (sent when it reconnects)" : "");
    }
  }
  return r.planned;
}

absl::StatusOr<v1::FlowPlan> ControllerCore::GetFlowPlan(
    const v1::GetFlowPlanRequest& r) {
  if (r.job_id().empty()) return absl::InvalidArgumentError("job_id: empty");
  if (!planner_) return PlanningOff();
  // A follower has no live plan (it joins no agent); like other reads it
  // answers from the durable store, where the leader saved the plan.
  if (!CheckLeader().ok()) {
    return planner_->StoredFlowPlan(r.job_id(), r.summary_only());
  }
  return planner_->GetFlowPlan(r.job_id(), r.summary_only());
}

absl::StatusOr<v1::ListLinksResponse> ControllerCore::ListLinks(
    const v1::ListLinksRequest& r) {
  if (!planner_) return PlanningOff();
  return planner_->ListLinks(r);
}

absl::StatusOr<v1::SetLinkHealthResponse> ControllerCore::SetLinkHealth(
    const v1::SetLinkHealthRequest& r) {
  if (absl::Status s = CheckLeader(); !s.ok()) return s;
  if (!planner_) return PlanningOff();
  absl::StatusOr<std::vector<v1::LinkStatus>> links =
      planner_->SetLinkHealth(r);
  if (!links.ok()) return links.status();
  v1::SetLinkHealthResponse resp;
  for (v1::LinkStatus& l : *links) *resp.add_links() = std::move(l);
  for (const auto& [job, epoch] : RunPlanning()) {
    (*resp.mutable_replanned())[job] = epoch;
  }
  return resp;
}

}  // namespace pitstop::controller
