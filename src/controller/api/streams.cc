#include "src/controller/api/streams.h"

#include <atomic>
#include <exception>
#include <string>

#include "absl/strings/str_cat.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "pitstop/grpc_util.h"
#include "pitstop/logging.h"
#include "pitstop/sync.h"
#include "src/controller/api/parse_cost.h"
#include "src/controller/api/write_queue.h"
#include "src/controller/controller.h"
#include "src/controller/faults/fault_service.h"
#include "src/controller/migration/migration_service.h"
#include "src/controller/nodes/command_sink.h"

namespace pitstop::controller {
namespace {

// A client's watch stream (WatchFaults, WatchMigrations): subscribes to the
// service's event stream and writes every change in order until the client
// cancels. A follower refuses it and a leader that steps down ends it, both
// with UNAVAILABLE naming the leader (SubscribeClient). Deletes itself when
// done.
template <typename Service, typename Response>
class ClientWatchReactor final : public grpc::ServerWriteReactor<Response> {
 public:
  ClientWatchReactor(Service* service, const std::string& job_id,
                     bool include_existing)
      : service_(service), out_(this) {
    absl::StatusOr<uint64_t> id = service_->SubscribeClient(
        job_id, include_existing,
        [this](const Response& r) { out_.Enqueue(r); },
        [this](const absl::Status& why) { out_.Finish(ToGrpcStatus(why)); });
    if (id.ok()) {
      id_ = *id;
    } else {
      out_.Finish(ToGrpcStatus(id.status()));
    }
  }
  void OnWriteDone(bool ok) override {
    if (!out_.WriteDone(ok)) out_.Finish(grpc::Status::CANCELLED);
  }
  void OnCancel() override { out_.Finish(grpc::Status::CANCELLED); }
  void OnDone() override {
    service_->Unsubscribe(id_);
    delete this;
  }

 private:
  Service* const service_;
  WriteQueue<ClientWatchReactor, Response> out_;
  uint64_t id_ = 0;
};

using FaultWatchReactor =
    ClientWatchReactor<FaultService, v1::WatchFaultsResponse>;
using MigrationWatchReactor =
    ClientWatchReactor<MigrationService, v1::WatchMigrationsResponse>;

class AgentStreamReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
      public CommandSink {
 public:
  AgentStreamReactor(Controller* controller, AgentStreamAuth auth)
      : controller_(controller), auth_(std::move(auth)), out_(this) {
    StartRead(&wire_);
  }
  void Send(const v1::ConnectResponse& response) override {
    grpc::ByteBuffer bytes;
    bool own = false;
    if (!grpc::SerializationTraits<v1::ConnectResponse>::Serialize(response,
                                                                   &bytes, &own)
             .ok()) {
      return;  // cannot happen for a message we built
    }
    out_.Enqueue(bytes);
  }
  void Close(const absl::Status& why) override {
    closed_.store(true);
    out_.Finish(ToGrpcStatus(why));
  }
  void OnReadDone(bool ok) override {
    if (!ok) {  // the agent closed its side (or the stream broke)
      out_.Finish(grpc::Status::OK);
      return;
    }
    if (closed_.load()) return;  // superseded or shed: no more reads
    // An exception must not escape into gRPC: the stream would never
    // finish and server shutdown would wait for it forever.
    try {
      if (!Parse()) return;
      HandleRequest();
    } catch (const std::exception& e) {
      Logger("controller")
          ->error("agent {}: internal error: {}", host_, e.what());
      out_.Finish(grpc::Status(grpc::StatusCode::INTERNAL,
                               absl::StrCat("controller: ", e.what())));
    }
  }
  void OnWriteDone(bool ok) override {
    if (!out_.WriteDone(ok)) out_.Finish(grpc::Status::CANCELLED);
  }
  void OnCancel() override { out_.Finish(grpc::Status::CANCELLED); }
  void OnDone() override {
    {
      MutexLock lock(&mu_);
      done_ = true;
      // A batch's completion still running (or its batch still queued in
      // the ingest inbox): the completion cleans up when it is done with
      // `this`.
      if (holds_ > 0) return;
    }
    End();
  }

 private:
  // The batch in wire_ into request_, when its parse cost is bounded
  // (parse_cost.h); else the stream ends and false.
  bool Parse() {
    request_.Clear();
    grpc::ProtoBufferReader reader(&wire_);
    absl::StatusOr<uint64_t> cost =
        ParsedBytes(v1::ConnectRequest::descriptor(), &reader);
    if (cost.ok() && *cost > kMaxParsedBatchBytes) {
      controller_->BatchRefused();
      Logger("controller")
          ->warn(
              "agent {}: batch of {} bytes would take ~{} MiB parsed: "
              "refused, stream ended",
              host_, wire_.Length(), *cost >> 20);
      out_.Finish(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("ConnectRequest of ", wire_.Length(),
                       " bytes would take ~", *cost >> 20,
                       " MiB parsed, more than the controller's ",
                       kMaxParsedBatchBytes >> 20, " MiB per batch")));
      return false;
    }
    grpc::Status st =
        cost.ok() ? grpc::SerializationTraits<v1::ConnectRequest>::Deserialize(
                        &wire_, &request_)
                  : ToGrpcStatus(cost.status());
    if (!st.ok()) {
      out_.Finish(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, st.error_message()));
      return false;
    }
    return true;
  }

