#include "src/agent/shm_ingest_server.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pitstop/logging.h"
#include "src/agent/ingest_server.h"
#include "src/agent/peer_cred.h"
#include "src/agent/shm_ingest_loop.h"

namespace pitstop::agent {

uint64_t ShmIngestServer::Loop::MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<uint64_t>(ts.tv_nsec);
}

std::shared_ptr<spdlog::logger> ShmIngestServer::Loop::Log() {
  return Logger("agent.shm");
}

void ShmIngestServer::Loop::Count(uint64_t ShmIngestStats::*field, uint64_t n) {
  MutexLock lock(&s->stats_mu_);
  s->stats_.*field += n;
}

void ShmIngestServer::Loop::OutOfDescriptors(uint64_t now, int err) {
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

void ShmIngestServer::Loop::Accept(uint64_t now) {
  for (;;) {
    const int fd =
        accept4(s->listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
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
    const std::string peer = absl::StrCat("pid ", cred.pid, " uid ", cred.uid);
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

void ShmIngestServer::Loop::CloseConn(Conn* c) {
  if (c->opened_) {
    Log()->debug("{} (hello pid {}): stream closed ({}), {} records read",
                 c->peer_, c->hello_pid_,
                 c->goodbye_ ? "goodbye" : (c->eof_ ? "eof" : "stopping"),
                 c->records_read_);
    s->handler_->Close(c->stream_);
  }
  c->opened_ = false;
}

void ShmIngestServer::Loop::Step(const std::vector<pollfd>& fds, uint64_t now) {
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

void ShmIngestServer::Loop::Run() {
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
    Loop loop{self, {}, {}, 0, 0, 0, false, {}};
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
