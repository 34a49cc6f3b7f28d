#include "src/agent/ingest_server.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <future>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "pitstop/grpc_util.h"
#include "pitstop/logging.h"
#include "pitstop/v1/telemetry.grpc.pb.h"
#include "src/agent/message_bound.h"

namespace pitstop::agent {
namespace {

constexpr absl::Duration kStopWaitBound = absl::Seconds(5);

using Req = v1::StreamTelemetryRequest;
using Resp = v1::StreamTelemetryResponse;

// A message read with more message objects than this is not kept for reuse
// (a cleared repeated field keeps its elements allocated): the library's
// batches are at most 4096 records.
constexpr uint64_t kReusedObjects = 8192;

// Parses `raw` into `req` once its cost is known to be bounded (issue #33
// F7): ResourceExhausted (counted in `oversized`) past kMaxMessageObjects.
absl::Status ParseBounded(grpc::ByteBuffer* raw, Req* req,
                          std::atomic<uint64_t>* oversized, uint64_t* objects) {
  MessageBound bound;
  {
    grpc::ProtoBufferReader reader(raw);
    google::protobuf::io::CodedInputStream in(&reader);
    bound = CountMessageObjects(&in, Req::descriptor(), kMaxMessageObjects,
                                objects);
  }
  if (bound == MessageBound::kTooMany) {
    oversized->fetch_add(1);
    return absl::ResourceExhaustedError(absl::StrCat(
        "message of more than ", kMaxMessageObjects,
        " records and communicator events (the library sends at most 4096 "
        "records a batch); refused before parsing"));
  }
  grpc::ProtoBufferReader reader(raw);
  if (bound == MessageBound::kMalformed ||
      !req->ParseFromZeroCopyStream(&reader)) {
    return absl::InvalidArgumentError("not a StreamTelemetryRequest");
  }
  return absl::OkStatus();
}

// One rank stream. Reads raw bytes, so that what a message costs to parse
// is bounded before it is parsed. Deletes itself in OnDone.
class IngestReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
      public CommandSink {
 public:
  // `peer`: the connection's SO_PEERCRED (nullopt: not checked, e.g. a
  // connection that did not come through the IngestListener).
  IngestReactor(AgentCore* core, std::optional<PeerCred> peer,
                std::atomic<uint64_t>* pid_refusals,
                std::atomic<uint64_t>* oversized)
      : core_(core),
        peer_(peer),
        pid_refusals_(pid_refusals),
        oversized_(oversized) {
    id_ = core_->OpenStream(
        this, peer_ ? IdentifyProcess(*peer_) : ProcessIdentity{});
    StartRead(&raw_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // client half-closed, broke or was cancelled
      EndStream(grpc::Status::OK);
      return;
    }
    uint64_t objects = 0;
    if (absl::Status st = ParseBounded(&raw_, &req_, oversized_, &objects);
        !st.ok()) {
      Logger("agent.ingest")->warn("stream {}: {}", id_, st.ToString());
      EndStream(ToGrpcStatus(st));
      return;
    }
    raw_.Clear();
    OnMessage(objects);
  }

  void OnMessage(uint64_t objects) {
    if (req_.has_hello() && peer_.has_value()) {
      // A process speaks only for itself: the hello's pid must be the
      // connected process (its ranks are attributed to that pid).
      if (absl::Status st = CheckClaimedPid(req_.hello().pid(), *peer_);
          !st.ok()) {
        pid_refusals_->fetch_add(1);
        Logger("agent.ingest")
            ->warn("stream {}: refused: {}", id_, std::string(st.message()));
        EndStream(ToGrpcStatus(st));
        return;
      }
    }
    absl::Status st;
    // An exception must not escape a reactor callback: the stream would
    // then never be finished and the server's shutdown would wait forever.
    try {
      st = core_->OnMessage(id_, req_);
    } catch (const std::bad_alloc&) {
      st = absl::ResourceExhaustedError(
          "agent out of memory handling this message");
    } catch (const std::exception& e) {
      st = absl::InternalError(absl::StrCat("agent error: ", e.what()));
    } catch (...) {
      st = absl::InternalError("agent error: unknown exception");
    }
    if (!st.ok()) {
      Logger("agent.ingest")->warn("stream {}: {}", id_, st.ToString());
      EndStream(ToGrpcStatus(st));
      return;
    }
    if (objects > kReusedObjects) {
      req_ = Req();  // gives the large message's memory back
    } else {
      req_.Clear();
    }
    StartRead(&raw_);
  }

  void SendResponse(const Resp& r) override {
    grpc::ByteBuffer buf;
    bool own = false;
    if (!grpc::SerializationTraits<Resp>::Serialize(r, &buf, &own).ok()) {
      return;
    }
    MutexLock lock(&mu_);
    if (finishing_) return;
    out_.push_back(std::move(buf));
    if (!writing_) {
      writing_ = true;
      StartWrite(&out_.front());
    }
  }

  void OnWriteDone(bool ok) override {
    MutexLock lock(&mu_);
    out_.pop_front();
    if (!ok) out_.clear();
    if (!out_.empty() && !finishing_) {
      StartWrite(&out_.front());
      return;
    }
    writing_ = false;
    if (finishing_ && !finished_) {
      finished_ = true;
      Finish(final_status_);
    }
  }

  void OnDone() override {
    core_->CloseStream(id_);
    delete this;
  }

 private:
  void EndStream(const grpc::Status& status) {
    // Close first so no more commands are routed here.
    try {
      core_->CloseStream(id_);
    } catch (const std::exception& e) {
      Logger("agent.ingest")->error("stream {}: close: {}", id_, e.what());
    }
    MutexLock lock(&mu_);
    finishing_ = true;
    final_status_ = status;
    if (!writing_ && !finished_) {
      finished_ = true;
      Finish(status);
    }
  }

  AgentCore* const core_;
  const std::optional<PeerCred> peer_;
  std::atomic<uint64_t>* const pid_refusals_;
  std::atomic<uint64_t>* const oversized_;
  uint64_t id_ = 0;
  grpc::ByteBuffer raw_;
  Req req_;
  Mutex mu_;
  std::deque<grpc::ByteBuffer> out_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

class IngestServer::Service final
    : public v1::Telemetry::WithRawCallbackMethod_StreamTelemetry<
          v1::Telemetry::Service> {
 public:
  Service(AgentCore* core, const PeerCredRegistry* creds,
          std::atomic<uint64_t>* pid_refusals, std::atomic<uint64_t>* oversized)
      : core_(core),
        creds_(creds),
        pid_refusals_(pid_refusals),
        oversized_(oversized) {}
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StreamTelemetry(
      grpc::CallbackServerContext* ctx) override {
    std::optional<PeerCred> peer = creds_->Lookup(ctx->peer());
    return new IngestReactor(core_, peer, pid_refusals_, oversized_);
  }

 private:
  AgentCore* core_;
  const PeerCredRegistry* creds_;
  std::atomic<uint64_t>* pid_refusals_;
  std::atomic<uint64_t>* oversized_;
};

absl::Status ClaimSocketPath(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": ", std::strerror(errno)));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": exists and is not a socket; refusing to replace it"));
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("socket(AF_UNIX) failed");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  const int rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  const int err = errno;
  close(fd);
  if (rc == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": another agent is serving on this socket; not taking it over"));
  }
  if (err != ECONNREFUSED) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": cannot probe socket: ", std::strerror(err)));
  }
  Logger("agent.ingest")->warn("{}: removing stale socket", path);
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": cannot remove stale socket: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

