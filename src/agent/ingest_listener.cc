#include "src/agent/ingest_listener.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "grpcpp/server_posix.h"
#include "pitstop/logging.h"

namespace pitstop::agent {
namespace {

constexpr int kSweepMs = 500;
constexpr int kOutOfFdsPauseMs = 100;

int OpenReserve() { return open("/dev/null", O_RDONLY | O_CLOEXEC); }

// The inode of the socket descriptor `fd` of this process names now, from
// /proc/self/fd; 0 when it is closed or names something else. Not fstat():
// gRPC owns a descriptor once it is handed over and closes it on its own
// threads, and another thread (a metrics scrape's accept) may get the number
// again at any moment, so the listener never calls a descriptor function on
// a number it no longer owns; it reads the process's descriptor table.
ino_t SocketInodeOf(int fd) {
  char path[32];
  std::snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  char target[64];
  const ssize_t n = readlink(path, target, sizeof(target) - 1);
  if (n <= 0) return 0;
  target[n] = '\0';
  unsigned long long inode = 0;
  if (std::sscanf(target, "socket:[%llu]", &inode) != 1) return 0;
  return static_cast<ino_t>(inode);
}

}  // namespace

absl::StatusOr<std::unique_ptr<IngestListener>> IngestListener::Create(
    int listen_fd, grpc::Server* server, size_t max_connections,
    PeerCredRegistry* creds) {
  const int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    close(listen_fd);
    return absl::InternalError(
        absl::StrCat("ingest: eventfd: ", std::strerror(errno)));
  }
  const int reserve = OpenReserve();
  if (reserve < 0) {
    close(listen_fd);
    close(wake);
    return absl::InternalError(
        absl::StrCat("ingest: /dev/null: ", std::strerror(errno)));
  }
  return std::unique_ptr<IngestListener>(
      new IngestListener(listen_fd, wake, reserve, server,
                         std::max<size_t>(1, max_connections), creds));
}

IngestListener::IngestListener(int listen_fd, int wake_fd, int reserve_fd,
                               grpc::Server* server, size_t max_connections,
                               PeerCredRegistry* creds)
    : listen_fd_(listen_fd),
      wake_fd_(wake_fd),
      reserve_fd_(reserve_fd),
      server_(server),
      creds_(creds),
      max_connections_(max_connections) {
  thread_ = std::thread([this] { Loop(); });
}

IngestListener::~IngestListener() {
  Stop();
  close(wake_fd_);
  if (reserve_fd_ >= 0) close(reserve_fd_);
}

void IngestListener::Stop() {
  if (stopping_.exchange(true)) return;
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  close(listen_fd_);
}

IngestListener::Stats IngestListener::stats() const {
  Stats s;
  s.accepted = accepted_.load();
  s.refused_cap = refused_cap_.load();
  s.refused_fds = refused_fds_.load();
  s.live = live_count_.load();
  return s;
}

bool IngestListener::Pause(int ms) {
  pollfd p{wake_fd_, POLLIN, 0};
  (void)poll(&p, 1, ms);
  return stopping_.load();
}

void IngestListener::Loop() {
  auto last_sweep = std::chrono::steady_clock::now();
  while (!stopping_.load()) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    const int n = poll(p, 2, kSweepMs);
    if (stopping_.load()) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_sweep >= std::chrono::milliseconds(kSweepMs)) {
      Sweep();
      last_sweep = now;
    }
    if (n > 0 && (p[0].revents & POLLIN)) AcceptReady();
  }
}

void IngestListener::AcceptReady() {
  bool swept = false;
  for (;;) {
    const int fd =
        accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
          errno == ENOMEM) {
        ShedWithReserve();
        (void)Pause(kOutOfFdsPauseMs);
        return;
      }
      Logger("agent.ingest")->error("accept: {}", std::strerror(errno));
      (void)Pause(kOutOfFdsPauseMs);
      return;
    }
    if (live_.size() >= max_connections_ && !swept) {
      Sweep();  // at most once per wake-up: a flood must not cost O(n^2)
      swept = true;
    }
    struct stat st;
    if (live_.size() >= max_connections_ || fstat(fd, &st) != 0) {
      close(fd);
      if (refused_cap_.fetch_add(1) % 1000 == 0) {
        Logger("agent.ingest")
            ->warn(
                "{} rank connections open (ingest.max_connections): "
                "closing new ones ({} so far)",
                live_.size(), refused_cap_.load());
      }
      continue;
    }
    live_[fd] = st.st_ino;  // a reused fd number replaces a closed entry
    live_count_.store(live_.size());
    accepted_.fetch_add(1);
    if (creds_ != nullptr) {
      // The kernel's record of who connected, before gRPC (which names
      // this connection's peer "fd:N") reads anything from it.
      // pid 0 when unknown: its streams are refused (fail closed).
      absl::StatusOr<PeerCred> cred = PeerCredOf(fd);
      creds_->Record(fd, cred.ok() ? *cred : PeerCred{});
    }
    grpc::AddInsecureChannelFromFd(server_, fd);
  }
}

void IngestListener::ShedWithReserve() {
  if (refused_fds_.fetch_add(1) % 1000 == 0) {
    Logger("agent.ingest")
        ->warn(
            "out of file descriptors ({} live rank connections): closing "
            "new connections until descriptors are free",
            live_.size());
  }
  if (reserve_fd_ >= 0) {
    close(reserve_fd_);
    reserve_fd_ = -1;
  }
  // With the reserve released one descriptor is free: accept and close
  // every connection waiting (they cannot be served now anyway).
  for (int i = 0; i < 4096; ++i) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) break;
    close(fd);
    refused_fds_.fetch_add(1);
  }
  reserve_fd_ = OpenReserve();
}

void IngestListener::Sweep() {
  for (auto it = live_.begin(); it != live_.end();) {
    if (SocketInodeOf(it->first) != it->second) {
      live_.erase(it++);
    } else {
      ++it;
    }
  }
  live_count_.store(live_.size());
}

}  // namespace pitstop::agent
