// The gRPC shapes: a sync handler and a bidi reactor, each with a planted
// race or leak, served on loopback to client threads of the same process.
// Every handler and reaction runs with gRPC's (uninstrumented) frames below
// it, which is why a suppression that matches any frame of a stack hides
// these (docs/testing.md).
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "pitstop/v1/controller.grpc.pb.h"
#include "pitstop/v1/telemetry.grpc.pb.h"
#include "tests/sanitizers/canary_shapes.h"

namespace pitstop::canary {
namespace {

constexpr auto kPatience = std::chrono::seconds(20);
constexpr int kClients = 4;

// Notes the threads that ran the planted access, with relaxed atomics only:
// anything stronger would be a happens-before edge between the handlers and
// hide the very race it counts.
class ThreadSpread {
 public:
  void Note() {
    const pid_t me = gettid();
    pid_t first = 0;
    if (!first_.compare_exchange_strong(first, me, std::memory_order_relaxed) &&
        first != me) {
      two_threads_.store(true, std::memory_order_relaxed);
    }
  }
  bool two_threads() const {
    return two_threads_.load(std::memory_order_relaxed);
  }

 private:
  std::atomic<pid_t> first_{0};
  std::atomic<bool> two_threads_{false};
};

// Keeps the compiler from dropping an allocation nothing reads.
void Escape(void* p) { asm volatile("" : : "r"(p) : "memory"); }

struct Served {
  std::unique_ptr<grpc::Server> server;
  std::shared_ptr<grpc::Channel> channel;
};

Served Serve(grpc::Service* service) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(service);
  Served s;
  s.server = builder.BuildAndStart();
  s.channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                  grpc::InsecureChannelCredentials());
  return s;
}

// kClients threads run `call` until `done()` or kPatience has passed.
template <typename Call, typename Done>
void ClientThreads(Call call, Done done) {
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&] {
      while (!done() && std::chrono::steady_clock::now() < deadline) call();
    });
  }
  for (std::thread& t : clients) t.join();
}

bool GetStatus(const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = v1::Controller::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kPatience);
  v1::GetStatusResponse resp;
  return stub->GetStatus(&ctx, {}, &resp).ok();
}

// --- sync handler ----------------------------------------------------------

class RacySyncService final : public v1::Controller::Service {
 public:
  grpc::Status GetStatus(grpc::ServerContext*, const v1::GetStatusRequest*,
                         v1::GetStatusResponse*) override {
    calls_ = calls_ + 1;  // planted: handlers run on several threads
    spread_.Note();
    return grpc::Status::OK;
  }
  ThreadSpread spread_;

 private:
  int calls_ = 0;
};

class LeakySyncService final : public v1::Controller::Service {
 public:
  grpc::Status GetStatus(grpc::ServerContext*, const v1::GetStatusRequest*,
                         v1::GetStatusResponse*) override {
    auto* scratch = new std::vector<int>(100);  // planted: never freed
    Escape(scratch);
    return grpc::Status::OK;
  }
};

// --- bidi reactor ----------------------------------------------------------

using Req = v1::StreamTelemetryRequest;
using Resp = v1::StreamTelemetryResponse;

class ReactorService final : public v1::Telemetry::CallbackService {
 public:
  explicit ReactorService(bool leak) : leak_(leak) {}
  grpc::ServerBidiReactor<Req, Resp>* StreamTelemetry(
      grpc::CallbackServerContext*) override;

  const bool leak_;
  int batches_ = 0;  // planted: every stream's reactor adds, no lock
  ThreadSpread spread_;
};

// One stream. Deletes itself in OnDone, unless planted to leak.
class CanaryReactor final : public grpc::ServerBidiReactor<Req, Resp> {
 public:
  explicit CanaryReactor(ReactorService* service) : service_(service) {
    StartRead(&req_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::OK);
      return;
    }
    if (!service_->leak_) {
      service_->batches_ = service_->batches_ + 1;  // planted race
      service_->spread_.Note();
    }
    StartRead(&req_);
  }
  void OnDone() override {
    if (service_->leak_) return;  // planted leak: forgets `delete this`
    delete this;
  }

 private:
  ReactorService* const service_;
  Req req_;
};

grpc::ServerBidiReactor<Req, Resp>* ReactorService::StreamTelemetry(
    grpc::CallbackServerContext*) {
  return new CanaryReactor(this);
}

// One stream sending batches until `done()` (at least one batch); true
// when it ended OK.
template <typename Done>
bool SendBatches(const std::shared_ptr<grpc::Channel>& channel, Done done) {
  auto stub = v1::Telemetry::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kPatience);
  auto stream = stub->StreamTelemetry(&ctx);
  Req batch;
  batch.set_batch_seq(1);
  do {
    if (!stream->Write(batch)) break;
  } while (!done());
  stream->WritesDone();
  return stream->Finish().ok();
}

}  // namespace

int SyncHandlerRace() {
  RacySyncService service;
  Served s = Serve(&service);
  // Until TSan stops the program: gRPC's locks, which TSan sees, order
  // handlers that do not overlap, so it takes two that do.
  ClientThreads([&] { GetStatus(s.channel); }, [] { return false; });
  s.server->Shutdown();
  return service.spread_.two_threads() ? 0 : kNotExercised;
}

int HandlerLeak() {
  LeakySyncService service;
  Served s = Serve(&service);
  const bool ok = GetStatus(s.channel);
  s.server->Shutdown();
  return ok ? 0 : kNotExercised;
}

int ReactorRace() {
  ReactorService service(/*leak=*/false);
  Served s = Serve(&service);
  // Until TSan stops the program (see SyncHandlerRace); each stream sends
  // a few batches, then the client opens the next.
  ClientThreads(
      [&] { SendBatches(s.channel, [n = 0]() mutable { return ++n >= 8; }); },
      [] { return false; });
  s.server->Shutdown();
  return service.spread_.two_threads() ? 0 : kNotExercised;
}

int ReactorLeak() {
  ReactorService service(/*leak=*/true);
  Served s = Serve(&service);
  const bool ok = SendBatches(s.channel, [] { return true; });
  s.server->Shutdown();
  return ok ? 0 : kNotExercised;
}

}  // namespace pitstop::canary
