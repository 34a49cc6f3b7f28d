// Stream reactors of the controller's services (callback API).
#ifndef PITSTOP_CONTROLLER_API_STREAMS_H_
#define PITSTOP_CONTROLLER_API_STREAMS_H_

#include "grpcpp/grpcpp.h"
#include "pitstop/v1/agent.pb.h"
#include "pitstop/v1/controller.pb.h"
#include "src/controller/api/authorizer.h"

namespace pitstop::controller {

class Controller;
class FaultService;
class MigrationService;

// WatchFaults / WatchMigrations: subscribe to the fault (migration) event
// stream and write every change in order until the client cancels; refused
// on a follower and ended when this controller steps down (UNAVAILABLE
// naming the leader). Delete themselves when done.
grpc::ServerWriteReactor<v1::WatchFaultsResponse>* NewWatchReactor(
    FaultService* faults, const v1::WatchFaultsRequest& request);
grpc::ServerWriteReactor<v1::WatchMigrationsResponse>* NewMigrationWatchReactor(
    MigrationService* migration, const v1::WatchMigrationsRequest& request);

// AgentLink.Connect: the first message must carry `registration`
// (INVALID_ARGUMENT otherwise); later batches feed the controller; commands
// from it are written back (the reactor is the stream's CommandSink). Reads
// and writes serialized messages: a batch whose parse cost passes
// kMaxParsedBatchBytes (parse_cost.h) ends the stream unparsed with
// RESOURCE_EXHAUSTED, counted in refused_total{what="batch_parse_cost"}.
// Deletes itself when done.
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
NewAgentStreamReactor(Controller* controller);

// An authenticated agent stream: its registration.host must be one the
// caller's certificate (or token) names (Authorizer::CheckAgentHost),
// PERMISSION_DENIED otherwise. `ctx` is the stream's own context.
struct AgentStreamAuth {
  Authorizer* authorizer = nullptr;
  const grpc::CallbackServerContext* ctx = nullptr;
  Caller caller;
};
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
NewAgentStreamReactor(Controller* controller, AgentStreamAuth auth);

// Streams refused before they start: finish at once with `why`.
grpc::ServerWriteReactor<v1::WatchFaultsResponse>* NewRefusedWatchReactor(
    const absl::Status& why);
grpc::ServerWriteReactor<v1::WatchMigrationsResponse>*
NewRefusedMigrationWatchReactor(const absl::Status& why);
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
NewRefusedAgentStreamReactor(const absl::Status& why);

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_API_STREAMS_H_
