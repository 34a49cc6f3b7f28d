// The Controller API's calls that span services (GetStatus, ListJobs,
// GetJob: the Controller), AgentLink.Connect, and the server that hosts
// both. The per-service calls are in *_rpcs.cc.
#include "src/controller/api/controller_service.h"

#include "pitstop/grpc_util.h"
#include "src/controller/api/streams.h"
#include "src/controller/api/take.h"
#include "src/controller/api/unary_call.h"
#include "src/controller/controller.h"

namespace pitstop::controller {

ApiServices ApiServices::Of(Controller* c) {
  ApiServices s;
  s.controller = c;
  s.faults = &c->faults();
  s.nodes = &c->nodes();
  s.ingest = &c->ingest();
  s.trainers = &c->trainers();
  s.migration = &c->migration();
  s.planning = &c->planning();
  return s;
}

absl::Status ControllerService::Authorize(grpc::CallbackServerContext* ctx,
                                          absl::string_view method) {
  if (auth_ == nullptr) return absl::OkStatus();
  return auth_->Check(*ctx, method).status();
}

grpc::ServerUnaryReactor* ControllerService::GetStatus(
    grpc::CallbackServerContext* ctx, const v1::GetStatusRequest*,
    v1::GetStatusResponse* resp) {
  PITSTOP_AUTHORIZE(GetStatus);
  *resp->mutable_status() = s_.controller->Status();
  return FinishUnary(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* ControllerService::ListJobs(
    grpc::CallbackServerContext* ctx, const v1::ListJobsRequest*,
    v1::ListJobsResponse* resp) {
  PITSTOP_AUTHORIZE(ListJobs);
  for (v1::Job& j : s_.controller->Jobs()) *resp->add_jobs() = std::move(j);
  return FinishUnary(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* ControllerService::GetJob(
    grpc::CallbackServerContext* ctx, const v1::GetJobRequest* req,
    v1::GetJobResponse* resp) {
  PITSTOP_AUTHORIZE(GetJob);
  return FinishUnary(
      ctx, Take(s_.controller->Job(req->job_id()), resp->mutable_job()));
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
AgentLinkService::Connect(grpc::CallbackServerContext* ctx) {
  if (auth_ == nullptr) return NewAgentStreamReactor(controller_);
  absl::StatusOr<Caller> caller =
      auth_->Check(*ctx, "/pitstop.v1.AgentLink/Connect");
  if (!caller.ok()) return NewRefusedAgentStreamReactor(caller.status());
  return NewAgentStreamReactor(controller_,
                               AgentStreamAuth{auth_, ctx, *caller});
}

ControllerServer::ControllerServer(Controller* controller, Authorizer* auth)
    : controller_(ApiServices::Of(controller), auth),
      agent_link_(controller, auth) {}

absl::StatusOr<std::unique_ptr<ControllerServer>> ControllerServer::Start(
    Controller* controller, const std::string& listen,
    const ServerSecurity& security) {
  std::unique_ptr<ControllerServer> s(
      new ControllerServer(controller, security.authorizer));
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
