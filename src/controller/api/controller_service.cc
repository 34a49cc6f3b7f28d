// The Controller API adapter: unary calls map core results to responses.
#include "src/controller/api/controller_service.h"

#include "pitstop/grpc_util.h"
#include "src/controller/api/paging.h"
#include "src/controller/api/streams.h"
#include "src/controller/api/unary_call.h"

namespace pitstop::controller {
namespace {

// Copies a StatusOr's value into *out, returning the status.
template <typename T>
absl::Status Take(absl::StatusOr<T> v, T* out) {
  if (!v.ok()) return v.status();
  *out = std::move(*v);
  return absl::OkStatus();
}

}  // namespace

absl::Status ControllerService::Authorize(grpc::CallbackServerContext* ctx,
                                          absl::string_view method) {
  if (auth_ == nullptr) return absl::OkStatus();
  return auth_->Check(*ctx, method).status();
}

grpc::ServerUnaryReactor* ControllerService::GetStatus(
    grpc::CallbackServerContext* ctx, const v1::GetStatusRequest*,
    v1::GetStatusResponse* resp) {
  PITSTOP_AUTHORIZE(GetStatus);
  *resp->mutable_status() = core_->Status();
  return FinishUnary(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* ControllerService::ListNodes(
    grpc::CallbackServerContext* ctx, const v1::ListNodesRequest* req,
    v1::ListNodesResponse* resp) {
  PITSTOP_AUTHORIZE(ListNodes);
  PageNodes(core_->Nodes(), *req, resp);
  return FinishUnary(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* ControllerService::GetNode(
    grpc::CallbackServerContext* ctx, const v1::GetNodeRequest* req,
    v1::GetNodeResponse* resp) {
  PITSTOP_AUTHORIZE(GetNode);
  return FinishUnary(ctx, Take(core_->Node(req->host()), resp->mutable_node()));
}

grpc::ServerUnaryReactor* ControllerService::ListJobs(
    grpc::CallbackServerContext* ctx, const v1::ListJobsRequest*,
    v1::ListJobsResponse* resp) {
  PITSTOP_AUTHORIZE(ListJobs);
  for (v1::Job& j : core_->Jobs()) *resp->add_jobs() = std::move(j);
  return FinishUnary(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* ControllerService::GetJob(
    grpc::CallbackServerContext* ctx, const v1::GetJobRequest* req,
    v1::GetJobResponse* resp) {
  PITSTOP_AUTHORIZE(GetJob);
  return FinishUnary(ctx, Take(core_->Job(req->job_id()), resp->mutable_job()));
}

grpc::ServerUnaryReactor* ControllerService::ListCommunicators(
    grpc::CallbackServerContext* ctx, const v1::ListCommunicatorsRequest* req,
    v1::ListCommunicatorsResponse* resp) {
  PITSTOP_AUTHORIZE(ListCommunicators);
  return FinishUnary(
      ctx, PageCommunicators(core_->Communicators(req->job_id()), *req, resp));
}

grpc::ServerUnaryReactor* ControllerService::GetCommunicator(
    grpc::CallbackServerContext* ctx, const v1::GetCommunicatorRequest* req,
    v1::GetCommunicatorResponse* resp) {
  PITSTOP_AUTHORIZE(GetCommunicator);
  absl::Status st =
      Take(core_->Communicator(req->comm_hash()), resp->mutable_communicator());
  TrimMembers(resp->mutable_communicator(), kMaxPageBytes);
  return FinishUnary(ctx, st);
}

grpc::ServerUnaryReactor* ControllerService::ListFaults(
    grpc::CallbackServerContext* ctx, const v1::ListFaultsRequest* req,
    v1::ListFaultsResponse* resp) {
  PITSTOP_AUTHORIZE(ListFaults);
  absl::StatusOr<std::vector<v1::Fault>> faults =
      core_->Faults(req->job_id(), req->include_resolved(), req->limit());
  if (!faults.ok()) return FinishUnary(ctx, faults.status());
  for (v1::Fault& f : *faults) *resp->add_faults() = std::move(f);
  return FinishUnary(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* ControllerService::GetFault(
    grpc::CallbackServerContext* ctx, const v1::GetFaultRequest* req,
    v1::GetFaultResponse* resp) {
  PITSTOP_AUTHORIZE(GetFault);
  return FinishUnary(
      ctx, Take(core_->Fault(req->fault_id()), resp->mutable_fault()));
}

grpc::ServerWriteReactor<v1::WatchFaultsResponse>*
ControllerService::WatchFaults(grpc::CallbackServerContext* ctx,
                               const v1::WatchFaultsRequest* req) {
  if (absl::Status st = Authorize(ctx, "/pitstop.v1.Controller/WatchFaults");
      !st.ok()) {
    return NewRefusedWatchReactor(st);
  }
  return NewWatchReactor(core_, *req);
}

grpc::ServerUnaryReactor* ControllerService::AcknowledgeFault(
    grpc::CallbackServerContext* ctx, const v1::AcknowledgeFaultRequest* req,
    v1::AcknowledgeFaultResponse* resp) {
  PITSTOP_AUTHORIZE(AcknowledgeFault);
  return FinishUnary(
      ctx, Take(core_->Acknowledge(req->fault_id(), req->who(), req->note()),
                resp->mutable_fault()));
}

grpc::ServerUnaryReactor* ControllerService::ResolveFault(
    grpc::CallbackServerContext* ctx, const v1::ResolveFaultRequest* req,
    v1::ResolveFaultResponse* resp) {
  PITSTOP_AUTHORIZE(ResolveFault);
  return FinishUnary(
      ctx, Take(core_->Resolve(req->fault_id(), req->who(), req->note()),
                resp->mutable_fault()));
}

grpc::ServerUnaryReactor* ControllerService::DrainNode(
    grpc::CallbackServerContext* ctx, const v1::DrainNodeRequest* req,
    v1::DrainNodeResponse* resp) {
  PITSTOP_AUTHORIZE(DrainNode);
  return FinishUnary(ctx, Take(core_->Drain(req->host(), req->reason()),
                               resp->mutable_node()));
}

grpc::ServerUnaryReactor* ControllerService::UncordonNode(
    grpc::CallbackServerContext* ctx, const v1::UncordonNodeRequest* req,
    v1::UncordonNodeResponse* resp) {
  PITSTOP_AUTHORIZE(UncordonNode);
  return FinishUnary(ctx,
                     Take(core_->Uncordon(req->host()), resp->mutable_node()));
}

grpc::ServerUnaryReactor* ControllerService::GetJobPolicy(
    grpc::CallbackServerContext* ctx, const v1::GetJobPolicyRequest* req,
    v1::GetJobPolicyResponse* resp) {
  PITSTOP_AUTHORIZE(GetJobPolicy);
  return FinishUnary(
      ctx, Take(core_->GetPolicy(req->job_id()), resp->mutable_policy()));
}

grpc::ServerUnaryReactor* ControllerService::SetJobPolicy(
    grpc::CallbackServerContext* ctx, const v1::SetJobPolicyRequest* req,
    v1::SetJobPolicyResponse* resp) {
  PITSTOP_AUTHORIZE(SetJobPolicy);
  if (!req->has_policy()) {
    return FinishUnary(ctx, absl::InvalidArgumentError("policy: required"));
  }
  return FinishUnary(ctx, Take(core_->SetPolicy(req->job_id(), req->policy()),
                               resp->mutable_policy()));
}

grpc::ServerUnaryReactor* ControllerService::GetJobSync(
    grpc::CallbackServerContext* ctx, const v1::GetJobSyncRequest* req,
    v1::GetJobSyncResponse* resp) {
  PITSTOP_AUTHORIZE(GetJobSync);
  return FinishUnary(ctx,
                     Take(core_->JobSync(req->job_id()), resp->mutable_sync()));
}

grpc::ServerUnaryReactor* ControllerService::SetSyncPolicy(
    grpc::CallbackServerContext* ctx, const v1::SetSyncPolicyRequest* req,
    v1::SetSyncPolicyResponse* resp) {
  PITSTOP_AUTHORIZE(SetSyncPolicy);
  return FinishUnary(ctx,
                     Take(core_->SetSyncPolicy(req->job_id(), req->settings()),
                          resp->mutable_settings()));
}

grpc::ServerUnaryReactor* ControllerService::GetJobLora(
    grpc::CallbackServerContext* ctx, const v1::GetJobLoraRequest* req,
    v1::GetJobLoraResponse* resp) {
  PITSTOP_AUTHORIZE(GetJobLora);
  return FinishUnary(ctx,
                     Take(core_->JobLora(req->job_id()), resp->mutable_lora()));
}

grpc::ServerUnaryReactor* ControllerService::SetLoraPolicy(
    grpc::CallbackServerContext* ctx, const v1::SetLoraPolicyRequest* req,
    v1::SetLoraPolicyResponse* resp) {
  PITSTOP_AUTHORIZE(SetLoraPolicy);
  return FinishUnary(ctx,
                     Take(core_->SetLoraPolicy(req->job_id(), req->settings()),
                          resp->mutable_settings()));
}

grpc::ServerBidiReactor<v1::ConnectRequest, v1::ConnectResponse>*
AgentLinkService::Connect(grpc::CallbackServerContext* ctx) {
  if (auth_ == nullptr) return NewAgentStreamReactor(core_);
  absl::StatusOr<Caller> caller =
      auth_->Check(*ctx, "/pitstop.v1.AgentLink/Connect");
  if (!caller.ok()) return NewRefusedAgentStreamReactor(caller.status());
  return NewAgentStreamReactor(core_, AgentStreamAuth{auth_, ctx, *caller});
}

ControllerServer::ControllerServer(ControllerCore* core, Authorizer* auth)
    : controller_(core, auth), agent_link_(core, auth) {}

absl::StatusOr<std::unique_ptr<ControllerServer>> ControllerServer::Start(
    ControllerCore* core, const std::string& listen,
    const ServerSecurity& security) {
  std::unique_ptr<ControllerServer> s(
      new ControllerServer(core, security.authorizer));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen,
                           security.credentials
                               ? security.credentials
                               : grpc::InsecureServerCredentials(),
                           &s->port_);
  builder.RegisterService(&s->controller_);
  builder.RegisterService(&s->agent_link_);
  builder.SetMaxReceiveMessageSize(64 << 20);
  // gRPC enables SO_REUSEPORT by default: a second controller on the same
  // port would start and share the calls. Make it fail instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  ApplyServerKeepalive(&builder);
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", listen, " (address in use?)"));
  }
  return s;
}

ControllerServer::~ControllerServer() { Shutdown(absl::ZeroDuration()); }

void ControllerServer::Shutdown(absl::Duration grace) {
  if (server_ == nullptr) return;
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  server_->Wait();
  server_.reset();
}

}  // namespace pitstop::controller
