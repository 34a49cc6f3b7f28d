#include "src/nccl/cpu/ring_transport.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "pitstop/status_macros.h"

namespace pitstop::cpunccl {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kHelloMagic = 0x50535247;  // "PSRG"

// The first bytes on a ring connection: who is calling, for which
// communicator.
struct Hello {
  uint32_t magic;
  int32_t rank;
  uint64_t comm_id;
};
static_assert(sizeof(Hello) == 16, "Hello is 16 bytes on the wire");

socklen_t AddressLength(const sockaddr_storage& a) {
  return a.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

int RemainingMs(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1 << 30));
}

// poll(2) on one descriptor until `events` or the deadline; EINTR retried.
absl::Status WaitFor(int fd, short events, Clock::time_point deadline,
                     const std::string& what) {
  for (;;) {
    pollfd p = {fd, events, 0};
    const int n = poll(&p, 1, RemainingMs(deadline));
    if (n > 0) return absl::OkStatus();
    if (n == 0) {
      return absl::DeadlineExceededError(absl::StrCat(what, ": timed out"));
    }
    if (errno != EINTR) return Errno(absl::StrCat(what, ": poll"));
  }
}

void SetNoDelay(int fd) {
  int on = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
}

// Drops the first n bytes of the parts' remaining ranges.
void Advance(RingTransport::Parts* p, size_t n) {
  for (iovec& v : p->part) {
    const size_t k = std::min(n, v.iov_len);
    v.iov_base = static_cast<char*>(v.iov_base) + k;
    v.iov_len -= k;
    n -= k;
  }
}

size_t Remaining(const RingTransport::Parts& p) {
  return p.part[0].iov_len + p.part[1].iov_len;
}

// The parts with bytes left, for sendmsg/recvmsg.
msghdr Message(RingTransport::Parts* p) {
  msghdr m = {};
  m.msg_iov = p->part[0].iov_len > 0 ? &p->part[0] : &p->part[1];
  m.msg_iovlen = p->part[0].iov_len > 0 ? 2 : 1;
  return m;
}

bool WouldBlock(int e) { return e == EAGAIN || e == EWOULDBLOCK || e == EINTR; }

}  // namespace

