#include "plugin/agent_link.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

namespace pitstop::plugin {
namespace {

// Outgoing frames waiting for socket room are capped: past this the agent
// is not reading (stopped) and only the goodbye still matters.
constexpr size_t kMaxQueuedBytes = 64 * 1024;

std::string Errno(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

// Creates the sealed ring memfd, mapped. -1 on failure.
int CreateRing(uint64_t ring_bytes, void** map, std::string* error) {
  const int fd =
      memfd_create("pitstop-telemetry", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    *error = Errno("memfd_create");
    return -1;
  }
  const size_t total = sizeof(shm::RingHeader) + ring_bytes;
  if (ftruncate(fd, static_cast<off_t>(total)) != 0) {
    *error = Errno("ftruncate(ring)");
    close(fd);
    return -1;
  }
  // The agent relies on the size never shrinking (no SIGBUS on its side).
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    *error = Errno("fcntl(F_ADD_SEALS)");
    close(fd);
    return -1;
  }
  void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    *error = Errno("mmap(ring)");
    close(fd);
    return -1;
  }
  auto* h = new (p) shm::RingHeader();
  h->magic = shm::kRingMagic;
  h->version = shm::kProtocolVersion;
  h->ring_bytes = ring_bytes;
  *map = p;
  return fd;
}

}  // namespace

std::unique_ptr<AgentLink> AgentLink::Connect(const std::string& socket_path,
                                              uint64_t ring_bytes,
                                              const shm::HelloFrame& hello,
                                              std::string* error) {
  std::unique_ptr<AgentLink> link(new AgentLink());
  link->peer_ = socket_path;
  sockaddr_un addr{};
  if (socket_path.empty() || socket_path.size() >= sizeof(addr.sun_path)) {
    *error = "socket path must be 1..107 bytes";
    return nullptr;
  }
  link->fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (link->fd_ < 0) {
    *error = Errno("socket");
    return nullptr;
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  // A Unix connect completes at once or fails (EAGAIN: backlog full).
  if (connect(link->fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) !=
      0) {
    *error = Errno("connect");
    return nullptr;
  }
  void* map = nullptr;
  const int ring_fd = CreateRing(ring_bytes, &map, error);
  if (ring_fd < 0) return nullptr;
  link->header_ = static_cast<shm::RingHeader*>(map);
  link->data_ = static_cast<char*>(map) + sizeof(shm::RingHeader);
  link->ring_bytes_ = ring_bytes;
  link->map_bytes_ = sizeof(shm::RingHeader) + ring_bytes;

  shm::HelloFrame h = hello;
  h.protocol_version = shm::kProtocolVersion;
  h.ring_bytes = ring_bytes;
  char frame[sizeof(shm::FrameHeader) + sizeof(h)];
  const shm::FrameHeader fh{sizeof(h), shm::kFrameHello, 0};
  std::memcpy(frame, &fh, sizeof(fh));
  std::memcpy(frame + sizeof(fh), &h, sizeof(h));
  iovec iov{frame, sizeof(frame)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &ring_fd, sizeof(int));
  // A fresh socket's buffer takes 48 bytes whole.
  const ssize_t n = sendmsg(link->fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  close(ring_fd);  // the agent has its own copy; our mapping stays
  if (n != static_cast<ssize_t>(sizeof(frame))) {
    *error = n < 0 ? Errno("sendmsg(hello)") : "short hello write";
    return nullptr;
  }
  return link;
}

AgentLink::~AgentLink() {
  if (fd_ >= 0) close(fd_);
  if (header_ != nullptr) munmap(header_, map_bytes_);
}

void AgentLink::AbandonAfterFork() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  if (header_ != nullptr) munmap(header_, map_bytes_);
  header_ = nullptr;
  data_ = nullptr;
}

bool AgentLink::CanEverFit(size_t payload) const {
  // A message may need a pad before it: keep it under half the ring.
  return shm::MessageFootprint(payload) <= ring_bytes_ / 2;
}

bool AgentLink::Write(const std::string& payload, uint32_t records) {
  if (header_ == nullptr || !CanEverFit(payload.size())) return false;
  const uint64_t read = header_->read_pos.load(std::memory_order_acquire);
  const uint64_t need = shm::MessageFootprint(payload.size());
  uint64_t pos = write_pos_;
  const uint64_t offset = pos & (ring_bytes_ - 1);
  const uint64_t tail = ring_bytes_ - offset;
  const uint64_t pad = tail < need ? tail : 0;
  // The agent's read position is untrusted only in that a bad one makes us
  // refuse writes (used = huge): never out of bounds.
  const uint64_t used = pos - read;
  if (used > ring_bytes_ || ring_bytes_ - used < pad + need) return false;
  if (pad != 0) {
    const shm::MessageHeader m{shm::kPadMarker, 0};
    std::memcpy(data_ + offset, &m, sizeof(m));
    pos += pad;
  }
  const shm::MessageHeader m{static_cast<uint32_t>(payload.size()), records};
  char* p = data_ + (pos & (ring_bytes_ - 1));
  std::memcpy(p, &m, sizeof(m));
  std::memcpy(p + sizeof(m), payload.data(), payload.size());
  pos += need;
  write_pos_ = pos;
  records_written_ += records;
  header_->records_written.store(records_written_, std::memory_order_relaxed);
  header_->write_pos.store(pos, std::memory_order_release);
  return true;
}

uint64_t AgentLink::unread_records() const {
  if (header_ == nullptr) return 0;
  const uint64_t read = header_->records_read.load(std::memory_order_acquire);
  return read >= records_written_ ? 0 : records_written_ - read;
}

void AgentLink::QueueFrame(uint16_t type, const void* payload, uint32_t size) {
  const shm::FrameHeader fh{size, type, 0};
  out_.append(reinterpret_cast<const char*>(&fh), sizeof(fh));
  out_.append(static_cast<const char*>(payload), size);
}

bool AgentLink::Flush(std::string* error) {
  while (!out_.empty() && fd_ >= 0) {
    const ssize_t n =
        send(fd_, out_.data(), out_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      if (errno == EINTR) continue;
      *error = Errno("send");
      return false;
    }
    out_.erase(0, static_cast<size_t>(n));
  }
  return true;
}

void AgentLink::SendHeartbeat(const shm::Counters& counters) {
  if (!out_.empty()) return;  // the agent is not reading; skip
  QueueFrame(shm::kFrameHeartbeat, &counters, sizeof(counters));
  std::string ignored;
  Flush(&ignored);
}

void AgentLink::SendGoodbye(uint32_t reason, const shm::Counters& counters) {
  if (out_.size() > kMaxQueuedBytes) return;
  const shm::GoodbyeFrame g{reason, 0, counters};
  QueueFrame(shm::kFrameGoodbye, &g, sizeof(g));
  std::string ignored;
  Flush(&ignored);
}

bool AgentLink::Poll(AgentMessages* out, std::string* error) {
  if (fd_ < 0) {
    *error = "not connected";
    return false;
  }
  if (!Flush(error)) return false;
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0) {
      *error = "agent closed the connection";
      return false;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      *error = Errno("recv");
      return false;
    }
    in_.append(buf, static_cast<size_t>(n));
    if (!ParseFrames(out, error)) return false;
  }
  return true;
}

