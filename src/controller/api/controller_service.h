// gRPC adapters over the controller's services: the Controller API (unary
// calls and the watch streams) and AgentLink.Connect (one bidi stream per
// agent), both on the callback API, plus the server that hosts them. Each
// call is a thin adapter over the one service it serves (the files are
// split by service: fault_rpcs.cc, node_rpcs.cc, ...); GetStatus, ListJobs,
// GetJob and AgentLink span services and go to the Controller.
#ifndef PITSTOP_CONTROLLER_API_CONTROLLER_SERVICE_H_
#define PITSTOP_CONTROLLER_API_CONTROLLER_SERVICE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "pitstop/v1/agent.grpc.pb.h"
#include "pitstop/v1/controller.grpc.pb.h"
#include "src/controller/api/authorizer.h"

namespace pitstop::controller {

class Controller;
class FaultService;
class IngestService;
class MigrationService;
class NodeService;
class PlanningService;
class TrainerPolicyService;

// The services the adapters serve (not owned).
struct ApiServices {
  Controller* controller = nullptr;  // the cross-service calls
  FaultService* faults = nullptr;
  NodeService* nodes = nullptr;
  IngestService* ingest = nullptr;
  TrainerPolicyService* trainers = nullptr;
  MigrationService* migration = nullptr;
  PlanningService* planning = nullptr;
  // Every service of `c`.
  static ApiServices Of(Controller* c);
};

// Request validation lives here: INVALID_ARGUMENT names the field, unknown
// ids get NOT_FOUND (from the service). Every call first asks `auth` (when
// set) with the method's full name: PERMISSION_DENIED with the reason.
class ControllerService final : public v1::Controller::CallbackService {
 public:
  explicit ControllerService(ApiServices s, Authorizer* auth = nullptr)
      : s_(s), auth_(auth) {}

  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* ctx,
                                      const v1::GetStatusRequest* req,
                                      v1::GetStatusResponse* resp) override;
  grpc::ServerUnaryReactor* ListNodes(grpc::CallbackServerContext* ctx,
                                      const v1::ListNodesRequest* req,
                                      v1::ListNodesResponse* resp) override;
  grpc::ServerUnaryReactor* GetNode(grpc::CallbackServerContext* ctx,
                                    const v1::GetNodeRequest* req,
                                    v1::GetNodeResponse* resp) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const v1::ListJobsRequest* req,
                                     v1::ListJobsResponse* resp) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx,
                                   const v1::GetJobRequest* req,
                                   v1::GetJobResponse* resp) override;
  grpc::ServerUnaryReactor* ListCommunicators(
      grpc::CallbackServerContext* ctx, const v1::ListCommunicatorsRequest* req,
      v1::ListCommunicatorsResponse* resp) override;
  grpc::ServerUnaryReactor* GetCommunicator(
      grpc::CallbackServerContext* ctx, const v1::GetCommunicatorRequest* req,
      v1::GetCommunicatorResponse* resp) override;
  grpc::ServerUnaryReactor* ListFaults(grpc::CallbackServerContext* ctx,
                                       const v1::ListFaultsRequest* req,
                                       v1::ListFaultsResponse* resp) override;
  grpc::ServerUnaryReactor* GetFault(grpc::CallbackServerContext* ctx,
                                     const v1::GetFaultRequest* req,
                                     v1::GetFaultResponse* resp) override;
  grpc::ServerWriteReactor<v1::WatchFaultsResponse>* WatchFaults(
      grpc::CallbackServerContext* ctx,
      const v1::WatchFaultsRequest* req) override;
  grpc::ServerUnaryReactor* AcknowledgeFault(
      grpc::CallbackServerContext* ctx, const v1::AcknowledgeFaultRequest* req,
      v1::AcknowledgeFaultResponse* resp) override;
  grpc::ServerUnaryReactor* ResolveFault(
      grpc::CallbackServerContext* ctx, const v1::ResolveFaultRequest* req,
      v1::ResolveFaultResponse* resp) override;
  grpc::ServerUnaryReactor* DrainNode(grpc::CallbackServerContext* ctx,
                                      const v1::DrainNodeRequest* req,
                                      v1::DrainNodeResponse* resp) override;
  grpc::ServerUnaryReactor* UncordonNode(
      grpc::CallbackServerContext* ctx, const v1::UncordonNodeRequest* req,
      v1::UncordonNodeResponse* resp) override;
  grpc::ServerUnaryReactor* GetJobPolicy(
      grpc::CallbackServerContext* ctx, const v1::GetJobPolicyRequest* req,
      v1::GetJobPolicyResponse* resp) override;
  grpc::ServerUnaryReactor* SetJobPolicy(
      grpc::CallbackServerContext* ctx, const v1::SetJobPolicyRequest* req,
      v1::SetJobPolicyResponse* resp) override;
  grpc::ServerUnaryReactor* SetJobHosts(grpc::CallbackServerContext* ctx,
                                        const v1::SetJobHostsRequest* req,
                                        v1::SetJobHostsResponse* resp) override;
  grpc::ServerUnaryReactor* GetJobSync(grpc::CallbackServerContext* ctx,
                                       const v1::GetJobSyncRequest* req,
                                       v1::GetJobSyncResponse* resp) override;
  grpc::ServerUnaryReactor* SetSyncPolicy(
      grpc::CallbackServerContext* ctx, const v1::SetSyncPolicyRequest* req,
      v1::SetSyncPolicyResponse* resp) override;
  grpc::ServerUnaryReactor* GetJobLora(grpc::CallbackServerContext* ctx,
                                       const v1::GetJobLoraRequest* req,
                                       v1::GetJobLoraResponse* resp) override;
  grpc::ServerUnaryReactor* SetLoraPolicy(
      grpc::CallbackServerContext* ctx, const v1::SetLoraPolicyRequest* req,
      v1::SetLoraPolicyResponse* resp) override;
  // Standby migration (migration_rpcs.cc).
  grpc::ServerUnaryReactor* MigrateNode(grpc::CallbackServerContext* ctx,
                                        const v1::MigrateNodeRequest* req,
                                        v1::MigrateNodeResponse* resp) override;
  grpc::ServerUnaryReactor* GetMigration(
      grpc::CallbackServerContext* ctx, const v1::GetMigrationRequest* req,
      v1::GetMigrationResponse* resp) override;
  grpc::ServerUnaryReactor* ListMigrations(
      grpc::CallbackServerContext* ctx, const v1::ListMigrationsRequest* req,
      v1::ListMigrationsResponse* resp) override;
  grpc::ServerWriteReactor<v1::WatchMigrationsResponse>* WatchMigrations(
      grpc::CallbackServerContext* ctx,
      const v1::WatchMigrationsRequest* req) override;
  grpc::ServerUnaryReactor* ListStandby(grpc::CallbackServerContext* ctx,
                                        const v1::ListStandbyRequest* req,
                                        v1::ListStandbyResponse* resp) override;
  // Flow path planning (planning_rpcs.cc).
  grpc::ServerUnaryReactor* GetFlowPlan(grpc::CallbackServerContext* ctx,
                                        const v1::GetFlowPlanRequest* req,
                                        v1::GetFlowPlanResponse* resp) override;
  grpc::ServerUnaryReactor* ListLinks(grpc::CallbackServerContext* ctx,
                                      const v1::ListLinksRequest* req,
                                      v1::ListLinksResponse* resp) override;
  grpc::ServerUnaryReactor* SetLinkHealth(
      grpc::CallbackServerContext* ctx, const v1::SetLinkHealthRequest* req,
      v1::SetLinkHealthResponse* resp) override;

 private:
  absl::Status Authorize(grpc::CallbackServerContext* ctx,
                         absl::string_view method);
  const ApiServices s_;
  Authorizer* const auth_;
};

