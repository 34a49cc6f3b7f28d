// In-test stand-in for the in-process library before/besides the plugin: a
// real gRPC client of pitstop.v1.Telemetry on the agent's Unix socket that
// sends hand-made StreamTelemetryRequests and collects ActivationCommands.
#ifndef PITSTOP_TESTS_AGENT_FAKE_RANK_H_
#define PITSTOP_TESTS_AGENT_FAKE_RANK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "pitstop/sync.h"
#include "pitstop/v1/telemetry.grpc.pb.h"

namespace pitstop::agent::testing {

class FakeRank {
 public:
  // Opens a stream to unix:`socket_path` (does not send anything yet).
  // With `wait_for_ready` (the default) the stream waits out transient
  // connect failures; without it the stream fails if the first connection
  // attempt does, as a plain gRPC client's does.
  explicit FakeRank(const std::string& socket_path, bool wait_for_ready = true);
  ~FakeRank();  // Cancel() if still open

  // False when the stream is broken.
  bool Send(const v1::StreamTelemetryRequest& req);
  // Half-closes and returns the final status.
  grpc::Status Close();
  // Breaks the stream without goodbye (like a crash).
  void Cancel();

  bool WaitForActivation(absl::Duration timeout);
  std::vector<v1::ActivationCommand> activations();

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Telemetry::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::StreamTelemetryRequest,
                                           v1::StreamTelemetryResponse>>
      stream_;
  std::thread reader_;
  bool closed_ = false;
  Mutex mu_;
  CondVar cv_;
  std::vector<v1::ActivationCommand> activations_ ABSL_GUARDED_BY(mu_);
};

// Builders for telemetry messages of one emulated rank. The hello names
// the job the library would from this environment (PITSTOP_JOB_ID,
// SLURM_JOB_ID, TORCHELASTIC_RUN_ID, else "default").
v1::StreamTelemetryRequest MakeHello(uint32_t pid, int32_t global_rank,
                                     uint64_t comm_hash, int32_t rank,
                                     int32_t n_ranks);
// `n` complete AllReduce ops (OpRecord, 2 kernel channels, 2 proxy ops,
// completion) with seq numbers first_seq.., op ids = seq + 1; times are
// CLOCK_MONOTONIC now.
void AddCompleteOps(v1::StreamTelemetryRequest* req, uint64_t comm_hash,
                    int32_t rank, uint64_t first_seq, int n);
v1::StreamTelemetryRequest MakeGoodbye();

}  // namespace pitstop::agent::testing

#endif  // PITSTOP_TESTS_AGENT_FAKE_RANK_H_