bool AgentLink::ParseFrames(AgentMessages* out, std::string* error) {
  size_t at = 0;
  auto fail = [&](const std::string& what) {
    *error = "malformed frame from the agent at offset " +
             std::to_string(in_offset_ + at) + ": " + what;
    return false;
  };
  while (in_.size() - at >= sizeof(shm::FrameHeader)) {
    shm::FrameHeader fh;
    std::memcpy(&fh, in_.data() + at, sizeof(fh));
    if (fh.size > shm::kMaxFramePayload) {
      return fail("payload of " + std::to_string(fh.size) + " bytes");
    }
    if (in_.size() - at - sizeof(fh) < fh.size) break;  // incomplete
    const char* payload = in_.data() + at + sizeof(fh);
    switch (fh.type) {
      case shm::kFrameHelloAck: {
        shm::AckFrame ack;
        if (fh.size != sizeof(ack)) return fail("ack size");
        std::memcpy(&ack, payload, sizeof(ack));
        if (ack.protocol_version != shm::kProtocolVersion) {
          return fail("agent speaks protocol version " +
                      std::to_string(ack.protocol_version));
        }
        acked_ = true;
        break;
      }
      case shm::kFrameActivation:
        if (!DecodeResponse(std::string(payload, fh.size), out)) {
          return fail("undecodable activation");
        }
        break;
      default:
        return fail("unexpected frame type " + std::to_string(fh.type));
    }
    at += sizeof(fh) + fh.size;
  }
  in_.erase(0, at);
  in_offset_ += at;
  return true;
}

}  // namespace pitstop::plugin