  // After OnDone and the last batch's completion, whichever comes last.
  void End() {
    if (session_ != 0) controller_->AgentDisconnected(session_);
    delete this;
  }

  void HandleRequest() {
    if (session_ == 0) {
      if (!request_.has_registration()) {
        out_.Finish(grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            "registration: the first ConnectRequest must carry it"));
        return;
      }
      if (auth_.authorizer != nullptr) {
        // An agent speaks only for the host its certificate names.
        absl::Status allowed = auth_.authorizer->CheckAgentHost(
            *auth_.ctx, auth_.caller, request_.registration().host());
        if (!allowed.ok()) {
          out_.Finish(ToGrpcStatus(allowed));
          return;
        }
      }
      absl::StatusOr<uint64_t> s =
          controller_->AgentConnected(request_.registration(), this);
      if (!s.ok()) {  // INVALID_ARGUMENT, ALREADY_EXISTS, RESOURCE_EXHAUSTED
        out_.Finish(ToGrpcStatus(s.status()));
        return;
      }
      session_ = *s;
      host_ = request_.registration().host();
    }
    {
      MutexLock lock(&mu_);
      ++holds_;
    }
    // The next read starts from the completion (at once when the ingest
    // lock is free, else when the batch has been joined): one batch per
    // stream in flight, and its status handled as if joined at once.
    controller_->SubmitAgentBatch(session_, &request_,
                                  [this](absl::Status st) { BatchDone(st); });
  }

  // The batch's completion. Its hold (holds_) is kept until it is done
  // with `this`: OnDone may run on another thread as soon as no read is
  // outstanding (a cancel racing the completion), and it must not delete
  // the reactor under it (it did: "pure virtual method called" under TSan,
  // 1 run in 5 of IngestStreamTest.StreamEndingWhileItsBatchIsQueued).
  void BatchDone(const absl::Status& st) {
    bool ended;
    {
      MutexLock lock(&mu_);
      ended = done_;
    }
    if (!ended) Continue(st);
    {
      MutexLock lock(&mu_);
      // A read started by Continue() may already have brought the next
      // batch (HandleRequest took a hold for it): only this completion's
      // hold is given back.
      if (--holds_ > 0) return;
      ended = done_;
    }
    if (ended) End();  // the stream ended while its batch was queued
  }

  // After a batch while the stream is open: end it or read the next one.
  void Continue(const absl::Status& st) {
    if (absl::IsFailedPrecondition(st) || closed_.load()) {
      // The session was superseded or shed: end the stream so the agent
      // reconnects instead of sending into the void.
      out_.Finish(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                               std::string(st.message())));
      return;
    }
    // Invalid records are skipped (the rest of the batch is used); log the
    // first and then every 1000th so one bad agent cannot flood the log.
    if (!st.ok() && invalid_batches_++ % 1000 == 0) {
      Logger("controller")
          ->warn("agent {}: {} ({} batches with invalid records so far)", host_,
                 st.ToString(), invalid_batches_);
    }
    // Not after Finish (a cancel or a Close on another thread).
    (void)out_.UnlessFinished([this] {
      wire_.Clear();
      StartRead(&wire_);
    });
  }

  Controller* const controller_;
  const AgentStreamAuth auth_;
  WriteQueue<AgentStreamReactor, grpc::ByteBuffer> out_;
  grpc::ByteBuffer wire_;       // the batch read
  v1::ConnectRequest request_;  // parsed from wire_ (Parse)
  uint64_t session_ = 0;
  std::atomic<bool> closed_{false};
  uint64_t invalid_batches_ = 0;
  std::string host_;
  Mutex mu_;
  // Batches submitted whose completion has not finished with `this`.
  int holds_ ABSL_GUARDED_BY(mu_) = 0;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

// A stream refused before it started (PERMISSION_DENIED): finishes at once.
template <typename Base>
class RefusedReactor final : public Base {
 public:
  explicit RefusedReactor(const absl::Status& why) {
    this->Finish(ToGrpcStatus(why));
  }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerWriteReactor<v1::WatchFaultsResponse>* NewRefusedWatchReactor(
    const absl::Status& why) {
  return new RefusedReactor<grpc::ServerWriteReactor<v1::WatchFaultsResponse>>(
      why);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
NewRefusedAgentStreamReactor(const absl::Status& why) {
  return new RefusedReactor<
      grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>>(why);
}

grpc::ServerWriteReactor<v1::WatchMigrationsResponse>*
NewRefusedMigrationWatchReactor(const absl::Status& why) {
  return new RefusedReactor<
      grpc::ServerWriteReactor<v1::WatchMigrationsResponse>>(why);
}

grpc::ServerWriteReactor<v1::WatchFaultsResponse>* NewWatchReactor(
    FaultService* faults, const v1::WatchFaultsRequest& request) {
  return new FaultWatchReactor(faults, request.job_id(),
                               request.include_existing());
}

grpc::ServerWriteReactor<v1::WatchMigrationsResponse>* NewMigrationWatchReactor(
    MigrationService* migration, const v1::WatchMigrationsRequest& request) {
  return new MigrationWatchReactor(migration, request.job_id(),
                                   request.include_existing());
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
NewAgentStreamReactor(Controller* controller) {
  return new AgentStreamReactor(controller, AgentStreamAuth{});
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
NewAgentStreamReactor(Controller* controller, AgentStreamAuth auth) {
  return new AgentStreamReactor(controller, std::move(auth));
}

}  // namespace pitstop::controller
