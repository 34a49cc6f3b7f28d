#include "src/nccl/cpu/cpu_comm.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gloo/allgather.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/reduce.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"
#include "gloo/types.h"
#include "pitstop/status_macros.h"
#include "src/nccl/cpu/first_failure.h"
#include "src/nccl/cpu/reduce_ops.h"
#include "src/nccl/cpu/ring_allreduce.h"

namespace pitstop::cpunccl {
namespace {

// gloo writes to its sockets without MSG_NOSIGNAL, so a write to a peer that
// is gone raises SIGPIPE, whose default action kills the training process: a
// dead peer must be an error instead. Python-based trainers already ignore
// SIGPIPE; a plain C++ process gets the same here. A handler the application
// installed is left alone.
void IgnoreSigpipeUnlessHandled() {
  struct sigaction current;
  if (sigaction(SIGPIPE, nullptr, &current) != 0) return;
  if ((current.sa_flags & SA_SIGINFO) == 0 && current.sa_handler == SIG_DFL) {
    struct sigaction ignore = {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    (void)sigaction(SIGPIPE, &ignore, nullptr);
  }
}

constexpr char kIdMagic[8] = {'P', 'S', 'C', 'P', 'U', 'N', 'C', '1'};
constexpr size_t kIdDirOffset = 16;  // magic (8) + nonce (8)
// Slot prefix of point-to-point transfers (gloo's collectives use 0x01..0x08).
constexpr uint8_t kP2pSlotPrefix = 0x40;
constexpr size_t kHostBytes = 64;
// What each rank tells the others at init: host name, then the address of
// its ring listener.
constexpr size_t kInitRecordBytes = kHostBytes + sizeof(sockaddr_storage);

// One TCP device per process, shared by all communicators (gloo allows it),
// and the address it binds, which the ring connections bind too.
// Address: $PITSTOP_CPU_NCCL_HOST, else the interface in
// $NCCL_SOCKET_IFNAME, else loopback. Throws like gloo if it cannot be
// resolved.
struct LocalDevice {
  std::shared_ptr<gloo::transport::Device> device;
  sockaddr_storage address;
};
const LocalDevice& Local() {
  static std::mutex mu;
  static LocalDevice* local = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (local == nullptr) {
    gloo::transport::tcp::attr attr;
    const char* host = std::getenv("PITSTOP_CPU_NCCL_HOST");
    const char* iface = std::getenv("NCCL_SOCKET_IFNAME");
    if (host != nullptr && host[0] != '\0') {
      attr.hostname = host;
    } else if (iface != nullptr && iface[0] != '\0') {
      attr.iface = iface;
    } else {
      attr.hostname = "127.0.0.1";
    }
    const gloo::transport::tcp::attr resolved =
        gloo::transport::tcp::CreateDeviceAttr(attr);
    local = new LocalDevice{gloo::transport::tcp::CreateDevice(attr),
                            resolved.ai_addr};
  }
  return *local;
}

uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

std::string HostName() {
  const char* env = std::getenv("PITSTOP_HOST");  // emulated nodes
  if (env != nullptr && env[0] != '\0') return env;
  char buf[kHostBytes] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

// gloo's options take the element size from a C++ type; ours comes from the
// NCCL datatype, so pick an unsigned type of that size (the reduce function
// knows the real type).
template <typename Options>
void SetTypedOutput(Options& o, void* p, size_t count, size_t es) {
  switch (es) {
    case 1:
      o.template setOutput<uint8_t>(static_cast<uint8_t*>(p), count);
      break;
    case 2:
      o.template setOutput<uint16_t>(static_cast<uint16_t*>(p), count);
      break;
    case 4:
      o.template setOutput<uint32_t>(static_cast<uint32_t*>(p), count);
      break;
    default:
      o.template setOutput<uint64_t>(static_cast<uint64_t*>(p), count);
      break;
  }
}

absl::Status Unsupported(ncclDataType_t type, ncclRedOp_t op) {
  return absl::InvalidArgumentError(absl::StrCat(
      "unsupported datatype ", static_cast<int>(type), " or reduction op ",
      static_cast<int>(op), " (fp8 and custom ops are not implemented)"));
}

}  // namespace

std::chrono::milliseconds DefaultTimeout() {
  const char* env = std::getenv("PITSTOP_CPU_NCCL_TIMEOUT_MS");
  if (env != nullptr) {
    char* end = nullptr;
    const long long v = std::strtoll(env, &end, 10);
    if (end != env && *end == '\0' && v > 0) {
      return std::chrono::milliseconds(v);
    }
  }
  return std::chrono::milliseconds(300'000);
}

absl::StatusOr<ncclUniqueId> NewUniqueId() {
  std::string dir;
  if (const char* env = std::getenv("PITSTOP_CPU_NCCL_STORE_DIR");
      env != nullptr && env[0] != '\0') {
    dir = env;
  } else {
    const char* tmp = std::getenv("TMPDIR");
    dir = absl::StrCat(tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp",
                       "/pitstop-cpu-nccl");
  }
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::UnavailableError(absl::StrCat(
        "cannot create store directory ", dir, ": ", std::strerror(errno)));
  }
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (dir.size() + 1 > sizeof(id.internal) - kIdDirOffset) {
    return absl::InvalidArgumentError(
        absl::StrCat("store directory path too long for a unique id (max ",
                     sizeof(id.internal) - kIdDirOffset - 1, " bytes): ", dir));
  }
  std::random_device rd;
  const uint64_t nonce = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                         static_cast<uint64_t>(getpid());
  std::memcpy(id.internal, kIdMagic, 8);
  std::memcpy(id.internal + 8, &nonce, 8);
  std::memcpy(id.internal + kIdDirOffset, dir.data(), dir.size());
  return id;
}

absl::StatusOr<UniqueIdContents> DecodeUniqueId(const ncclUniqueId& id) {
  if (std::memcmp(id.internal, kIdMagic, 8) != 0) {
    return absl::InvalidArgumentError(
        "not a unique id of the CPU NCCL backend (bad magic)");
  }
  UniqueIdContents c;
  std::memcpy(&c.nonce, id.internal + 8, 8);
  const char* dir = id.internal + kIdDirOffset;
  const size_t n = strnlen(dir, sizeof(id.internal) - kIdDirOffset);
  if (n == 0 || n == sizeof(id.internal) - kIdDirOffset) {
    return absl::InvalidArgumentError("unique id without a store directory");
  }
  c.store_dir.assign(dir, n);
  return c;
}

CpuComm::CpuComm(const CommOptions& options) : options_(options) {}

CpuComm::~CpuComm() {
  profiler_.reset();  // plugin finalize first, like NCCL's comm free
  context_.reset();   // closes the pairs
}

absl::Status CpuComm::error() const {
  MutexLock lock(&mu_);
  return error_;
}

void CpuComm::SetError(const absl::Status& status) {
  MutexLock lock(&mu_);
  if (error_.ok()) error_ = status;
}

template <typename F>
absl::Status CpuComm::Guard(const char* what, F&& body) {
  if (absl::Status e = error(); !e.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": communicator is in error: ", e.message()));
  }
  absl::Status st;
  try {
    body();
    return absl::OkStatus();
  } catch (const gloo::IoException& e) {
    st = absl::UnavailableError(absl::StrCat(what, ": ", e.what()));
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    st = msg.find("imed out") != std::string::npos
             ? absl::DeadlineExceededError(absl::StrCat(what, ": ", msg))
             : absl::InternalError(absl::StrCat(what, ": ", msg));
  } catch (...) {
    st = absl::InternalError(absl::StrCat(what, ": unknown exception"));
  }
  st = WithFirstFailure(first_failure_path(), rank(), st);
  SetError(st);
  CloseConnections();
  return st;
}

// A peer blocked on this rank (receiving from it in a ring, say) would only
// learn of the failure at its own timeout, a whole timeout after the others:
// survivors would then reach ncclCommShrink that far apart and the rebuild's
// rendezvous could time out. Closing every connection of the failed
// communicator makes each peer's next or pending transfer with this rank fail
// at once, so the error spreads through the communicator in milliseconds.
void CpuComm::CloseConnections() {
  if (ring_ != nullptr) ring_->Close();
  if (context_ == nullptr) return;
  try {
    context_->closeConnections();
  } catch (...) {
    // Best effort: the communicator is in error whether or not the
    // connections could be closed.
  }
}

absl::StatusOr<std::unique_ptr<CpuComm>> CpuComm::Create(
    const CommOptions& options) {
  if (options.n_ranks < 1 || options.rank < 0 ||
      options.rank >= options.n_ranks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", options.rank, " not in [0, ", options.n_ranks, ")"));
  }
  IgnoreSigpipeUnlessHandled();
  std::unique_ptr<CpuComm> comm(new CpuComm(options));
  if (absl::Status st = comm->Connect(); !st.ok()) return st;
  return comm;
}

absl::Status CpuComm::Connect() {
  std::vector<char> records(kInitRecordBytes * size());
  absl::Status st = Guard("communicator init", [&] {
    file_store_ =
        std::make_shared<gloo::rendezvous::FileStore>(options_.store_dir);
    store_ = std::make_shared<gloo::rendezvous::PrefixStore>(options_.prefix,
                                                             *file_store_);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank(), size());
    ctx->setTimeout(options_.timeout);
    const LocalDevice& local = Local();
    std::shared_ptr<gloo::transport::Device> dev = local.device;
    ctx->connectFullMesh(*store_, dev);
    context_ = ctx;
    std::vector<char> mine(kInitRecordBytes, 0);
    if (size() > 1) {
      auto ring = RingTransport::Listen(local.address);
      if (!ring.ok()) throw gloo::IoException(ring.status().ToString());
      ring_ = std::move(*ring);
      std::memcpy(mine.data() + kHostBytes, &ring_->listen_address(),
                  sizeof(sockaddr_storage));
    }
    // Which ranks share a host: n_nodes for the profiler, the local rank
    // for ncclCommCuDevice.
    std::string me = HostName();
    me.resize(kHostBytes - 1);
    std::memcpy(mine.data(), me.data(), me.size());
    gloo::AllgatherOptions ag(context_);
    ag.setInput(mine.data(), kInitRecordBytes);
    ag.setOutput(records.data(), records.size());
    ag.setTag(NextTag());
    gloo::allgather(ag);
  });
  if (!st.ok()) return st;
  if (size() > 1) {
    if (st = ConnectRing(records); !st.ok()) {
      return Failed("communicator init", st);
    }
  }
  std::vector<std::string> names;
  auto host = [&](int r) {
    return std::string(records.data() + r * kInitRecordBytes);
  };
  for (int r = 0; r < size(); ++r) {
    const std::string h = host(r);
    if (r < rank() && h == host(rank())) ++local_rank_;
    if (std::find(names.begin(), names.end(), h) == names.end()) {
      names.push_back(h);
    }
  }
  n_nodes_ = static_cast<int>(names.size());
  sends_to_.assign(size(), 0);
  recvs_from_.assign(size(), 0);
  profiler_ =
      CommProfiler::Init(comm_hash(), options_.name, size(), rank(), n_nodes_);
  return absl::OkStatus();
}

