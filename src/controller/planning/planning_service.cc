#include "src/controller/planning/planning_service.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pitstop/logging.h"
#include "src/controller/ha/leadership.h"

namespace pitstop::controller {
namespace {

absl::Status PlanningOff() {
  return absl::FailedPreconditionError(
      "flow planning is off: start pitstop-controller with --fabric "
      "FILE|gen:... (docs/planning.md)");
}

}  // namespace

absl::StatusOr<std::unique_ptr<PlanningService>> PlanningService::Create(
    Options options) {
  if (options.planner.fabric.empty()) {
    Logger("planner")->info(
        "flow planning off: no --fabric given (docs/planning.md)");
    return std::unique_ptr<PlanningService>(
        new PlanningService(std::move(options), nullptr));
  }
  absl::StatusOr<std::unique_ptr<LivePlanner>> p =
      LivePlanner::Create(options.planner);
  if (!p.ok()) {
    return absl::Status(p.status().code(),
                        absl::StrCat("--fabric ", options.planner.fabric, ": ",
                                     p.status().message()));
  }
  Logger("planner")->info("flow planning on: {}", (*p)->fabric_description());
  for (const std::string& w : (*p)->fabric_warnings()) {
    Logger("planner")->warn("fabric: {}", w);
  }
  return std::unique_ptr<PlanningService>(
      new PlanningService(std::move(options), std::move(*p)));
}

PlanningService::PlanningService(Options options,
                                 std::unique_ptr<LivePlanner> planner)
    : options_(std::move(options)), planner_(std::move(planner)) {}

void PlanningService::ObserveBatch(const std::string& host,
                                   const v1::ConnectRequest& batch) {
  if (!planner_) return;
  planner_->ObserveBatch(host, batch);
  for (uint64_t id : batch.acked_command_ids()) planner_->Acked(host, id);
}

void PlanningService::ObserveFault(const v1::Fault& fault) {
  if (planner_) planner_->ObserveFault(fault);
}

std::map<std::string, uint64_t> PlanningService::Run() {
  if (!planner_ || !CheckLeader(options_.leadership).ok()) return {};
  LivePlanner::RunResult r = planner_->Run();
  for (const LivePlanner::Directive& d : r.directives) {
    const PathDirectiveSender::Sent sent =
        options_.sender->SendPathDirective(d.host, d.directive);
    // A known host's directive waits in the command ledger for its agent.
    if (sent.known) planner_->Sent(d.host, sent.command_id, d.directive);
    if (!sent.written) {
      Logger("planner")->warn(
          "job {}: plan epoch {} not sent to {}: its agent is not connected{}",
          d.directive.job_id(), d.directive.epoch(), d.host,
          sent.known ? " (sent when it reconnects)" : "");
    }
  }
  return r.planned;
}

absl::StatusOr<v1::FlowPlan> PlanningService::GetFlowPlan(
    const v1::GetFlowPlanRequest& r) {
  if (r.job_id().empty()) return absl::InvalidArgumentError("job_id: empty");
  if (!planner_) return PlanningOff();
  // A follower has no live plan (it joins no agent); like other reads it
  // answers from the durable store, where the leader saved the plan.
  if (!CheckLeader(options_.leadership).ok()) {
    return planner_->StoredFlowPlan(r.job_id(), r.summary_only());
  }
  return planner_->GetFlowPlan(r.job_id(), r.summary_only());
}

absl::StatusOr<v1::ListLinksResponse> PlanningService::ListLinks(
    const v1::ListLinksRequest& r) {
  if (!planner_) return PlanningOff();
  return planner_->ListLinks(r);
}

absl::StatusOr<v1::SetLinkHealthResponse> PlanningService::SetLinkHealth(
    const v1::SetLinkHealthRequest& r) {
  if (absl::Status s = CheckLeader(options_.leadership); !s.ok()) return s;
  if (!planner_) return PlanningOff();
  absl::StatusOr<std::vector<v1::LinkStatus>> links =
      planner_->SetLinkHealth(r);
  if (!links.ok()) return links.status();
  v1::SetLinkHealthResponse resp;
  for (v1::LinkStatus& l : *links) *resp.add_links() = std::move(l);
  for (const auto& [job, epoch] : Run()) {
    (*resp.mutable_replanned())[job] = epoch;
  }
  return resp;
}

}  // namespace pitstop::controller
