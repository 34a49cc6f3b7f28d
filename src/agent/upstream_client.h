// The agent's stream to the controller (pitstop.v1.AgentLink.Connect).
//
// One thread keeps the stream: connect, send NodeRegistration and every
// known communicator, then every `batch` a ConnectRequest with RankProgress
// for every local (comm, rank, func), lifecycle events, aggregates, counters
// and up to kMaxSummariesPerMessage summaries (more messages follow at once
// when more are queued, and a full message's worth goes out without waiting
// for the period). A second thread reads commands: SetActivationMask
// is applied through AgentCore (and acked), ping answered with pong. On any
// failure the stream is dropped and re-established with exponential backoff
// (100 ms .. backoff_max); meanwhile AgentCore's bounded buffer holds
// summaries, then aggregates.
//
// Start/Stop from one owner thread. Stop() sends a last batch (flush) and
// half-closes the stream.
#ifndef PITSTOP_AGENT_UPSTREAM_CLIENT_H_
#define PITSTOP_AGENT_UPSTREAM_CLIENT_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "pitstop/clock.h"
#include "pitstop/sync.h"
#include "pitstop/tls.h"
#include "pitstop/v1/agent.pb.h"
#include "src/agent/agent_core.h"
#include "src/agent/migration_plane.h"
#include "src/agent/path_steering.h"
#include "src/agent/trainer_hub.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace pitstop::agent {

struct UpstreamOptions {
  // host:port or unix:PATH, or several controllers "a:7070,b:7070": the
  // agent follows the leader (a follower's refusal names it, otherwise the
  // next address is tried).
  std::string address;
  // Mutual TLS towards the controller (empty = plaintext). The files are
  // read again for every new connection, so renewed certificates apply.
  TlsFiles tls;
  absl::Duration batch = absl::Seconds(1);
  absl::Duration backoff_max = absl::Seconds(5);
  v1::NodeRegistration registration;
  // Trainer step reports go up with every batch, directives come down
  // (optional, not owned).
  TrainerHub* trainer = nullptr;
  // Migration directives go here (optional, not owned); its answers go up
  // through Ack().
  MigrationPlane* migration = nullptr;
  // Flow-plan directives go here (optional, not owned); acked once applied.
  PathSteering* paths = nullptr;
};

// OK for "" (no upstream), host:port (port 1..65535), unix:PATH or a
// comma-separated list of host:port / unix:PATH;
// InvalidArgument naming `controller` otherwise.
absl::Status ValidateControllerAddress(const std::string& address);

class UpstreamClient {
 public:
  static constexpr int kMaxSummariesPerMessage = 8192;

  UpstreamClient(UpstreamOptions options, AgentCore* core);
  ~UpstreamClient();  // Stop()

  void Start();
  // Flushes what is queued (if connected) and ends the stream.
  void Stop();

  bool connected() const { return connected_.load(); }
  // Queues a migration answer for the next batch (sent at once). Any
  // thread; does not block.
  void Ack(const v1::MigrationAck& ack);
  uint64_t connects() const { return connects_.load(); }
  // Not OK once the controller refused this agent for good: its
  // registration was INVALID_ARGUMENT (a bad host name, ...) or
  // PERMISSION_DENIED (a certificate or token that may not speak for
  // registration.host). Retrying cannot help, so the client stops and the
  // agent exits (main.cc) instead of retrying forever. Any thread.
  absl::Status refused() const;
  // Commands received again after they were applied (the controller
  // re-sends what it has no ack for to a reconnected stream): acked again,
  // not applied again.
  uint64_t duplicate_commands() const { return duplicates_.load(); }

 private:
  // Remembers the ids of applied commands (the newest kAppliedIds), so a
  // re-sent one is acked without being applied twice.
  static constexpr size_t kAppliedIds = 4096;
  bool Applied(uint64_t id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return applied_.count(id) > 0;
  }
  void MarkApplied(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run();
  // One connection; returns when it breaks or Stop() was called, with how
  // long it was connected (0 = never connected).
  absl::Duration RunStream(const std::string& address);
  // RunStream's steps (upstream_client.cc). A channel to `address` that is
  // READY; null when it is not within kConnectTimeout (at once for a
  // refused connection when there are several controllers) or Stop() was
  // called.
  std::shared_ptr<grpc::Channel> ConnectChannel(const std::string& address);
  // One command the controller wrote (the stream's reader thread).
  void HandleCommand(const v1::AgentCommand& cmd);
  // Writes a batch every batch period (sooner with a backlog, acks or a
  // pong pending) until a write fails, the server ends the stream or
  // Stop(); returns whether it stopped for Stop().
  bool SendBatches(const std::function<bool(const v1::ConnectRequest&)>& write,
                   const std::atomic<bool>& server_ended);
  // Waits up to `d` unless stopping, a pong/ack is pending or (with
  // `wake_on_backlog`) a full message of summaries is queued; true if
  // stopping.
  bool WaitFor(absl::Duration d, bool wake_on_backlog);
  // A full message of summaries is queued.
  bool Backlog() const;

  const UpstreamOptions options_;
  AgentCore* const core_;
  std::thread thread_;
  std::atomic<bool> connected_{false};
  std::atomic<uint64_t> connects_{0};
  std::atomic<uint64_t> duplicates_{0};
  std::string last_error_;  // how the last stream ended (Run's thread only)
  int last_code_ = 0;       // its grpc::StatusCode (Run's thread only)
  mutable Mutex mu_;
  CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status refused_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> acks_ ABSL_GUARDED_BY(mu_);
  uint64_t pong_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<v1::MigrationAck> migration_acks_ ABSL_GUARDED_BY(mu_);
  std::set<uint64_t> applied_ ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> applied_order_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pitstop::agent

#endif  // PITSTOP_AGENT_UPSTREAM_CLIENT_H_
