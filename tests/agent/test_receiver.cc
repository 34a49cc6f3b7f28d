#include "tests/agent/test_receiver.h"

#include <set>

namespace pitstop::agent::testing {

class TestReceiver::Service final : public v1::AgentLink::Service {
 public:
  grpc::Status Connect(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::ConnectResponse, v1::ConnectRequest>* stream)
      override {
    {
      MutexLock lock(&mu_);
      streams_.insert(stream);
      ++opened_;
    }
    v1::ConnectRequest req;
    while (stream->Read(&req)) {
      if (hook_) hook_(req);
      MutexLock lock(&mu_);
      reqs_.push_back(req);
      cv_.SignalAll();
    }
    MutexLock lock(&mu_);
    streams_.erase(stream);
    return grpc::Status::OK;
  }

  Mutex mu_;
  CondVar cv_;
  std::vector<v1::ConnectRequest> reqs_ ABSL_GUARDED_BY(mu_);
  std::set<grpc::ServerReaderWriter<v1::ConnectResponse, v1::ConnectRequest>*>
      streams_ ABSL_GUARDED_BY(mu_);
  int opened_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<void(const v1::ConnectRequest&)> hook_;
};

TestReceiver::TestReceiver(const std::string& address)
    : service_(std::make_unique<Service>()) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(service_.get());
  builder.SetMaxReceiveMessageSize(64 << 20);
  server_ = builder.BuildAndStart();
}

TestReceiver::~TestReceiver() { Shutdown(); }

void TestReceiver::Shutdown() {
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
  server_.reset();
}

bool TestReceiver::SendCommand(const v1::AgentCommand& cmd) {
  MutexLock lock(&service_->mu_);
  v1::ConnectResponse resp;
  *resp.add_commands() = cmd;
  bool sent = false;
  for (auto* s : service_->streams_) sent |= s->Write(resp);
  return sent;
}

bool TestReceiver::WaitUntil(
    const std::function<bool(const std::vector<v1::ConnectRequest>&)>& pred,
    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  MutexLock lock(&service_->mu_);
  while (!pred(service_->reqs_)) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    service_->cv_.WaitWithTimeout(&service_->mu_, left);
  }
  return true;
}

void TestReceiver::SetOnRequest(
    std::function<void(const v1::ConnectRequest&)> hook) {
  service_->hook_ = std::move(hook);
}

std::vector<v1::ConnectRequest> TestReceiver::requests() {
  MutexLock lock(&service_->mu_);
  return service_->reqs_;
}

int TestReceiver::streams_opened() {
  MutexLock lock(&service_->mu_);
  return service_->opened_;
}

int CountSummaries(const std::vector<v1::ConnectRequest>& reqs) {
  int n = 0;
  for (const auto& r : reqs) n += r.summaries_size();
  return n;
}

int CountLifecycle(const std::vector<v1::ConnectRequest>& reqs,
                   v1::RankLifecycle::Kind kind) {
  int n = 0;
  for (const auto& r : reqs) {
    for (const auto& l : r.lifecycle()) n += l.kind() == kind;
  }
  return n;
}

}  // namespace pitstop::agent::testing