absl::StatusOr<std::unique_ptr<RingTransport>> RingTransport::Listen(
    const sockaddr_storage& local) {
  std::unique_ptr<RingTransport> t(new RingTransport());
  t->listen_fd_ = socket(local.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (t->listen_fd_ < 0) return Errno("ring transport: socket");
  sockaddr_storage addr = local;
  if (addr.ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port = 0;
  } else {
    reinterpret_cast<sockaddr_in*>(&addr)->sin_port = 0;
  }
  if (bind(t->listen_fd_, reinterpret_cast<const sockaddr*>(&addr),
           AddressLength(addr)) != 0) {
    return Errno("ring transport: bind");
  }
  if (listen(t->listen_fd_, 4) != 0) return Errno("ring transport: listen");
  socklen_t len = sizeof(t->listen_address_);
  if (getsockname(t->listen_fd_,
                  reinterpret_cast<sockaddr*>(&t->listen_address_),
                  &len) != 0) {
    return Errno("ring transport: getsockname");
  }
  return t;
}

RingTransport::~RingTransport() {
  Close();
  if (listen_fd_ >= 0) close(listen_fd_);
}

void RingTransport::Close() {
  for (int* fd : {&left_fd_, &right_fd_}) {
    if (*fd < 0) continue;
    (void)shutdown(*fd, SHUT_RDWR);
    close(*fd);
    *fd = -1;
  }
}

absl::Status RingTransport::Connect(const sockaddr_storage& left, int left_rank,
                                    int right_rank, int rank, uint64_t comm_id,
                                    std::chrono::milliseconds timeout) {
  left_rank_ = left_rank;
  right_rank_ = right_rank;
  timeout_ = timeout;
  const Clock::time_point deadline = Clock::now() + timeout;
  const std::string to_left = absl::StrCat("ring connect to rank ", left_rank);
  left_fd_ =
      socket(left.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (left_fd_ < 0) return Errno(to_left);
  // The left neighbour listens before anyone connects (the addresses are
  // exchanged afterwards), and the kernel completes the handshake before
  // its accept: connecting first, then accepting, cannot deadlock.
  if (connect(left_fd_, reinterpret_cast<const sockaddr*>(&left),
              AddressLength(left)) != 0 &&
      errno != EINPROGRESS) {
    return Errno(to_left);
  }
  RETURN_IF_ERROR(WaitFor(left_fd_, POLLOUT, deadline, to_left));
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(left_fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
    errno = err != 0 ? err : errno;
    return Errno(to_left);
  }
  SetNoDelay(left_fd_);
  const Hello hello = {kHelloMagic, rank, comm_id};
  // 16 bytes into an empty socket buffer: one send.
  if (send(left_fd_, &hello, sizeof(hello), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(sizeof(hello))) {
    return Errno(absl::StrCat(to_left, ": hello"));
  }
  RETURN_IF_ERROR(AcceptRight(comm_id, deadline));
  close(listen_fd_);
  listen_fd_ = -1;
  return absl::OkStatus();
}

absl::Status RingTransport::AcceptRight(uint64_t comm_id,
                                        Clock::time_point deadline) {
  const std::string what = absl::StrCat("ring accept from rank ", right_rank_);
  for (;;) {
    RETURN_IF_ERROR(WaitFor(listen_fd_, POLLIN, deadline, what));
    const int fd =
        accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (WouldBlock(errno) || errno == ECONNABORTED) continue;
      return Errno(what);
    }
    Hello hello = {};
    size_t got = 0;
    absl::Status st;
    while (got < sizeof(hello) && st.ok()) {
      st = WaitFor(fd, POLLIN, deadline, what);
      if (!st.ok()) break;
      const ssize_t n = recv(fd, reinterpret_cast<char*>(&hello) + got,
                             sizeof(hello) - got, 0);
      if (n > 0) {
        got += static_cast<size_t>(n);
      } else if (n == 0 || !WouldBlock(errno)) {
        break;  // gone before saying hello: not our neighbour
      }
    }
    if (st.ok() && got == sizeof(hello) && hello.magic == kHelloMagic &&
        hello.rank == right_rank_ && hello.comm_id == comm_id) {
      SetNoDelay(fd);
      right_fd_ = fd;
      return absl::OkStatus();
    }
    close(fd);  // a stray connection: keep waiting for the neighbour
    if (!st.ok()) return st;
  }
}

absl::Status RingTransport::Exchange(
    const Parts& out, const Parts& in,
    absl::FunctionRef<absl::Status(size_t)> on_recv) {
  if (left_fd_ < 0 || right_fd_ < 0) {
    return absl::UnavailableError("ring connections are closed");
  }
  Parts send_left = out;
  Parts recv_left = in;
  const size_t recv_total = Remaining(in);
  Clock::time_point idle_deadline = Clock::now() + timeout_;
  while (Remaining(send_left) > 0 || Remaining(recv_left) > 0) {
    bool moved = false;
    if (Remaining(send_left) > 0) {
      msghdr m = Message(&send_left);
      const ssize_t n = sendmsg(left_fd_, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        Advance(&send_left, static_cast<size_t>(n));
        moved = true;
      } else if (n < 0 && !WouldBlock(errno)) {
        return Errno(absl::StrCat("send to rank ", left_rank_));
      }
    }
    if (Remaining(recv_left) > 0) {
      msghdr m = Message(&recv_left);
      const ssize_t n = recvmsg(right_fd_, &m, MSG_DONTWAIT);
      if (n > 0) {
        Advance(&recv_left, static_cast<size_t>(n));
        moved = true;
        RETURN_IF_ERROR(on_recv(recv_total - Remaining(recv_left)));
      } else if (n == 0) {
        return absl::UnavailableError(absl::StrCat(
            "connection closed by rank ", right_rank_, " (exited or failed)"));
      } else if (!WouldBlock(errno)) {
        return Errno(absl::StrCat("receive from rank ", right_rank_));
      }
    }
    if (moved) {
      idle_deadline = Clock::now() + timeout_;
      continue;  // try again before sleeping: more may be ready
    }
    pollfd p[2];
    nfds_t k = 0;
    if (Remaining(send_left) > 0) p[k++] = {left_fd_, POLLOUT, 0};
    if (Remaining(recv_left) > 0) p[k++] = {right_fd_, POLLIN, 0};
    const int ready = poll(p, k, RemainingMs(idle_deadline));
    if (ready == 0) {
      // gloo's wording ("timed out waiting <ms>ms"), which callers match.
      const bool sending = Remaining(send_left) > 0;
      const bool receiving = Remaining(recv_left) > 0;
      return absl::DeadlineExceededError(absl::StrCat(
          "timed out waiting ", timeout_.count(), "ms for ",
          receiving ? absl::StrCat("rank ", right_rank_, " to send") : "",
          receiving && sending ? " and " : "",
          sending ? absl::StrCat("rank ", left_rank_, " to receive") : "",
          " (no byte moved in that time)"));
    }
    if (ready < 0 && errno != EINTR) return Errno("ring poll");
  }
  return absl::OkStatus();
}

}  // namespace pitstop::cpunccl
