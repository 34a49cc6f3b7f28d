// The Controller API's fault calls: thin adapters over FaultService; the
// WatchFaults stream is in streams.cc.
#include "pitstop/grpc_util.h"
#include "src/controller/api/controller_service.h"
#include "src/controller/api/streams.h"
#include "src/controller/api/take.h"
#include "src/controller/api/unary_call.h"
#include "src/controller/faults/fault_service.h"

namespace pitstop::controller {

grpc::ServerUnaryReactor* ControllerService::ListFaults(
    grpc::CallbackServerContext* ctx, const v1::ListFaultsRequest* req,
    v1::ListFaultsResponse* resp) {
  PITSTOP_AUTHORIZE(ListFaults);
  absl::StatusOr<std::vector<v1::Fault>> faults =
      s_.faults->Faults(req->job_id(), req->include_resolved(), req->limit());
  if (!faults.ok()) return FinishUnary(ctx, faults.status());
  for (v1::Fault& f : *faults) *resp->add_faults() = std::move(f);
  return FinishUnary(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* ControllerService::GetFault(
    grpc::CallbackServerContext* ctx, const v1::GetFaultRequest* req,
    v1::GetFaultResponse* resp) {
  PITSTOP_AUTHORIZE(GetFault);
  return FinishUnary(
      ctx, Take(s_.faults->Fault(req->fault_id()), resp->mutable_fault()));
}

grpc::ServerWriteReactor<v1::WatchFaultsResponse>*
ControllerService::WatchFaults(grpc::CallbackServerContext* ctx,
                               const v1::WatchFaultsRequest* req) {
  if (absl::Status st = Authorize(ctx, "/pitstop.v1.Controller/WatchFaults");
      !st.ok()) {
    return NewRefusedWatchReactor(st);
  }
  return NewWatchReactor(s_.faults, *req);
}

grpc::ServerUnaryReactor* ControllerService::AcknowledgeFault(
    grpc::CallbackServerContext* ctx, const v1::AcknowledgeFaultRequest* req,
    v1::AcknowledgeFaultResponse* resp) {
  PITSTOP_AUTHORIZE(AcknowledgeFault);
  return FinishUnary(ctx, Take(s_.faults->Acknowledge(req->fault_id(),
                                                      req->who(), req->note()),
                               resp->mutable_fault()));
}

grpc::ServerUnaryReactor* ControllerService::ResolveFault(
    grpc::CallbackServerContext* ctx, const v1::ResolveFaultRequest* req,
    v1::ResolveFaultResponse* resp) {
  PITSTOP_AUTHORIZE(ResolveFault);
  return FinishUnary(
      ctx, Take(s_.faults->Resolve(req->fault_id(), req->who(), req->note()),
                resp->mutable_fault()));
}

}  // namespace pitstop::controller
