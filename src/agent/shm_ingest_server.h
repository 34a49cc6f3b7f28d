// The agent's telemetry endpoint for the in-process library
// (include/pitstop/shm_transport.h, docs/agent.md "Shared-memory ingest"):
// a Unix socket where each training process sends a Hello with the memfd of
// its shared ring, then heartbeats and a goodbye; the agent maps the ring and
// reads StreamTelemetryRequest messages from it, and sends activation
// commands back as frames. One thread serves every connection (poll()), so
// the agent's cost per record is a protobuf parse and the join, not a gRPC
// stream.
//
// Robustness: everything a process sends is checked (frame sizes, the
// memfd's seals and size, ring positions and message sizes); a violation
// closes that connection only, with one log line naming the peer (pid, uid)
// and the offset. Connections beyond max_connections are refused at accept
// (one log line per burst); connections silent for idle_timeout_ms are shed
// (the process reconnects). After a goodbye or EOF the ring is read to the
// end before the stream is closed, so what a process wrote before exit() or a
// crash still arrives.
//
// Thread-safe: Create/Stop from the owner thread; the handler is called on
// the server's thread only; CommandSink::SendResponse from any thread.
#ifndef PITSTOP_AGENT_SHM_INGEST_SERVER_H_
#define PITSTOP_AGENT_SHM_INGEST_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pitstop/shm_transport.h"
#include "pitstop/v1/telemetry.pb.h"
#include "src/agent/agent_core.h"

namespace pitstop::agent {

// Where the server delivers streams. AgentCoreHandler (below) feeds the
// agent; tests record batches. Called on the server thread only.
class ShmStreamHandler {
 public:
  virtual ~ShmStreamHandler() = default;
  // A process said hello; `sink` stays valid until Close returns. `who`:
  // the process as the kernel knows it (unknown without verify_pid).
  virtual uint64_t Open(CommandSink* sink, const ProcessIdentity& who) = 0;
  // One message read from the ring. An error closes the connection.
  virtual absl::Status OnMessage(uint64_t stream,
                                 const v1::StreamTelemetryRequest& request) = 0;
  // The stream ended (goodbye, EOF, error, shed, agent stop).
  virtual void Close(uint64_t stream) = 0;
  // After Open: the process's hello (a 0.1 library's 40-byte hello has
  // records_delivered and counters_start_unix_ns 0).
  virtual void OnHello(uint64_t stream, const shm::HelloFrame& hello) {
    (void)stream;
    (void)hello;
  }
  // The process's cumulative counters (hello, heartbeat, goodbye).
  virtual void OnCounters(uint64_t stream, const shm::Counters& counters) {
    (void)stream;
    (void)counters;
  }
  // `records` more records were read from the ring and acknowledged to the
  // process (after OnMessage of the messages carrying them).
  virtual void OnRecordsRead(uint64_t stream, uint64_t records) {
    (void)stream;
    (void)records;
  }
};

class AgentCoreHandler : public ShmStreamHandler {
 public:
  explicit AgentCoreHandler(AgentCore* core) : core_(core) {}
  uint64_t Open(CommandSink* sink, const ProcessIdentity& who) override {
    return core_->OpenStream(sink, who);
  }
  absl::Status OnMessage(uint64_t stream,
                         const v1::StreamTelemetryRequest& request) override {
    return core_->OnMessage(stream, request);
  }
  void Close(uint64_t stream) override {
    core_->process_ledger()->Closed(stream);
    core_->CloseStream(stream);
  }
  void OnHello(uint64_t stream, const shm::HelloFrame& hello) override {
    // Keyed as the progress it annotates is: by the process's pid on this
    // host, not the one its hello names (R18-2).
    shm::HelloFrame h = hello;
    h.pid = core_->ReportedPid(stream, hello.pid);
    core_->process_ledger()->Hello(stream, h);
  }
  void OnCounters(uint64_t stream, const shm::Counters& counters) override {
    core_->process_ledger()->Counters(stream, counters);
  }
  void OnRecordsRead(uint64_t stream, uint64_t records) override {
    core_->process_ledger()->RecordsRead(stream, records);
  }

 private:
  AgentCore* const core_;
};

struct ShmIngestOptions {
  std::string socket_path;   // < 108 bytes
  std::string socket_group;  // empty = the agent's group; mode 0660
  uint32_t max_connections = 1024;
  // A connection with no frame for this long is closed (processes send a
  // heartbeat every second); one without hello after 5 s too.
  uint32_t idle_timeout_ms = 30000;
  // How often rings are read when no frame wakes the thread.
  uint32_t poll_interval_ms = 2;
  // Refuse a connection whose hello claims another pid than its
  // SO_PEERCRED process (the daemon sets ingest.verify_pid, default on).
  bool verify_pid = false;
};

struct ShmIngestStats {
  uint64_t accepted = 0;
  uint64_t refused = 0;  // over max_connections, or out of descriptors
  uint64_t malformed = 0;
  uint64_t shed_idle = 0;
  uint64_t pid_refused = 0;  // hello.pid was not the connected process
  // Ring messages of more than kMaxMessageObjects, refused before parsing
  // (the connection is closed; also counted in malformed).
  uint64_t oversized = 0;
  uint64_t messages = 0;
  uint64_t records = 0;
  uint64_t bytes = 0;
};

class ShmIngestServer {
 public:
  // Binds the socket (stale file replaced, live one or one whose
  // PATH.lock another agent holds refused: FailedPrecondition) and starts
  // the thread. `handler` must outlive the server.
  static absl::StatusOr<std::unique_ptr<ShmIngestServer>> Create(
      const ShmIngestOptions& options, ShmStreamHandler* handler);
  ~ShmIngestServer();  // Stop()

  // Stops accepting, reads every ring to its end, closes every stream and
  // removes the socket file. Idempotent.
  void Stop();
  // Closes every connection at once without reading the rings further and
  // without removing anything: a killed agent, for tests.
  void Kill();

  const std::string& socket_path() const { return options_.socket_path; }
  ShmIngestStats stats() const;
  int connections() const { return connections_.load(); }

  class Conn;

 private:
  ShmIngestServer() = default;
  void Run();
  void Wake();

  ShmIngestOptions options_;
  ShmStreamHandler* handler_ = nullptr;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: activations queued, stop
  int lock_fd_ = -1;
  int reserve_fd_ = -1;  // /dev/null, spent to shed when out of descriptors
  ino_t inode_ = 0;
  std::atomic<int> stop_{0};  // 1 = graceful, 2 = kill
  std::atomic<int> connections_{0};
  mutable Mutex stats_mu_;
  ShmIngestStats stats_ ABSL_GUARDED_BY(stats_mu_);
  std::thread thread_;
  bool stopped_ = false;

  friend class Conn;
  struct Loop;
};

}  // namespace pitstop::agent

#endif  // PITSTOP_AGENT_SHM_INGEST_SERVER_H_
