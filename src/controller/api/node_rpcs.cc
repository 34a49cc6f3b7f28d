// The Controller API's node calls: thin adapters over NodeService.
#include "pitstop/grpc_util.h"
#include "src/controller/api/controller_service.h"
#include "src/controller/api/paging.h"
#include "src/controller/api/take.h"
#include "src/controller/api/unary_call.h"
#include "src/controller/nodes/node_service.h"

namespace pitstop::controller {

grpc::ServerUnaryReactor* ControllerService::ListNodes(
    grpc::CallbackServerContext* ctx, const v1::ListNodesRequest* req,
    v1::ListNodesResponse* resp) {
  PITSTOP_AUTHORIZE(ListNodes);
  PageNodes(s_.nodes->Nodes(), *req, resp);
  return FinishUnary(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* ControllerService::GetNode(
    grpc::CallbackServerContext* ctx, const v1::GetNodeRequest* req,
    v1::GetNodeResponse* resp) {
  PITSTOP_AUTHORIZE(GetNode);
  return FinishUnary(ctx,
                     Take(s_.nodes->Node(req->host()), resp->mutable_node()));
}

grpc::ServerUnaryReactor* ControllerService::DrainNode(
    grpc::CallbackServerContext* ctx, const v1::DrainNodeRequest* req,
    v1::DrainNodeResponse* resp) {
  PITSTOP_AUTHORIZE(DrainNode);
  return FinishUnary(ctx, Take(s_.nodes->Drain(req->host(), req->reason()),
                               resp->mutable_node()));
}

grpc::ServerUnaryReactor* ControllerService::UncordonNode(
    grpc::CallbackServerContext* ctx, const v1::UncordonNodeRequest* req,
    v1::UncordonNodeResponse* resp) {
  PITSTOP_AUTHORIZE(UncordonNode);
  return FinishUnary(
      ctx, Take(s_.nodes->Uncordon(req->host()), resp->mutable_node()));
}

}  // namespace pitstop::controller
