// Accepts rank connections on the agent's Unix socket and hands each one to
// the gRPC server (grpc::AddInsecureChannelFromFd), so that the agent, not
// gRPC, decides what happens when too many connect or descriptors run out:
//
//  - At most `max_connections` live connections; one more is accepted and
//    closed at once (counted in refused_cap): the library's reconnect
//    backoff retries later, the agent stays responsive.
//  - accept() failing with EMFILE/ENFILE: a reserved descriptor is released
//    to accept and close the waiting connection (counted in refused_fds),
//    then taken again, and accepting pauses for 100 ms. The listener never
//    stops; it accepts again as soon as descriptors are free. (gRPC 1.51's
//    own listener logs "Failed accept4" and stops listening for good.)
//  - Idle connections (no stream) are closed by gRPC after
//    kIdleConnectionMs (GRPC_ARG_MAX_CONNECTION_IDLE_MS, set by the server).
//
// gRPC owns and closes every descriptor handed over. To know how many are
// still open, the listener remembers (fd, inode) of each and, every 500 ms
// and when the cap is reached, forgets those whose fd is closed or now
// names another file, reading /proc/self/fd (never calling a descriptor
// function on a number gRPC may have closed and another thread reused).
//
// Thread-safe: one thread of its own; stats() from any thread.
#ifndef PITSTOP_AGENT_INGEST_LISTENER_H_
#define PITSTOP_AGENT_INGEST_LISTENER_H_

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "src/agent/peer_cred.h"

namespace pitstop::agent {

// Connections without a stream are closed after this long (ms).
inline constexpr int kIdleConnectionMs = 30'000;
// A connection must finish the HTTP/2 handshake within this (ms).
inline constexpr int kHandshakeTimeoutMs = 5'000;

class IngestListener {
 public:
  struct Stats {
    uint64_t accepted = 0;
    uint64_t refused_cap = 0;  // beyond max_connections
    uint64_t refused_fds = 0;  // accept() ran out of descriptors
    size_t live = 0;           // connections handed over and still open
  };

  // Takes ownership of `listen_fd` (bound, listening, non-blocking). The
  // server must be started and outlive the listener.
  // With `creds` (not owned, outlives the listener), each accepted
  // connection's SO_PEERCRED is recorded there before gRPC gets it.
  static absl::StatusOr<std::unique_ptr<IngestListener>> Create(
      int listen_fd, grpc::Server* server, size_t max_connections,
      PeerCredRegistry* creds = nullptr);
  ~IngestListener();

  // Stops accepting and closes the listening socket. Idempotent.
  void Stop();
  Stats stats() const;

 private:
  IngestListener(int listen_fd, int wake_fd, int reserve_fd,
                 grpc::Server* server, size_t max_connections,
                 PeerCredRegistry* creds);
  void Loop();
  void AcceptReady();
  // Accepts the waiting connection with the reserved descriptor and closes
  // it (out of descriptors).
  void ShedWithReserve();
  void Sweep();
  // Waits up to `ms` for Stop(); true when stopping.
  bool Pause(int ms);

  const int listen_fd_;
  const int wake_fd_;
  int reserve_fd_;
  grpc::Server* const server_;
  PeerCredRegistry* const creds_;
  const size_t max_connections_;
  // fd -> inode of the connections handed over (listener thread only).
  absl::flat_hash_map<int, ino_t> live_;
  std::atomic<uint64_t> accepted_{0};
  std::atomic<uint64_t> refused_cap_{0};
  std::atomic<uint64_t> refused_fds_{0};
  std::atomic<size_t> live_count_{0};
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace pitstop::agent

#endif  // PITSTOP_AGENT_INGEST_LISTENER_H_
