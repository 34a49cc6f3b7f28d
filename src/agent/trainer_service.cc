#include "src/agent/trainer_service.h"

#include <optional>

#include "pitstop/grpc_util.h"
#include "src/agent/local_tenants.h"

namespace pitstop::agent {

grpc::ServerUnaryReactor* TrainerServiceImpl::ReportSteps(
    grpc::CallbackServerContext* ctx, const v1::ReportStepsRequest* request,
    v1::ReportStepsResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (core_ != nullptr && creds_ != nullptr) {
    if (std::optional<PeerCred> peer = creds_->Lookup(ctx->peer())) {
      absl::Status allowed = core_->CheckTrainer(
          IdentifyProcess(*peer), request->trainer().job_id(),
          request->trainer().global_rank());
      if (!allowed.ok()) {
        reactor->Finish(ToGrpcStatus(allowed));
        return reactor;
      }
    }
  }
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