namespace {

// A non-blocking listening Unix socket at `path`, mode 0660 (umask 0117
// while binding, so it is never wider). -1 with errno on failure.
int ListenUnix(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  const mode_t old_umask = umask(0117);
  const int rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  umask(old_umask);
  if (rc != 0 || listen(fd, 512) != 0) {
    const int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<IngestServer>> IngestServer::Create(
    const std::string& socket_path, const std::string& socket_group,
    AgentCore* core, size_t max_connections,
    const std::vector<grpc::Service*>& extra_services, bool verify_pid,
    PeerCredRegistry* creds) {
  if (socket_path.empty() ||
      socket_path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ingest.socket: path must be 1..107 bytes, got '", socket_path, "'"));
  }
  gid_t gid = static_cast<gid_t>(-1);
  if (!socket_group.empty()) {
    struct group* g = getgrnam(socket_group.c_str());
    if (g == nullptr) {
      return absl::NotFoundError(absl::StrCat(
          "ingest.socket_group: no such group '", socket_group, "'"));
    }
    gid = g->gr_gid;
  }
  const std::string dir = socket_path.substr(0, socket_path.rfind('/') + 1);
  struct stat dir_st;
  if (!dir.empty() &&
      (stat(dir.c_str(), &dir_st) != 0 || !S_ISDIR(dir_st.st_mode))) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ingest.socket: directory '", dir, "' of ", socket_path,
        " does not exist (the systemd unit's RuntimeDirectory=pitstop "
        "creates /run/pitstop)"));
  }
  // Two agents starting at once would both find no live socket and both
  // bind (binding unlinks the file): the lock decides who owns the path,
  // for the agent's lifetime. The lock file is never removed.
  const std::string lock_path = socket_path + ".lock";
  const int lock_fd =
      open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("ingest.socket: cannot open lock file ", lock_path, ": ",
                     std::strerror(errno)));
  }
  if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    close(lock_fd);
    if (err == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          socket_path, ": another agent is serving on this socket (it holds ",
          lock_path, "); not taking it over"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "ingest.socket: cannot lock ", lock_path, ": ", std::strerror(err)));
  }
  if (absl::Status st = ClaimSocketPath(socket_path); !st.ok()) {
    close(lock_fd);
    return st;
  }

  std::unique_ptr<IngestServer> s(new IngestServer());
  s->lock_fd_ = lock_fd;
  s->socket_path_ = socket_path;
  s->core_ = core;
  if (creds != nullptr) s->creds_ = creds;
  s->service_ = std::make_unique<Service>(core, s->creds_, &s->pid_refusals_,
                                          &s->oversized_);
  // The agent owns the listening socket (IngestListener accepts and hands
  // connections to gRPC): owner+group rw, nothing else.
  const int listen_fd = ListenUnix(socket_path);
  if (listen_fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("ingest.socket: cannot listen on ", socket_path, ": ",
                     std::strerror(errno)));
  }
  grpc::ServerBuilder builder;
  ApplyServerKeepalive(&builder);
  builder.SetMaxReceiveMessageSize(kMaxIngestMessageBytes);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             kIdleConnectionMs);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             kHandshakeTimeoutMs);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             kMaxStreamsPerConnection);
  builder.RegisterService(s->service_.get());
  for (grpc::Service* extra : extra_services) builder.RegisterService(extra);
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr) {
    close(listen_fd);
    unlink(socket_path.c_str());
    return absl::UnavailableError(absl::StrCat(
        "ingest.socket: cannot start the server on ", socket_path));
  }
  absl::StatusOr<std::unique_ptr<IngestListener>> listener =
      IngestListener::Create(listen_fd, s->server_.get(), max_connections,
                             verify_pid ? s->creds_ : nullptr);
  if (!listener.ok()) {
    s->Stop(absl::ZeroDuration());
    return listener.status();
  }
  s->listener_ = std::move(*listener);
  chmod(socket_path.c_str(), 0660);
  if (gid != static_cast<gid_t>(-1) &&
      chown(socket_path.c_str(), static_cast<uid_t>(-1), gid) != 0) {
    const std::string err = std::strerror(errno);
    s->Stop(absl::ZeroDuration());
    return absl::PermissionDeniedError(
        absl::StrCat("ingest.socket_group: cannot give ", socket_path,
                     " to group '", socket_group, "': ", err));
  }
  struct stat st;
  if (stat(socket_path.c_str(), &st) == 0) s->inode_ = st.st_ino;
  return s;
}

