#include "tests/controller/test_agent.h"

namespace pitstop::controller::testing {

std::shared_ptr<grpc::Channel> TestChannel(const std::string& target) {
  return grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
}

TestAgent::TestAgent(const std::string& target, const v1::NodeRegistration& reg)
    : channel_(TestChannel(target)),
      stub_(v1::AgentLink::NewStub(channel_)),
      stream_(stub_->Connect(&ctx_)) {
  v1::ConnectRequest first;
  *first.mutable_registration() = reg;
  stream_->Write(first);
  reader_ = std::thread([this] {
    v1::ConnectResponse resp;
    while (stream_->Read(&resp)) {
      MutexLock lock(&mu_);
      for (const auto& c : resp.commands()) commands_.push_back(c);
      cv_.SignalAll();
    }
  });
}

TestAgent::~TestAgent() {
  if (!closed_) {
    ctx_.TryCancel();
    (void)Close();
  }
}

bool TestAgent::Send(const v1::ConnectRequest& batch) {
  return stream_->Write(batch);
}

std::vector<v1::AgentCommand> TestAgent::WaitForCommands(
    size_t n, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  MutexLock lock(&mu_);
  while (commands_.size() < n && absl::Now() < deadline) {
    cv_.WaitWithTimeout(&mu_, deadline - absl::Now());
  }
  return commands_;
}

grpc::Status TestAgent::Close() {
  closed_ = true;
  stream_->WritesDone();
  if (reader_.joinable()) reader_.join();
  return stream_->Finish();
}

}  // namespace pitstop::controller::testing
