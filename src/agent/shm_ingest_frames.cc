// ShmIngestServer's control socket (shm_ingest_loop.h): frames, the hello
// and the mapping of the process's ring.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "pitstop/shm_transport.h"
#include "src/agent/local_tenants.h"
#include "src/agent/peer_cred.h"
#include "src/agent/shm_ingest_loop.h"

namespace pitstop::agent {

bool ShmIngestServer::Loop::Malformed(Conn* c, const std::string& where,
                                      uint64_t offset,
                                      const std::string& what) {
  Log()->warn(
      "malformed {} from {} (hello pid {}) at offset {}: {}; "
      "closing this connection",
      where, c->peer_, c->hello_pid_, offset, what);
  Count(&ShmIngestStats::malformed);
  c->eof_ = true;
  return false;
}

bool ShmIngestServer::Loop::MapRing(Conn* c, int memfd,
                                    const shm::HelloFrame& h, uint64_t off) {
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
    return Malformed(c, "hello", off, absl::StrCat("mmap: ", strerror(errno)));
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

bool ShmIngestServer::Loop::OnHello(Conn* c, const char* p, uint32_t size,
                                    int memfd, uint64_t off) {
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

bool ShmIngestServer::Loop::ParseFrames(Conn* c, int memfd) {
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

void ShmIngestServer::Loop::ReadSocket(Conn* c, uint64_t now) {
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

void ShmIngestServer::Loop::Flush(Conn* c) {
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

}  // namespace pitstop::agent
