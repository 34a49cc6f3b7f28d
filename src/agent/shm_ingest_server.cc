#include "src/agent/shm_ingest_server.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <stdexcept>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pitstop/logging.h"
#include "pitstop/shm_transport.h"
#include "src/agent/ingest_server.h"
#include "src/agent/message_bound.h"
#include "src/agent/peer_cred.h"

namespace pitstop::agent {
namespace {

constexpr uint64_t kHelloTimeoutNs = 5'000'000'000ull;
// Outgoing frames (activations) kept per connection while it is not read.
constexpr size_t kMaxOutBytes = 256 * 1024;
// Bytes and message objects (records, communicator events) read from one
// ring per pass, so one busy or hostile rank cannot starve the others: a
// 16 MiB ring of empty records (2 bytes each) once took the thread 10 s
// while another job's ring went unread (issue #33 F7). 65536 objects are
// 16 of the library's batches, parsed in milliseconds.
constexpr uint64_t kMaxBytesPerPass = 8ull << 20;
constexpr uint64_t kMaxObjectsPerPass = 65536;
constexpr uint64_t kUnbounded = ~uint64_t{0};
// A message of more objects than this is not kept for reuse (a cleared
// repeated field keeps its elements allocated).
constexpr uint64_t kReusedObjects = 8192;
// How long accepting pauses when the process is out of descriptors.
constexpr uint64_t kOutOfFdsPauseNs = 100'000'000ull;

uint64_t MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<uint64_t>(ts.tv_nsec);
}

auto Log() { return Logger("agent.shm"); }

}  // namespace

// One process's connection. Owned by the server thread; SendResponse may
// come from any thread (AgentCore's command routing).
class ShmIngestServer::Conn final : public CommandSink {
 public:
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
  ShmIngestServer* s;
  std::vector<std::unique_ptr<Conn>> conns;
  v1::StreamTelemetryRequest req;
  uint64_t refused_logged_ns = 0;
  uint64_t fds_logged_ns = 0;
  uint64_t accept_paused_until_ns = 0;
  bool backlog = false;  // a ring has more to read: poll without waiting

  void Count(uint64_t ShmIngestStats::*field, uint64_t n = 1) {
    MutexLock lock(&s->stats_mu_);
    s->stats_.*field += n;
  }

  // Out of descriptors (EMFILE/ENFILE, or kernel memory): the waiting
  // connection stays readable and poll() would wake at once forever (a
  // core at 100% for as long as the flood lasts). Accept and close it with
  // the reserved descriptor, then leave the listening socket alone for
  // kOutOfFdsPauseNs; the processes retry with backoff.
  void OutOfDescriptors(uint64_t now, int err) {
    if (s->reserve_fd_ >= 0) {
      close(s->reserve_fd_);
      s->reserve_fd_ = -1;
      const int fd = accept4(s->listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) close(fd);
      s->reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    Count(&ShmIngestStats::refused);
    accept_paused_until_ns = now + kOutOfFdsPauseNs;
    if (now - fds_logged_ns > 10'000'000'000ull || fds_logged_ns == 0) {
      fds_logged_ns = now;
      Log()->error(
          "{}: out of file descriptors ({}; {} connections open): closing "
          "new connections for now",
          s->options_.socket_path, strerror(err), conns.size());
    }
  }

  void Accept(uint64_t now) {
    for (;;) {
      const int fd = accept4(s->listen_fd_, nullptr, nullptr,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
            errno == ENOMEM) {
          OutOfDescriptors(now, errno);
        }
        return;
      }
      // pid 0 when unknown: its hello is refused under verify_pid.
      absl::StatusOr<PeerCred> got = PeerCredOf(fd);
      const PeerCred cred = got.ok() ? *got : PeerCred{};
      const std::string peer =
          absl::StrCat("pid ", cred.pid, " uid ", cred.uid);
      if (conns.size() >= s->options_.max_connections) {
        close(fd);
        Count(&ShmIngestStats::refused);
        if (now - refused_logged_ns > 10'000'000'000ull) {
          refused_logged_ns = now;
          Log()->warn("{}: refusing {}: {} connections already (max)",
                      s->options_.socket_path, peer, conns.size());
        }
        continue;
      }
      auto c = std::make_unique<Conn>(s, fd, peer);
      c->peer_cred_ = cred;
      c->connected_ns_ = c->last_frame_ns_ = now;
      conns.push_back(std::move(c));
      s->connections_.store(static_cast<int>(conns.size()));
      Count(&ShmIngestStats::accepted);
    }
  }

