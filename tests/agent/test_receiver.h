// In-test pitstop.v1.AgentLink endpoint: a real gRPC server on 127.0.0.1
// (port 0) that records every ConnectRequest and can push commands down the
// current stream. Used by the agent's upstream and end-to-end tests and the
// agent benchmark.
#ifndef PITSTOP_TESTS_AGENT_TEST_RECEIVER_H_
#define PITSTOP_TESTS_AGENT_TEST_RECEIVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "pitstop/sync.h"
#include "pitstop/v1/agent.grpc.pb.h"

namespace pitstop::agent::testing {

class TestReceiver {
 public:
  // Listens on `address` ("127.0.0.1:0" picks a port).
  explicit TestReceiver(const std::string& address = "127.0.0.1:0");
  ~TestReceiver();  // Shutdown()

  // Stops the server (streams are cancelled).
  void Shutdown();
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  // Sends `cmd` on every open stream; false if none is open.
  bool SendCommand(const v1::AgentCommand& cmd);

  // Waits (up to `timeout`) until `pred` holds over the requests received so
  // far; returns whether it did.
  bool WaitUntil(
      const std::function<bool(const std::vector<v1::ConnectRequest>&)>& pred,
      absl::Duration timeout = absl::Seconds(20));
  std::vector<v1::ConnectRequest> requests();
  int streams_opened();
  // Calls `hook` for each request as it arrives, on the stream's thread
  // (benchmark latency). Call before the agent connects.
  void SetOnRequest(std::function<void(const v1::ConnectRequest&)> hook);

  class Service;

 private:
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// Helpers over received requests.
int CountSummaries(const std::vector<v1::ConnectRequest>& reqs);
int CountLifecycle(const std::vector<v1::ConnectRequest>& reqs,
                   v1::RankLifecycle::Kind kind);

}  // namespace pitstop::agent::testing

#endif  // PITSTOP_TESTS_AGENT_TEST_RECEIVER_H_
