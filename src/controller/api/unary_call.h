// What the Controller service's unary calls share (controller_service.cc,
// migration_service.cc): finishing with a status, and the role check every
// call starts with.
#ifndef PITSTOP_CONTROLLER_API_UNARY_CALL_H_
#define PITSTOP_CONTROLLER_API_UNARY_CALL_H_

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "pitstop/grpc_util.h"

namespace pitstop::controller {

// Finishes a unary call with `status` (its response already filled).
inline grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* ctx,
                                             const absl::Status& status) {
  grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
  r->Finish(ToGrpcStatus(status));
  return r;
}

}  // namespace pitstop::controller

// The first thing every Controller call does: the role check of its method
// (ControllerService::Authorize), finishing the call when refused.
#define PITSTOP_AUTHORIZE(name)                                          \
  if (absl::Status st = Authorize(ctx, "/pitstop.v1.Controller/" #name); \
      !st.ok()) {                                                        \
    return FinishUnary(ctx, st);                                         \
  }

#endif  // PITSTOP_CONTROLLER_API_UNARY_CALL_H_