  // Logs one line and marks the connection for closing.
  bool Malformed(Conn* c, const std::string& where, uint64_t offset,
                 const std::string& what) {
    Log()->warn(
        "malformed {} from {} (hello pid {}) at offset {}: {}; "
        "closing this connection",
        where, c->peer_, c->hello_pid_, offset, what);
    Count(&ShmIngestStats::malformed);
    c->eof_ = true;
    return false;
  }

  bool MapRing(Conn* c, int memfd, const shm::HelloFrame& h, uint64_t off) {
    const uint64_t rb = h.ring_bytes;
    if (rb < shm::kMinRingBytes || rb > shm::kMaxRingBytes ||
        (rb & (rb - 1)) != 0) {
      return Malformed(c, "hello", off, absl::StrCat("ring_bytes ", rb));
    }
    // Sealed against shrinking, or the process could make our reads fault.
    const int seals = fcntl(memfd, F_GET_SEALS);
    if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
      return Malformed(c, "hello", off, "ring memfd is not sealed");
    }
    struct stat st;
    const uint64_t want = sizeof(shm::RingHeader) + rb;
    if (fstat(memfd, &st) != 0 || static_cast<uint64_t>(st.st_size) != want) {
      return Malformed(c, "hello", off, "ring memfd size mismatch");
    }
    void* p = mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    if (p == MAP_FAILED) {
      return Malformed(c, "hello", off,
                       absl::StrCat("mmap: ", strerror(errno)));
    }
    c->map_ = p;
    c->map_bytes_ = want;
    c->header_ = static_cast<shm::RingHeader*>(p);
    c->data_ = static_cast<const char*>(p) + sizeof(shm::RingHeader);
    c->ring_bytes_ = rb;
    if (c->header_->magic != shm::kRingMagic) {
      return Malformed(c, "hello", off, "bad ring magic");
    }
    c->read_pos_ = c->header_->read_pos.load(std::memory_order_acquire);
    c->records_read_ = c->header_->records_read.load();
    if ((c->read_pos_ & 7) != 0) {
      return Malformed(c, "hello", off, "unaligned ring read position");
    }
    return true;
  }

  bool OnHello(Conn* c, const char* p, uint32_t size, int memfd, uint64_t off) {
    if (c->opened_) return Malformed(c, "frame", off, "second hello");
    // A 0.1 library's hello ends before records_delivered (zero here).
    shm::HelloFrame h{};
    if (size != sizeof(h) && size != shm::kHelloFrameV1Size) {
      return Malformed(c, "frame", off, "hello size");
    }
    std::memcpy(&h, p, size);
    c->hello_pid_ = h.pid;
    if (s->options_.verify_pid) {
      // A process speaks only for itself (docs/reliability.md, "Trust").
      if (absl::Status st = CheckClaimedPid(h.pid, c->peer_cred_); !st.ok()) {
        Log()->warn("{}: refused: {}", s->options_.socket_path,
                    std::string(st.message()));
        Count(&ShmIngestStats::pid_refused);
        c->eof_ = true;
        return false;
      }
    }
    if (h.protocol_version != shm::kProtocolVersion) {
      return Malformed(c, "hello", off,
                       absl::StrCat("protocol version ", h.protocol_version,
                                    ", agent speaks ", shm::kProtocolVersion));
    }
    if (memfd < 0) return Malformed(c, "hello", off, "no ring memfd attached");
    if (!MapRing(c, memfd, h, off)) return false;
    c->counters_ = h.counters;
    c->stream_ = s->handler_->Open(c, s->options_.verify_pid
                                          ? IdentifyProcess(c->peer_cred_)
                                          : ProcessIdentity{});
    c->opened_ = true;
    s->handler_->OnHello(c->stream_, h);
    s->handler_->OnCounters(c->stream_, h.counters);
    const shm::AckFrame ack{shm::kProtocolVersion, 0};
    const shm::FrameHeader fh{sizeof(ack), shm::kFrameHelloAck, 0};
    MutexLock lock(&c->out_mu_);
    c->out_.append(reinterpret_cast<const char*>(&fh), sizeof(fh));
    c->out_.append(reinterpret_cast<const char*>(&ack), sizeof(ack));
    return true;
  }

  // Parses complete frames in c->in_. `memfd`: a descriptor that came with
  // the bytes just read (only a hello may carry one). False: close.
  bool ParseFrames(Conn* c, int memfd) {
    size_t at = 0;
    bool ok = true;
    while (ok && c->in_.size() - at >= sizeof(shm::FrameHeader)) {
      shm::FrameHeader fh;
      std::memcpy(&fh, c->in_.data() + at, sizeof(fh));
      const uint64_t off = c->in_offset_ + at;
      if (fh.size > shm::kMaxFramePayload) {
        ok = Malformed(c, "frame", off, absl::StrCat("size ", fh.size));
        break;
      }
      if (c->in_.size() - at - sizeof(fh) < fh.size) break;
      const char* p = c->in_.data() + at + sizeof(fh);
      if (!c->opened_ && fh.type != shm::kFrameHello) {
        ok = Malformed(c, "frame", off, "first frame is not a hello");
        break;
      }
      switch (fh.type) {
        case shm::kFrameHello:
          ok = OnHello(c, p, fh.size, memfd, off);
          memfd = -1;  // consumed (closed by the caller)
          break;
        case shm::kFrameHeartbeat:
          if (fh.size != sizeof(shm::Counters)) {
            ok = Malformed(c, "frame", off, "heartbeat size");
          } else {
            std::memcpy(&c->counters_, p, sizeof(shm::Counters));
            s->handler_->OnCounters(c->stream_, c->counters_);
          }
          break;
        case shm::kFrameGoodbye: {
          shm::GoodbyeFrame g;
          if (fh.size != sizeof(g)) {
            ok = Malformed(c, "frame", off, "goodbye size");
          } else {
            std::memcpy(&g, p, sizeof(g));
            c->counters_ = g.counters;
            c->goodbye_ = true;
            s->handler_->OnCounters(c->stream_, c->counters_);
          }
          break;
        }
        default:
          ok = Malformed(c, "frame", off, absl::StrCat("type ", fh.type));
      }
      at += sizeof(fh) + fh.size;
    }
    c->in_.erase(0, at);
    c->in_offset_ += at;
    return ok;
  }

  void ReadSocket(Conn* c, uint64_t now) {
    char buf[4096];
    for (;;) {
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
      iovec iov{buf, sizeof(buf)};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      const ssize_t n = recvmsg(c->fd_, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
      int memfd = -1;
      bool extra_fds = false;
      for (cmsghdr* h = CMSG_FIRSTHDR(&msg); n >= 0 && h != nullptr;
           h = CMSG_NXTHDR(&msg, h)) {
        if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
        const size_t count = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
          int fd;
          std::memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
          if (memfd < 0) {
            memfd = fd;
          } else {
            close(fd);
            extra_fds = true;
          }
        }
      }
      if (n == 0) {
        c->eof_ = true;
      } else if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          c->eof_ = true;
        }
      } else {
        c->last_frame_ns_ = now;
        c->in_.append(buf, static_cast<size_t>(n));
        if (extra_fds) {
          Malformed(c, "frame", c->in_offset_, "more than one descriptor");
        } else if (!ParseFrames(c, memfd)) {
          // Malformed() logged it.
        }
      }
      if (memfd >= 0) close(memfd);  // mapped (or refused) by now
      if (n <= 0 || c->eof_) return;
    }
  }

  void Flush(Conn* c) {
    MutexLock lock(&c->out_mu_);
    while (!c->out_.empty()) {
      const ssize_t n = send(c->fd_, c->out_.data(), c->out_.size(),
                             MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n <= 0) {
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) c->eof_ = true;
        return;
      }
      c->out_.erase(0, static_cast<size_t>(n));
    }
  }

  // Parses and hands on one ring message of `size` bytes at `p` (ring
  // position `pos`), its cost bounded first (issue #33 F7). Adds the
  // message objects it held to `*objects`; `*parsed`: it was read (the
  // read position moves past it). False: closing.
  bool HandleRingMessage(Conn* c, const char* p, uint32_t size, uint64_t pos,
                         uint64_t* objects, bool* parsed) {
    uint64_t n = 0;
    const MessageBound bound =
        CountMessageObjects(p, size, v1::StreamTelemetryRequest::descriptor(),
                            kMaxMessageObjects, &n);
    if (bound == MessageBound::kTooMany) {
      Count(&ShmIngestStats::oversized);
      return Malformed(c, "ring message", pos,
                       absl::StrCat("more than ", kMaxMessageObjects,
                                    " records; refused before parsing"));
    }
    if (bound == MessageBound::kMalformed ||
        !req.ParseFromArray(p, static_cast<int>(size))) {
      return Malformed(c, "ring message", pos, "not a StreamTelemetryRequest");
    }
    *parsed = true;
    *objects += n;
    absl::Status st;
    if (s->options_.verify_pid && req.has_hello()) {
      // The telemetry hello inside the ring is what ranks are
      // attributed by: it may not name another process either.
      st = CheckClaimedPid(req.hello().pid(), c->peer_cred_);
      if (!st.ok()) Count(&ShmIngestStats::pid_refused);
    }
    // An exception (out of memory) ends this stream, not the agent.
    try {
      if (st.ok()) st = s->handler_->OnMessage(c->stream_, req);
    } catch (const std::bad_alloc&) {
      st = absl::ResourceExhaustedError("agent out of memory");
    } catch (const std::exception& e) {
      st = absl::InternalError(absl::StrCat("agent error: ", e.what()));
    } catch (...) {
      st = absl::InternalError("agent error: unknown exception");
    }
    // A cleared repeated field keeps its elements: give a large message's
    // memory back.
    if (n > kReusedObjects) req = v1::StreamTelemetryRequest();
    if (!st.ok()) {
      Log()->warn("{} (hello pid {}): {}; closing this connection", c->peer_,
                  c->hello_pid_, st.ToString());
      c->eof_ = true;
      return false;
    }
    return true;
  }

  // Reads messages from the ring, up to `max_bytes` and `max_objects`
  // message objects (c->backlog_: more is waiting). False: malformed
  // (closing).
  bool DrainRing(Conn* c, uint64_t max_bytes, uint64_t max_objects) {
    c->backlog_ = false;
    if (c->header_ == nullptr) return true;
    const uint64_t write =
        c->header_->write_pos.load(std::memory_order_acquire);
    if (write < c->read_pos_ || write - c->read_pos_ > c->ring_bytes_) {
      return Malformed(c, "ring", c->read_pos_,
                       absl::StrCat("write position ", write));
    }
    uint64_t pos = c->read_pos_;
    const uint64_t stop = write - pos <= max_bytes ? write : pos + max_bytes;
    uint64_t records = 0, bytes = 0, messages = 0, objects = 0;
    bool ok = true;
    while (pos < stop && ok && objects < max_objects) {
      const uint64_t off = pos & (c->ring_bytes_ - 1);
      shm::MessageHeader m;
      std::memcpy(&m, c->data_ + off, sizeof(m));
      if (m.size == shm::kPadMarker) {
        pos += c->ring_bytes_ - off;
        continue;
      }
      const uint64_t need = shm::MessageFootprint(m.size);
      if (need > c->ring_bytes_ - off || pos + need > write) {
        ok = Malformed(c, "ring message", pos,
                       absl::StrCat("size ", m.size, " does not fit"));
        break;
      }
      bool parsed = false;
      ok = HandleRingMessage(c, c->data_ + off + sizeof(m), m.size, pos,
                             &objects, &parsed);
      if (!parsed) break;
      pos += need;
      records += m.records;
      bytes += m.size;
      ++messages;
    }
    c->backlog_ = ok && pos < write;
    Published(c, pos, records, bytes, messages);
    return ok;
  }

  // Publishes what a pass read: the read position and counts.
  void Published(Conn* c, uint64_t pos, uint64_t records, uint64_t bytes,
                 uint64_t messages) {
    c->read_pos_ = pos;
    c->records_read_ += records;
    c->header_->records_read.store(c->records_read_, std::memory_order_release);
    c->header_->read_pos.store(pos, std::memory_order_release);
    // Only now, with records_read published: what a batch then says was
    // read is never more than what the process counts as delivered.
    if (records != 0) s->handler_->OnRecordsRead(c->stream_, records);
    if (messages != 0) {
      MutexLock lock(&s->stats_mu_);
      s->stats_.messages += messages;
      s->stats_.records += records;
      s->stats_.bytes += bytes;
    }
  }

  void CloseConn(Conn* c) {
    if (c->opened_) {
      Log()->debug("{} (hello pid {}): stream closed ({}), {} records read",
                   c->peer_, c->hello_pid_,
                   c->goodbye_ ? "goodbye" : (c->eof_ ? "eof" : "stopping"),
                   c->records_read_);
      s->handler_->Close(c->stream_);
    }
    c->opened_ = false;
  }

  // One pass over every connection. Returns when the server stops.
  void Step(const std::vector<pollfd>& fds, uint64_t now) {
    const int stop = s->stop_.load();
    backlog = false;
    for (size_t i = 0; i < conns.size(); ++i) {
      Conn* c = conns[i].get();
      if (stop != 2 && (fds[i + 2].revents & (POLLIN | POLLHUP | POLLERR))) {
        ReadSocket(c, now);
      }
      if (stop == 2) c->eof_ = true;
      const bool ending = c->eof_ || c->goodbye_ || stop == 1;
      // At the end read the ring to its end: what was written before an
      // exit or a crash still arrives (over as many passes as it takes,
      // each bounded like any other, unless the server stops).
      if (stop != 2 && c->opened_) {
        if (stop == 1) {
          DrainRing(c, kUnbounded, kUnbounded);
        } else {
          DrainRing(c, kMaxBytesPerPass, kMaxObjectsPerPass);
        }
      }
      // Closing already (a malformed ring or frame): nothing more is read.
      const bool closing = c->eof_;
      if (!ending) {
        Flush(c);
        const uint64_t limit =
            c->opened_ ? uint64_t{s->options_.idle_timeout_ms} * 1'000'000
                       : kHelloTimeoutNs;
        if (now - c->last_frame_ns_ > limit) {
          Log()->info(
              "{} (hello pid {}): no frame for {} ms; shedding idle "
              "connection",
              c->peer_, c->hello_pid_, (now - c->last_frame_ns_) / 1000000);
          Count(&ShmIngestStats::shed_idle);
          c->eof_ = true;
        }
        if (c->eof_ && !closing && stop != 2 && c->opened_) {
          // Found gone only now (our send failed: the process exited
          // between the poll and this pass, or it went idle): its last
          // frames (the goodbye) and the rest of the ring were written
          // before it went, and still count.
          ReadSocket(c, now);
          DrainRing(c, kMaxBytesPerPass, kMaxObjectsPerPass);
        }
      } else {
        Flush(c);  // a last ack/activation is harmless
      }
      // An ended process's ring still holding records is read on the
      // next passes, round-robin with the others.
      if (c->backlog_ && stop == 0) {
        backlog = true;
        continue;
      }
      if (c->eof_ || c->goodbye_ || stop != 0) CloseConn(c);
    }
    // Drop closed connections.
    size_t kept = 0;
    for (auto& c : conns) {
      if ((c->eof_ || c->goodbye_ || stop != 0) && !c->opened_) continue;
      conns[kept++] = std::move(c);
    }
    conns.resize(kept);
    s->connections_.store(static_cast<int>(conns.size()));
  }

  void Run() {
    std::vector<pollfd> fds;
    for (;;) {
      fds.clear();
      fds.push_back({s->wake_fd_, POLLIN, 0});
      const bool accepting = MonoNs() >= accept_paused_until_ns;
      fds.push_back(
          {s->listen_fd_, static_cast<short>(accepting ? POLLIN : 0), 0});
      for (auto& c : conns) {
        short events = POLLIN;
        {
          MutexLock lock(&c->out_mu_);
          if (!c->out_.empty()) events |= POLLOUT;
        }
        fds.push_back({c->fd_, events, 0});
      }
      poll(fds.data(), fds.size(),
           backlog ? 0 : static_cast<int>(s->options_.poll_interval_ms));
      if (fds[0].revents & POLLIN) {
        uint64_t v;
        (void)!read(s->wake_fd_, &v, sizeof(v));
      }
      const uint64_t now = MonoNs();
      const int stop = s->stop_.load();
      Step(fds, now);
      if (stop != 0) return;
      if (fds[1].revents & POLLIN) Accept(now);
    }
  }
};

