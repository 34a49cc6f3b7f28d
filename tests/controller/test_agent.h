// A minimal agent for tests: one real AgentLink.Connect stream over
// loopback gRPC, a reader thread that keeps the commands the controller
// sends back.
#ifndef PITSTOP_TESTS_CONTROLLER_TEST_AGENT_H_
#define PITSTOP_TESTS_CONTROLLER_TEST_AGENT_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "pitstop/sync.h"
#include "pitstop/v1/agent.grpc.pb.h"

namespace pitstop::controller::testing {

// Thread-safe: Send from the test thread; the reader runs on its own.
class TestAgent {
 public:
  // Connects to `target` and sends `registration` as the first message.
  TestAgent(const std::string& target, const v1::NodeRegistration& reg);
  ~TestAgent();

  bool Send(const v1::ConnectRequest& batch);
  // Waits up to `timeout` until at least `n` commands arrived.
  std::vector<v1::AgentCommand> WaitForCommands(size_t n,
                                                absl::Duration timeout);
  // Half-closes and waits for the stream status.
  grpc::Status Close();

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::AgentLink::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<
      grpc::ClientReaderWriter<v1::ConnectRequest, v1::ConnectResponse>>
      stream_;
  std::thread reader_;
  Mutex mu_;
  CondVar cv_;
  std::vector<v1::AgentCommand> commands_ ABSL_GUARDED_BY(mu_);
  bool closed_ = false;
};

// A loopback channel with gRPC's default connect timeout (20 s): sanitizer
// builds on a loaded machine can miss pitstop::CreateChannel's 100 ms.
std::shared_ptr<grpc::Channel> TestChannel(const std::string& target);

// Waits (polling every 10 ms) up to `timeout` for `pred` to hold.
template <typename Pred>
bool WaitUntil(Pred pred, absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return pred();
}

}  // namespace pitstop::controller::testing

#endif  // PITSTOP_TESTS_CONTROLLER_TEST_AGENT_H_