// The ring all-reduce's connections: to rank - 1, from rank + 1.
absl::Status CpuComm::ConnectRing(const std::vector<char>& records) {
  const int left = (rank() + size() - 1) % size();
  const int right = (rank() + 1) % size();
  sockaddr_storage left_address;
  std::memcpy(&left_address,
              records.data() + left * kInitRecordBytes + kHostBytes,
              sizeof(left_address));
  return ring_->Connect(left_address, left, right, rank(), comm_hash(),
                        options_.timeout);
}

absl::Status CpuComm::Failed(const char* what, const absl::Status& st) {
  const absl::Status failed = WithFirstFailure(
      first_failure_path(), rank(),
      absl::Status(st.code(), absl::StrCat(what, ": ", st.message())));
  SetError(failed);
  CloseConnections();
  return failed;
}

uint64_t CpuComm::NextSeq(const char* func) {
  for (auto& [name, n] : seqs_) {
    if (name == func) return n++;
  }
  seqs_.emplace_back(func, 1);
  return 0;
}

absl::Status CpuComm::AllReduce(const void* send, void* recv, size_t count,
                                ncclDataType_t type, ncclRedOp_t op) {
  const ReduceFn fn = ReduceFor(type, op);
  const size_t es = DataTypeSize(type);
  if (fn == nullptr || es == 0) return Unsupported(type, op);
  if (count == 0) return absl::OkStatus();
  if (absl::Status e = error(); !e.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("AllReduce: communicator is in error: ", e.message()));
  }
  if (send != recv) std::memmove(recv, send, count * es);
  if (size() > 1) {
    RingAllReduceArgs a;
    a.buf = recv;
    a.count = count;
    a.element_bytes = es;
    a.fn = fn;
    a.datatype = static_cast<uint32_t>(type);
    a.op = static_cast<uint32_t>(op);
    a.seq = n_allreduces_++;
    a.rank = rank();
    a.n_ranks = size();
    if (absl::Status st = RingAllReduce(*ring_, a, &ring_scratch_); !st.ok()) {
      return Failed("AllReduce", st);
    }
  }
  if (op == ncclAvg) DivideInPlace(recv, count, type, size());
  return absl::OkStatus();
}

