// The agent's real shared-memory ingest server (src/agent/
// shm_ingest_server.h) on a Unix socket, standing in for the node agent in
// tests: records every batch of every stream, can send activation commands
// and migration directives, and can be shut down (killed) and started again
// on the same path.
//
// Thread-safe; batches are appended from the server's thread.
#ifndef PITSTOP_TESTS_HARNESS_TELEMETRY_RECEIVER_H_
#define PITSTOP_TESTS_HARNESS_TELEMETRY_RECEIVER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pitstop/v1/telemetry.pb.h"

namespace pitstop::agent {
class ShmIngestServer;
}

namespace pitstop::emu {

struct ReceivedStream {
  std::vector<v1::StreamTelemetryRequest> batches;
  bool ended = false;  // client half-closed or the call finished
};

class TelemetryReceiver {
 public:
  // Listens on unix:`socket_path` (removed first if it exists). With
  // keep_batches false only the counters below are kept (benchmarks).
  static absl::StatusOr<std::unique_ptr<TelemetryReceiver>> Start(
      const std::string& socket_path, bool keep_batches = true);
  ~TelemetryReceiver();  // Shutdown()

  // Stops the server at once, closing open connections without reading
  // their rings further (like a killed agent).
  void Shutdown();
  agent::ShmIngestServer* server();

  std::vector<ReceivedStream> Streams() const;
  // Waits until pred(Streams()) holds; false on timeout.
  bool WaitFor(
      const std::function<bool(const std::vector<ReceivedStream>&)>& pred,
      absl::Duration timeout) const;
  // Sends `cmd` on every open stream. Returns how many got it.
  int SendActivation(const v1::ActivationCommand& cmd);
  // Sends a migration directive on stream `index` (of Streams()); false when
  // that stream is not open. The agent's part in a migration, played by a
  // test.
  bool SendDirective(size_t index, const v1::RankMigrationDirective& d);
  // Records (ops, completions, kernel channels, proxy ops/steps, net
  // events) and serialized bytes received so far, over all streams.
  uint64_t records_received() const;
  uint64_t bytes_received() const;

  struct Impl;

 private:
  explicit TelemetryReceiver(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Helpers over received streams.
// All records of one kind over all batches of all streams.
std::vector<v1::OpRecord> AllOps(const std::vector<ReceivedStream>& s);
std::vector<v1::OpCompletion> AllCompletions(
    const std::vector<ReceivedStream>& s);
std::vector<v1::KernelChannelRecord> AllKernels(
    const std::vector<ReceivedStream>& s);
std::vector<v1::ProxyOpRecord> AllProxyOps(
    const std::vector<ReceivedStream>& s);
std::vector<v1::ProxyStepRecord> AllProxySteps(
    const std::vector<ReceivedStream>& s);
std::vector<v1::NetPluginRecord> AllNetEvents(
    const std::vector<ReceivedStream>& s);
std::vector<v1::CommunicatorEvent> AllCommEvents(
    const std::vector<ReceivedStream>& s);
std::vector<v1::RankMigrationAck> AllMigrationAcks(const ReceivedStream& s);
// The last DropCounters seen (cumulative), and whether any goodbye arrived.
v1::DropCounters LastDrops(const std::vector<ReceivedStream>& s);
bool HasGoodbye(const std::vector<ReceivedStream>& s,
                v1::ProcessGoodbye::Reason reason);

}  // namespace pitstop::emu

#endif  // PITSTOP_TESTS_HARNESS_TELEMETRY_RECEIVER_H_