void IngestServer::Stop(absl::Duration grace) {
  if (stopped_) return;
  stopped_ = true;
  core_->SetStopping();
  if (listener_ != nullptr) listener_->Stop();
  server_->Shutdown(std::chrono::system_clock::now() +
                    absl::ToChronoNanoseconds(grace));
  // Wait() returns when every stream finished; bound it so a stuck reactor
  // can never keep the agent from exiting on SIGTERM.
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  grpc::Server* server = server_.get();
  std::thread([server, done] {
    server->Wait();
    done->set_value();
  }).detach();
  if (finished.wait_for(absl::ToChronoNanoseconds(grace + kStopWaitBound)) !=
      std::future_status::ready) {
    Logger("agent.ingest")
        ->error("ingest server did not finish {} after shutdown; leaving it",
                absl::FormatDuration(grace + kStopWaitBound));
    // Still referenced by the waiting thread: never destroyed.
    (void)server_.release();
    (void)service_.release();
  }
  // Remove the file only if it is still ours.
  struct stat st;
  if (stat(socket_path_.c_str(), &st) == 0 && st.st_ino == inode_) {
    unlink(socket_path_.c_str());
  }
  if (lock_fd_ >= 0) {
    close(lock_fd_);  // releases the lock
    lock_fd_ = -1;
  }
}

IngestServer::~IngestServer() {
  if (server_ != nullptr) Stop(absl::ZeroDuration());
  if (lock_fd_ >= 0) close(lock_fd_);
}

}  // namespace pitstop::agent