absl::Status CpuComm::AllGather(const void* send, void* recv, size_t send_count,
                                ncclDataType_t type) {
  const size_t es = DataTypeSize(type);
  if (es == 0) return Unsupported(type, ncclSum);
  const size_t bytes = send_count * es;
  if (bytes == 0) return absl::OkStatus();
  auto* out = static_cast<char*>(recv);
  // In place (send inside recv) goes through a copy: gloo copies the input
  // into the output itself.
  std::vector<char> copy;
  const char* in = static_cast<const char*>(send);
  if (in + bytes > out && in < out + bytes * size()) {
    copy.assign(in, in + bytes);
    in = copy.data();
  }
  return Guard("AllGather", [&] {
    if (size() == 1) {
      std::memcpy(out, in, bytes);
      return;
    }
    gloo::AllgatherOptions o(context_);
    o.setInput(const_cast<char*>(in), bytes);
    o.setOutput(out, bytes * size());
    o.setTag(NextTag());
    gloo::allgather(o);
  });
}

absl::Status CpuComm::ReduceScatter(const void* send, void* recv,
                                    size_t recv_count, ncclDataType_t type,
                                    ncclRedOp_t op) {
  const size_t es = DataTypeSize(type);
  if (ReduceFor(type, op) == nullptr || es == 0) return Unsupported(type, op);
  if (recv_count == 0) return absl::OkStatus();
  // An all-reduce of the whole buffer, then this rank's block: twice the
  // traffic of a real reduce-scatter, same result and the same
  // deterministic order.
  std::vector<char> all(recv_count * es * size());
  RETURN_IF_ERROR(AllReduce(send, all.data(), recv_count * size(), type, op));
  std::memcpy(recv, all.data() + recv_count * es * rank(), recv_count * es);
  return absl::OkStatus();
}

