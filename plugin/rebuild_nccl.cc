#include "plugin/rebuild_nccl.h"

#include <time.h>

#include <climits>
#include <cstring>

namespace pitstop::plugin {
namespace {

constexpr unsigned int kConfigMagic = 0xcafebeef;
constexpr unsigned int kConfigVersion = 22800;

template <typename Fn>
bool Load(const char* name, Fn* out, std::string* missing) {
  static_assert(sizeof(Fn) == sizeof(void*));
  void* p = dlsym(RTLD_NEXT, name);
  if (p == nullptr) p = dlsym(RTLD_DEFAULT, name);
  if (p == nullptr) {
    if (missing->empty()) *missing = name;
    return false;
  }
  *out = reinterpret_cast<Fn>(p);
  return true;
}

// Between two polls of an operation NCCL runs in the background.
void Nap() {
  timespec ts{0, 1000000};  // 1 ms
  nanosleep(&ts, nullptr);
}

}  // namespace

NcclConfigV22800 NonBlockingConfig() {
  NcclConfigV22800 c;
  c.size = sizeof(c);
  c.magic = kConfigMagic;
  c.version = kConfigVersion;
  c.blocking = 0;
  c.cga_cluster_size = c.min_ctas = c.max_ctas = INT_MIN;
  c.net_name = nullptr;
  c.split_share = c.traffic_class = INT_MIN;
  c.comm_name = nullptr;
  c.collnet_enable = c.cta_policy = c.shrink_share = INT_MIN;
  c.nvls_ctas = c.n_channels_per_net_peer = c.nvlink_centric_sched = INT_MIN;
  return c;
}

bool LoadRealNcclOps(NcclOps* out, std::string* missing) noexcept {
  try {
    bool ok = Load("pncclCommInitRankConfig", &out->init_rank_config, missing);
    ok &= Load("pncclCommGetAsyncError", &out->get_async_error, missing);
    ok &= Load("pncclCommFinalize", &out->finalize, missing);
    ok &= Load("pncclCommDestroy", &out->destroy, missing);
    ok &= Load("pncclCommAbort", &out->abort, missing);
    ok &= Load("pncclSend", &out->send, missing);
    ok &= Load("pncclRecv", &out->recv, missing);
    ok &= Load("pncclGetErrorString", &out->error_string, missing);
    ok &= Load("pncclGetLastError", &out->last_error, missing);
    ok &= Load("pncclGetUniqueId", &out->get_unique_id, missing);
    return ok;
  } catch (...) {
    return false;
  }
}

std::string DescribeNcclError(const NcclOps& ops, NcclComm comm, NcclResult r) {
  std::string s = ops.error_string != nullptr ? ops.error_string(r) : "error";
  s += " (" + std::to_string(static_cast<int>(r)) + ")";
  const char* last = ops.last_error != nullptr ? ops.last_error(comm) : nullptr;
  if (last != nullptr && last[0] != '\0') {
    s += ": ";
    s.append(last, strnlen(last, 1024));
  }
  return s;
}

OwnedComm OwnedComm::Adopt(NcclComm comm) {
  OwnedComm c;
  c.comm_ = comm;
  c.state_ = comm != nullptr ? State::kReady : State::kEmpty;
  return c;
}

bool OwnedComm::StartInit(const NcclOps& ops, const std::string& id, int rank,
                          int n_ranks, std::string* error) {
  if (state_ != State::kEmpty || id.size() != sizeof(NcclUniqueId)) {
    *error = "internal: init of a used communicator slot or a bad id";
    return false;
  }
  NcclUniqueId uid;
  std::memcpy(uid.internal, id.data(), sizeof(uid.internal));
  NcclConfigV22800 config = NonBlockingConfig();
  NcclComm comm = nullptr;
  const NcclResult r = ops.init_rank_config(&comm, n_ranks, uid, rank, &config);
  comm_ = comm;
  if (r == abi::kNcclSuccess) {
    state_ = State::kReady;  // NCCL may finish a non-blocking init at once
    return true;
  }
  if (r == abi::kNcclInProgress) {
    state_ = State::kInitializing;
    return true;
  }
  *error = "ncclCommInitRankConfig (rank " + std::to_string(rank) + " of " +
           std::to_string(n_ranks) + "): " + DescribeNcclError(ops, comm, r);
  // Left live for the caller to abort: it holds its lock here, and
  // aborting the process's last communicator waits for the exporter's
  // last drain, which takes that lock (rebuild.h, AbortUnlocked).
  state_ = State::kFailed;
  return false;
}

OwnedComm::State OwnedComm::Poll(const NcclOps& ops, std::string* error) {
  if (state_ != State::kInitializing) return state_;
  NcclResult async = abi::kNcclInProgress;
  const NcclResult r = ops.get_async_error(comm_, &async);
  if (r != abi::kNcclSuccess) async = r;
  if (async == abi::kNcclInProgress) return state_;
  if (async == abi::kNcclSuccess) {
    state_ = State::kReady;
  } else {
    state_ = State::kFailed;
    *error =
        "communicator init failed: " + DescribeNcclError(ops, comm_, async);
  }
  return state_;
}

NcclResult OwnedComm::Abort(const NcclOps& ops) {
  if (!live() || comm_ == nullptr) return abi::kNcclSuccess;
  const NcclResult r = ops.abort(comm_);
  // Whatever abort returned, NCCL has released the communicator: it must
  // never be used or destroyed again.
  state_ = State::kAborted;
  return r;
}

NcclResult OwnedComm::FinalizeAndDestroy(const NcclOps& ops) {
  if (state_ == State::kAborted) return abi::kNcclInvalidUsage;
  if (state_ == State::kEmpty || state_ == State::kFreed) {
    return abi::kNcclSuccess;
  }
  std::string ignored;
  while (Poll(ops, &ignored) == State::kInitializing) Nap();
  NcclResult async = abi::kNcclSuccess;
  if (state_ == State::kReady &&
      ops.get_async_error(comm_, &async) == abi::kNcclSuccess &&
      async == abi::kNcclSuccess) {
    NcclResult f = ops.finalize(comm_);
    // A non-blocking communicator finalizes in the background: drained
    // before the destroy.
    while (f == abi::kNcclInProgress) {
      Nap();
      if (ops.get_async_error(comm_, &f) != abi::kNcclSuccess) {
        f = abi::kNcclInternalError;
      }
    }
    if (f == abi::kNcclSuccess) {
      const NcclResult d = ops.destroy(comm_);
      state_ = State::kFreed;
      return d;
    }
  }
  // In error (or its finalize failed: a peer is gone): abort instead.
  return Abort(ops);
}

}  // namespace pitstop::plugin