// AgentLink.Connect: a stream touches the node registry, ingest and
// migration (Controller::AgentConnected, SubmitAgentBatch). Raw: the
// stream reads the bytes of each batch and parses them only when their
// parse cost is bounded (parse_cost.h).
class AgentLinkService final
    : public v1::AgentLink::WithRawCallbackMethod_Connect<
          v1::AgentLink::Service> {
 public:
  explicit AgentLinkService(Controller* controller, Authorizer* auth = nullptr)
      : controller_(controller), auth_(auth) {}
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Connect(
      grpc::CallbackServerContext* ctx) override;

 private:
  Controller* const controller_;
  Authorizer* const auth_;
};

// How the server authenticates and authorizes callers. Default: plaintext,
// every call allowed (the controller then binds loopback unless told
// --insecure; main() decides).
struct ServerSecurity {
  std::shared_ptr<grpc::ServerCredentials> credentials;  // null = insecure
  Authorizer* authorizer = nullptr;                      // null = allow all
};

// Hosts both services on one port. Not thread-safe; owned by main().
class ControllerServer {
 public:
  // Binds `listen` ("0.0.0.0:7070", "127.0.0.1:0" picks a free port).
  // Unavailable naming the address when it cannot bind.
  static absl::StatusOr<std::unique_ptr<ControllerServer>> Start(
      Controller* controller, const std::string& listen,
      const ServerSecurity& security = {});
  ~ControllerServer();
  int port() const { return port_; }
  // Stops accepting, cancels open streams after `grace`, waits for calls.
  void Shutdown(absl::Duration grace);

 private:
  ControllerServer(Controller* controller, Authorizer* auth);
  ControllerService controller_;
  AgentLinkService agent_link_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_API_CONTROLLER_SERVICE_H_