absl::Status CpuComm::Broadcast(const void* send, void* recv, size_t count,
                                ncclDataType_t type, int root) {
  const size_t es = DataTypeSize(type);
  if (es == 0) return Unsupported(type, ncclSum);
  if (root < 0 || root >= size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("root ", root, " not in [0, ", size(), ")"));
  }
  const size_t bytes = count * es;
  if (bytes == 0) return absl::OkStatus();
  if (rank() == root && send != recv) std::memmove(recv, send, bytes);
  return Guard("Broadcast", [&] {
    if (size() == 1) return;
    gloo::BroadcastOptions o(context_);
    o.setOutput(static_cast<char*>(recv), bytes);
    o.setRoot(root);
    o.setTag(NextTag());
    gloo::broadcast(o);
  });
}

absl::Status CpuComm::Reduce(const void* send, void* recv, size_t count,
                             ncclDataType_t type, ncclRedOp_t op, int root) {
  const ReduceFn fn = ReduceFor(type, op);
  const size_t es = DataTypeSize(type);
  if (fn == nullptr || es == 0) return Unsupported(type, op);
  if (root < 0 || root >= size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("root ", root, " not in [0, ", size(), ")"));
  }
  if (count == 0) return absl::OkStatus();
  // recv is only the root's (NCCL allows NULL elsewhere): others reduce
  // from a scratch copy.
  std::vector<char> scratch;
  void* out = recv;
  if (rank() != root) {
    scratch.assign(static_cast<const char*>(send),
                   static_cast<const char*>(send) + count * es);
    out = scratch.data();
  } else if (send != recv) {
    std::memmove(recv, send, count * es);
  }
  absl::Status st = Guard("Reduce", [&] {
    if (size() == 1) return;
    gloo::ReduceOptions o(context_);
    SetTypedOutput(o, out, count, es);
    o.setRoot(root);
    o.setReduceFunction(fn);
    o.setTag(NextTag());
    gloo::reduce(o);
  });
  if (st.ok() && op == ncclAvg && rank() == root) {
    DivideInPlace(recv, count, type, size());
  }
  return st;
}

absl::Status CpuComm::Barrier() {
  return Guard("Barrier", [&] {
    if (size() == 1) return;
    gloo::BarrierOptions o(context_);
    o.setTag(NextTag());
    gloo::barrier(o);
  });
}

