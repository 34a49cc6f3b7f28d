// Internal to ShmIngestServer (shm_ingest_server.h): one process's
// connection and the server thread's state, whose steps are split by what
// they read: shm_ingest_server.cc (connections and the poll loop),
// shm_ingest_frames.cc (the control socket: frames, the hello, the ring's
// mapping) and shm_ingest_ring.cc (ring messages). Not part of the agent's
// API; included by those files only.
#ifndef PITSTOP_AGENT_SHM_INGEST_LOOP_H_
#define PITSTOP_AGENT_SHM_INGEST_LOOP_H_

#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pitstop/logging.h"
#include "pitstop/shm_transport.h"
#include "pitstop/sync.h"
#include "pitstop/v1/telemetry.pb.h"
#include "src/agent/peer_cred.h"
#include "src/agent/shm_ingest_server.h"

namespace pitstop::agent {

// One process's connection. Owned by the server thread; SendResponse may
// come from any thread (AgentCore's command routing).
class ShmIngestServer::Conn final : public CommandSink {
 public:
  // Outgoing frames (activations) kept while the process does not read.
  static constexpr size_t kMaxOutBytes = 256 * 1024;

  Conn(ShmIngestServer* server, int fd, std::string peer)
      : server_(server), fd_(fd), peer_(std::move(peer)) {}
  ~Conn() override {
    if (fd_ >= 0) close(fd_);
    if (map_ != nullptr) munmap(map_, map_bytes_);
  }

  void SendResponse(const v1::StreamTelemetryResponse& r) override {
    const std::string body = r.SerializeAsString();
    const shm::FrameHeader fh{static_cast<uint32_t>(body.size()),
                              shm::kFrameActivation, 0};
    {
      MutexLock lock(&out_mu_);
      if (out_.size() + sizeof(fh) + body.size() > kMaxOutBytes) return;
      out_.append(reinterpret_cast<const char*>(&fh), sizeof(fh));
      out_.append(body);
    }
    server_->Wake();
  }

  ShmIngestServer* const server_;
  int fd_;
  const std::string peer_;  // "pid P uid U" from SO_PEERCRED
  PeerCred peer_cred_;
  uint32_t hello_pid_ = 0;
  uint64_t stream_ = 0;
  bool opened_ = false;
  bool goodbye_ = false;
  bool eof_ = false;
  bool backlog_ = false;  // the last pass left messages in the ring
  uint64_t connected_ns_ = 0;
  uint64_t last_frame_ns_ = 0;
  shm::Counters counters_{};
  // The ring.
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  shm::RingHeader* header_ = nullptr;
  const char* data_ = nullptr;
  uint64_t ring_bytes_ = 0;
  uint64_t read_pos_ = 0;
  uint64_t records_read_ = 0;
  // Control stream.
  std::string in_;
  uint64_t in_offset_ = 0;
  Mutex out_mu_;
  std::string out_ ABSL_GUARDED_BY(out_mu_);
};

// The server thread's state and steps.
struct ShmIngestServer::Loop {
  // A connection without hello after this long is closed.
  static constexpr uint64_t kHelloTimeoutNs = 5'000'000'000ull;
  // Bytes and message objects (records, communicator events) read from one
  // ring per pass, so one busy or hostile rank cannot starve the others: a
  // 16 MiB ring of empty records (2 bytes each) once took the thread 10 s
  // while another job's ring went unread (issue #33 F7). 65536 objects are
  // 16 of the library's batches, parsed in milliseconds.
  static constexpr uint64_t kMaxBytesPerPass = 8ull << 20;
  static constexpr uint64_t kMaxObjectsPerPass = 65536;
  static constexpr uint64_t kUnbounded = ~uint64_t{0};
  // A message of more objects than this is not kept for reuse (a cleared
  // repeated field keeps its elements allocated).
  static constexpr uint64_t kReusedObjects = 8192;
  // A copy buffer larger than this is given back after its message.
  static constexpr size_t kReusedCopyBytes = 1 << 20;
  // How long accepting pauses when the process is out of descriptors.
  static constexpr uint64_t kOutOfFdsPauseNs = 100'000'000ull;

  static uint64_t MonoNs();
  static std::shared_ptr<spdlog::logger> Log();

  ShmIngestServer* s;
  std::vector<std::unique_ptr<Conn>> conns;
  v1::StreamTelemetryRequest req;
  uint64_t refused_logged_ns = 0;
  uint64_t fds_logged_ns = 0;
  uint64_t accept_paused_until_ns = 0;
  bool backlog = false;  // a ring has more to read: poll without waiting
  // The message being read, copied out of the process's ring first: the
  // process can still write its mapping, so bytes counted there could
  // differ from the bytes then parsed (a double fetch: the count admitted
  // one object and the parse found millions, or protobuf's own checks
  // aborted the agent; attacker round 18, R18-1).
  std::string message_copy;

  // shm_ingest_server.cc: connections and the poll loop.
  void Count(uint64_t ShmIngestStats::*field, uint64_t n = 1);
  // Out of descriptors (EMFILE/ENFILE, or kernel memory): the waiting
  // connection stays readable and poll() would wake at once forever (a
  // core at 100% for as long as the flood lasts). Accept and close it with
  // the reserved descriptor, then leave the listening socket alone for
  // kOutOfFdsPauseNs; the processes retry with backoff.
  void OutOfDescriptors(uint64_t now, int err);
  void Accept(uint64_t now);
  void CloseConn(Conn* c);
  // One pass over every connection. Returns when the server stops.
  void Step(const std::vector<pollfd>& fds, uint64_t now);
  void Run();

  // shm_ingest_frames.cc: the control socket.
  // Logs one line and marks the connection for closing.
  bool Malformed(Conn* c, const std::string& where, uint64_t offset,
                 const std::string& what);
  bool MapRing(Conn* c, int memfd, const shm::HelloFrame& h, uint64_t off);
  bool OnHello(Conn* c, const char* p, uint32_t size, int memfd, uint64_t off);
  // Parses complete frames in c->in_. `memfd`: a descriptor that came with
  // the bytes just read (only a hello may carry one). False: close.
  bool ParseFrames(Conn* c, int memfd);
  void ReadSocket(Conn* c, uint64_t now);
  void Flush(Conn* c);

  // shm_ingest_ring.cc: ring messages.
  // Parses and hands on one ring message of `size` bytes at `p` (ring
  // position `pos`), its cost bounded first (issue #33 F7). Adds the
  // message objects it held to `*objects`; `*parsed`: it was read (the
  // read position moves past it). False: closing.
  bool HandleRingMessage(Conn* c, const char* p, uint32_t size, uint64_t pos,
                         uint64_t* objects, bool* parsed);
  // Reads messages from the ring, up to `max_bytes` and `max_objects`
  // message objects (c->backlog_: more is waiting). False: malformed
  // (closing).
  bool DrainRing(Conn* c, uint64_t max_bytes, uint64_t max_objects);
  // Publishes what a pass read: the read position and counts.
  void Published(Conn* c, uint64_t pos, uint64_t records, uint64_t bytes,
                 uint64_t messages);
};

}  // namespace pitstop::agent

#endif  // PITSTOP_AGENT_SHM_INGEST_LOOP_H_
