// The Controller API's trainer-policy calls (local SGD, multi-LoRA): thin
// adapters over TrainerPolicyService.
#include "pitstop/grpc_util.h"
#include "src/controller/api/controller_service.h"
#include "src/controller/api/take.h"
#include "src/controller/api/unary_call.h"
#include "src/controller/trainers/trainer_policy_service.h"

namespace pitstop::controller {

grpc::ServerUnaryReactor* ControllerService::GetJobSync(
    grpc::CallbackServerContext* ctx, const v1::GetJobSyncRequest* req,
    v1::GetJobSyncResponse* resp) {
  PITSTOP_AUTHORIZE(GetJobSync);
  return FinishUnary(
      ctx, Take(s_.trainers->JobSync(req->job_id()), resp->mutable_sync()));
}

grpc::ServerUnaryReactor* ControllerService::SetSyncPolicy(
    grpc::CallbackServerContext* ctx, const v1::SetSyncPolicyRequest* req,
    v1::SetSyncPolicyResponse* resp) {
  PITSTOP_AUTHORIZE(SetSyncPolicy);
  return FinishUnary(
      ctx, Take(s_.trainers->SetSyncPolicy(req->job_id(), req->settings()),
                resp->mutable_settings()));
}

grpc::ServerUnaryReactor* ControllerService::GetJobLora(
    grpc::CallbackServerContext* ctx, const v1::GetJobLoraRequest* req,
    v1::GetJobLoraResponse* resp) {
  PITSTOP_AUTHORIZE(GetJobLora);
  return FinishUnary(
      ctx, Take(s_.trainers->JobLora(req->job_id()), resp->mutable_lora()));
}

grpc::ServerUnaryReactor* ControllerService::SetLoraPolicy(
    grpc::CallbackServerContext* ctx, const v1::SetLoraPolicyRequest* req,
    v1::SetLoraPolicyResponse* resp) {
  PITSTOP_AUTHORIZE(SetLoraPolicy);
  return FinishUnary(
      ctx, Take(s_.trainers->SetLoraPolicy(req->job_id(), req->settings()),
                resp->mutable_settings()));
}

}  // namespace pitstop::controller