absl::StatusOr<std::unique_ptr<ShmIngestServer>> ShmIngestServer::Create(
    const ShmIngestOptions& options, ShmStreamHandler* handler) {
  const std::string& path = options.socket_path;
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ingest.shm_socket: path must be 1..107 bytes, got '", path, "'"));
  }
  gid_t gid = static_cast<gid_t>(-1);
  if (!options.socket_group.empty()) {
    struct group* g = getgrnam(options.socket_group.c_str());
    if (g == nullptr) {
      return absl::NotFoundError(absl::StrCat(
          "ingest.socket_group: no such group '", options.socket_group, "'"));
    }
    gid = g->gr_gid;
  }
  std::unique_ptr<ShmIngestServer> s(new ShmIngestServer());
  s->options_ = options;
  s->handler_ = handler;
  const std::string lock_path = path + ".lock";
  s->lock_fd_ = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (s->lock_fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("ingest.shm_socket: cannot open lock file ", lock_path,
                     ": ", strerror(errno)));
  }
  if (flock(s->lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": another agent is serving on this socket (it holds ", lock_path,
        "); not taking it over"));
  }
  if (absl::Status st = ClaimSocketPath(path); !st.ok()) return st;
  s->listen_fd_ =
      socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s->listen_fd_ < 0) return absl::InternalError("socket(AF_UNIX) failed");
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  const mode_t old_umask = umask(0117);
  const int rc =
      bind(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  umask(old_umask);
  if (rc != 0 || listen(s->listen_fd_, 1024) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "ingest.shm_socket: cannot listen on ", path, ": ", strerror(errno)));
  }
  chmod(path.c_str(), 0660);
  if (gid != static_cast<gid_t>(-1) &&
      chown(path.c_str(), static_cast<uid_t>(-1), gid) != 0) {
    const std::string err = strerror(errno);
    unlink(path.c_str());
    return absl::PermissionDeniedError(
        absl::StrCat("ingest.socket_group: cannot give ", path, " to group '",
                     options.socket_group, "': ", err));
  }
  struct stat st;
  if (stat(path.c_str(), &st) == 0) s->inode_ = st.st_ino;
  // Released to accept-and-close a connection when out of descriptors.
  s->reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  s->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s->wake_fd_ < 0) return absl::InternalError("eventfd failed");
  ShmIngestServer* self = s.get();
  s->thread_ = std::thread([self] {
    Loop loop{self, {}, {}, 0, 0, 0};
    loop.Run();
  });
  return s;
}

void ShmIngestServer::Wake() {
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

void ShmIngestServer::Stop() {
  if (stopped_) return;
  stopped_ = true;
  int expected = 0;
  stop_.compare_exchange_strong(expected, 1);
  Wake();
  if (thread_.joinable()) thread_.join();
  struct stat st;
  if (stop_.load() == 1 && stat(options_.socket_path.c_str(), &st) == 0 &&
      st.st_ino == inode_) {
    unlink(options_.socket_path.c_str());
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
  if (lock_fd_ >= 0) close(lock_fd_);
  if (reserve_fd_ >= 0) close(reserve_fd_);
  listen_fd_ = wake_fd_ = lock_fd_ = reserve_fd_ = -1;
}

void ShmIngestServer::Kill() {
  int expected = 0;
  stop_.compare_exchange_strong(expected, 2);
  Stop();
  // A killed agent leaves its socket file; the next one replaces it.
}

ShmIngestServer::~ShmIngestServer() { Stop(); }

ShmIngestStats ShmIngestServer::stats() const {
  MutexLock lock(&stats_mu_);
  return stats_;
}

}  // namespace pitstop::agent
