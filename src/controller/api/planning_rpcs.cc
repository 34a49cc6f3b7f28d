// The Controller API's flow-planning calls: thin adapters over
// PlanningService (docs/planning.md).
#include "pitstop/grpc_util.h"
#include "src/controller/api/controller_service.h"
#include "src/controller/api/unary_call.h"
#include "src/controller/planning/planning_service.h"

namespace pitstop::controller {

grpc::ServerUnaryReactor* ControllerService::GetFlowPlan(
    grpc::CallbackServerContext* ctx, const v1::GetFlowPlanRequest* req,
    v1::GetFlowPlanResponse* resp) {
  PITSTOP_AUTHORIZE(GetFlowPlan);
  absl::StatusOr<v1::FlowPlan> p = s_.planning->GetFlowPlan(*req);
  if (p.ok()) *resp->mutable_plan() = std::move(*p);
  return FinishUnary(ctx, p.status());
}

grpc::ServerUnaryReactor* ControllerService::ListLinks(
    grpc::CallbackServerContext* ctx, const v1::ListLinksRequest* req,
    v1::ListLinksResponse* resp) {
  PITSTOP_AUTHORIZE(ListLinks);
  absl::StatusOr<v1::ListLinksResponse> r = s_.planning->ListLinks(*req);
  if (r.ok()) *resp = std::move(*r);
  return FinishUnary(ctx, r.status());
}

grpc::ServerUnaryReactor* ControllerService::SetLinkHealth(
    grpc::CallbackServerContext* ctx, const v1::SetLinkHealthRequest* req,
    v1::SetLinkHealthResponse* resp) {
  PITSTOP_AUTHORIZE(SetLinkHealth);
  absl::StatusOr<v1::SetLinkHealthResponse> r =
      s_.planning->SetLinkHealth(*req);
  if (r.ok()) *resp = std::move(*r);
  return FinishUnary(ctx, r.status());
}

}  // namespace pitstop::controller
