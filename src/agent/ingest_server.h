// The agent's ingest endpoint: gRPC service pitstop.v1.Telemetry on a Unix
// socket, one callback reactor per rank stream feeding AgentCore.
//
// Socket handling (Create): a stale socket file left by a crashed agent
// (connect() refused) is replaced; a live one (another agent accepts on it)
// is not stolen: FailedPrecondition. A path that exists and is not a socket
// is an error too. The socket is created with mode 0660 and, if given, the
// named group (NotFound for an unknown group). Stop() removes the file.
//
// Thread-safe; Stop() from the thread that owns the server.
#ifndef PITSTOP_AGENT_INGEST_SERVER_H_
#define PITSTOP_AGENT_INGEST_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "src/agent/agent_core.h"
#include "src/agent/ingest_listener.h"
#include "src/agent/peer_cred.h"

namespace pitstop::agent {

// Largest message a rank may send (the library's batches of 4096 records
// are well below 1 MiB); a larger one ends that stream with
// RESOURCE_EXHAUSTED.
inline constexpr int kMaxIngestMessageBytes = 4 << 20;
// Default cap on live rank connections (ingest.max_connections).
inline constexpr size_t kDefaultMaxConnections = 1024;
// Streams one connection may open at once.
inline constexpr int kMaxStreamsPerConnection = 16;

class IngestServer {
 public:
  // Binds `socket_path` (< 108 bytes) and starts serving `core`, with at
  // most `max_connections` live connections (see IngestListener), plus
  // `extra_services` (not owned; must outlive the server), e.g. the
  // TrainerService. With `verify_pid`, a telemetry stream whose hello
  // claims another pid than its connection's SO_PEERCRED process ends with
  // PERMISSION_DENIED (the daemon turns it on: ingest.verify_pid).
  // `creds` (optional, must outlive the server): where the connections'
  // SO_PEERCRED are recorded, for `extra_services` that check their
  // callers (TrainerServiceImpl); the server keeps its own when null.
  static absl::StatusOr<std::unique_ptr<IngestServer>> Create(
      const std::string& socket_path, const std::string& socket_group,
      AgentCore* core, size_t max_connections = kDefaultMaxConnections,
      const std::vector<grpc::Service*>& extra_services = {},
      bool verify_pid = false, PeerCredRegistry* creds = nullptr);
  ~IngestServer();

  // Marks the core stopping, ends all streams (waiting up to `grace` for
  // reactors to finish) and removes the socket file.
  // Ranks reconnect to the next agent, so the default grace is short.
  void Stop(absl::Duration grace = absl::Milliseconds(100));

  const std::string& socket_path() const { return socket_path_; }
  IngestListener::Stats listener_stats() const {
    return listener_ ? listener_->stats() : IngestListener::Stats{};
  }
  // Streams refused because their hello claimed another process's pid
  // than the connection's SO_PEERCRED.
  uint64_t pid_refusals() const { return pid_refusals_.load(); }
  // Messages refused before parsing: more than kMaxMessageObjects
  // (message_bound.h).
  uint64_t oversized_messages() const { return oversized_.load(); }

 private:
  class Service;
  IngestServer() = default;

  std::string socket_path_;
  AgentCore* core_ = nullptr;
  // Declared before service_ and listener_, which use them.
  PeerCredRegistry own_creds_;
  PeerCredRegistry* creds_ = &own_creds_;
  std::atomic<uint64_t> pid_refusals_{0};
  std::atomic<uint64_t> oversized_{0};
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<IngestListener> listener_;
  ino_t inode_ = 0;
  int lock_fd_ = -1;  // flock on socket_path_ + ".lock", held until Stop
  bool stopped_ = false;
};

// Removes `path` if it is a socket nobody accepts on. FailedPrecondition if
// a live server accepts there, or the path is not a socket.
absl::Status ClaimSocketPath(const std::string& path);

}  // namespace pitstop::agent

#endif  // PITSTOP_AGENT_INGEST_SERVER_H_