absl::StatusOr<CpuComm::P2p> CpuComm::PostSend(const void* buf, size_t bytes,
                                               int peer) {
  if (peer < 0 || peer >= size() || peer == rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat("send peer ", peer, " not a remote rank"));
  }
  P2p p;
  p.is_send = true;
  absl::Status st = Guard("Send", [&] {
    p.buffer = context_->createUnboundBuffer(const_cast<void*>(buf), bytes);
    const uint32_t n = static_cast<uint32_t>(sends_to_[peer]++);
    p.buffer->send(peer, gloo::Slot::build(kP2pSlotPrefix, n));
  });
  if (!st.ok()) return st;
  return p;
}

absl::StatusOr<CpuComm::P2p> CpuComm::PostRecv(void* buf, size_t bytes,
                                               int peer) {
  if (peer < 0 || peer >= size() || peer == rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat("recv peer ", peer, " not a remote rank"));
  }
  P2p p;
  p.is_send = false;
  absl::Status st = Guard("Recv", [&] {
    p.buffer = context_->createUnboundBuffer(buf, bytes);
    const uint32_t n = static_cast<uint32_t>(recvs_from_[peer]++);
    p.buffer->recv(peer, gloo::Slot::build(kP2pSlotPrefix, n));
  });
  if (!st.ok()) return st;
  return p;
}

absl::Status CpuComm::Wait(P2p& p2p) {
  if (p2p.buffer == nullptr) return absl::OkStatus();
  absl::Status st = Guard(p2p.is_send ? "Send" : "Recv", [&] {
    const bool done = p2p.is_send ? p2p.buffer->waitSend(options_.timeout)
                                  : p2p.buffer->waitRecv(options_.timeout);
    if (!done) throw gloo::IoException("transfer aborted");
  });
  p2p.buffer.reset();
  return st;
}

absl::StatusOr<std::unique_ptr<CpuComm>> CpuComm::Split(
    int color, int key, const std::string& name) {
  if (color < kSplitNoColor) {
    return absl::InvalidArgumentError(
        absl::StrCat("split color ", color, " is negative"));
  }
  std::vector<int32_t> mine = {color, key};
  std::vector<int32_t> all(2 * size());
  RETURN_IF_ERROR(Guard("CommSplit", [&] {
    if (size() == 1) {
      all = mine;
      return;
    }
    gloo::AllgatherOptions o(context_);
    o.setInput(mine.data(), 2);
    o.setOutput(all.data(), all.size());
    o.setTag(NextTag());
    gloo::allgather(o);
  }));
  const uint64_t split = n_splits_++;
  if (color == kSplitNoColor) return std::unique_ptr<CpuComm>();
  // Members of my color ordered by (key, old rank), like NCCL.
  std::vector<std::pair<int, int>> members;
  for (int r = 0; r < size(); ++r) {
    if (all[2 * r] == color) members.emplace_back(all[2 * r + 1], r);
  }
  std::sort(members.begin(), members.end());
  int new_rank = 0;
  while (members[new_rank].second != rank()) ++new_rank;
  CommOptions o = options_;
  o.n_ranks = static_cast<int>(members.size());
  o.rank = new_rank;
  o.prefix = absl::StrCat(options_.prefix, "/split", split, "c", color);
  o.comm_hash = Mix(Mix(options_.comm_hash, 0x5b117 + split), color);
  o.name = name;
  return Create(o);
}

absl::StatusOr<std::unique_ptr<CpuComm>> CpuComm::Shrink(
    const std::vector<int>& excluded, const std::string& name) {
  std::vector<bool> out(size(), false);
  for (int r : excluded) {
    if (r < 0 || r >= size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("excluded rank ", r, " not in [0, ", size(), ")"));
    }
    out[r] = true;
  }
  if (out[rank()]) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank(), " is in its own exclude list"));
  }
  int new_rank = 0, n = 0;
  for (int r = 0; r < size(); ++r) {
    if (out[r]) continue;
    if (r == rank()) new_rank = n;
    ++n;
  }
  // The survivors agree on the prefix without talking over this (perhaps
  // broken) communicator: the shrink count and the exclude set.
  uint64_t set_hash = 0;
  for (int r = 0; r < size(); ++r) {
    if (out[r]) set_hash = Mix(set_hash, static_cast<uint64_t>(r) + 1);
  }
  const uint64_t shrink = n_shrinks_++;
  CommOptions o = options_;
  o.n_ranks = n;
  o.rank = new_rank;
  o.prefix =
      absl::StrFormat("%s/shrink%d-%x", options_.prefix, shrink, set_hash);
  o.comm_hash = Mix(Mix(options_.comm_hash, 0x5a41c + shrink), set_hash);
  o.name = name;
  return Create(o);
}

}  // namespace pitstop::cpunccl
