// The Controller API's detection calls (communicators, job policies): thin
// adapters over IngestService.
#include <string>
#include <utility>
#include <vector>

#include "pitstop/grpc_util.h"
#include "pitstop/logging.h"
#include "src/controller/api/controller_service.h"
#include "src/controller/api/paging.h"
#include "src/controller/api/take.h"
#include "src/controller/api/unary_call.h"
#include "src/controller/ingest/ingest_service.h"

namespace pitstop::controller {

grpc::ServerUnaryReactor* ControllerService::ListCommunicators(
    grpc::CallbackServerContext* ctx, const v1::ListCommunicatorsRequest* req,
    v1::ListCommunicatorsResponse* resp) {
  PITSTOP_AUTHORIZE(ListCommunicators);
  return FinishUnary(
      ctx,
      PageCommunicators(s_.ingest->Communicators(req->job_id()), *req, resp));
}

grpc::ServerUnaryReactor* ControllerService::GetCommunicator(
    grpc::CallbackServerContext* ctx, const v1::GetCommunicatorRequest* req,
    v1::GetCommunicatorResponse* resp) {
  PITSTOP_AUTHORIZE(GetCommunicator);
  absl::Status st = Take(s_.ingest->Communicator(req->comm_hash()),
                         resp->mutable_communicator());
  TrimMembers(resp->mutable_communicator(), kMaxPageBytes);
  return FinishUnary(ctx, st);
}

grpc::ServerUnaryReactor* ControllerService::GetJobPolicy(
    grpc::CallbackServerContext* ctx, const v1::GetJobPolicyRequest* req,
    v1::GetJobPolicyResponse* resp) {
  PITSTOP_AUTHORIZE(GetJobPolicy);
  return FinishUnary(
      ctx, Take(s_.ingest->GetPolicy(req->job_id()), resp->mutable_policy()));
}

grpc::ServerUnaryReactor* ControllerService::SetJobPolicy(
    grpc::CallbackServerContext* ctx, const v1::SetJobPolicyRequest* req,
    v1::SetJobPolicyResponse* resp) {
  PITSTOP_AUTHORIZE(SetJobPolicy);
  if (!req->has_policy()) {
    return FinishUnary(ctx, absl::InvalidArgumentError("policy: required"));
  }
  return FinishUnary(ctx,
                     Take(s_.ingest->SetPolicy(req->job_id(), req->policy()),
                          resp->mutable_policy()));
}

grpc::ServerUnaryReactor* ControllerService::SetJobHosts(
    grpc::CallbackServerContext* ctx, const v1::SetJobHostsRequest* req,
    v1::SetJobHostsResponse* resp) {
  PITSTOP_AUTHORIZE(SetJobHosts);
  absl::StatusOr<std::vector<std::string>> hosts = s_.ingest->SetJobHosts(
      req->job_id(), {req->hosts().begin(), req->hosts().end()}, req->who());
  if (hosts.ok()) {
    Logger("controller")
        ->info("job {}: {} hosts named by {}", req->job_id().substr(0, 64),
               hosts->size(), req->who().substr(0, 64));
    resp->set_job_id(req->job_id());
    for (std::string& h : *hosts) resp->add_hosts(std::move(h));
  }
  return FinishUnary(ctx, hosts.status());
}

}  // namespace pitstop::controller
