#include "src/agent/trainer_service.h"

#include "pitstop/grpc_util.h"

namespace pitstop::agent {

grpc::ServerUnaryReactor* TrainerServiceImpl::ReportSteps(
    grpc::CallbackServerContext* ctx, const v1::ReportStepsRequest* request,
    v1::ReportStepsResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::StatusOr<v1::ReportStepsResponse> r = hub_->Report(*request);
  if (!r.ok()) {
    reactor->Finish(ToGrpcStatus(r.status()));
    return reactor;
  }
  *response = std::move(*r);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace pitstop::agent
