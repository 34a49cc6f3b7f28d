// One communicator of the CPU NCCL backend: a gloo context (TCP pairs,
// full mesh) over host memory, rendezvous through a gloo FileStore under a
// key prefix taken from the unique id, and the profiler context of the
// plugin NCCL would load.
//
// Every operation runs synchronously on the calling thread and returns when
// this rank's part is complete (the "stream" of the NCCL API is ignored).
// All-reduce (and reduce-scatter, built on it) runs gloo's ring over the
// communicator's own ring connections (ring_allreduce.h, ring_transport.h:
// gloo's pairs stall a small all-reduce for a scheduler tick on a loaded
// machine); the other collectives and send/receive use gloo's pairs.
// Reductions are deterministic: the ring reduces each chunk in a fixed rank
// order, so the same inputs give bit-identical outputs run to run and on
// every rank.
//
// A dead or silent peer never blocks for longer than the communicator's
// timeout: gloo raises an I/O error when a peer's connection closes and a
// timeout otherwise; the operation then returns Unavailable /
// DeadlineExceeded and the communicator is in error (async error set). The
// error names the communicator's first failure when that was another
// member's (first_failure.h): where the failure started, not the live
// neighbour it spread through.
//
// Thread safety: one thread at a time per communicator (NCCL's rule);
// error() may be read from any thread.
#ifndef PITSTOP_SRC_NCCL_CPU_CPU_COMM_H_
#define PITSTOP_SRC_NCCL_CPU_CPU_COMM_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gloo/transport/unbound_buffer.h"
#include "pitstop/sync.h"
#include "src/nccl/cpu/first_failure.h"
#include "src/nccl/cpu/nccl_api.h"
#include "src/nccl/cpu/profiler_hook.h"
#include "src/nccl/cpu/ring_transport.h"

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}
}  // namespace gloo

namespace pitstop::cpunccl {

// What ncclGetUniqueId puts into the 128 bytes: magic, nonce, store
// directory (absolute, NUL-terminated).
struct UniqueIdContents {
  std::string store_dir;
  uint64_t nonce = 0;
};
absl::StatusOr<UniqueIdContents> DecodeUniqueId(const ncclUniqueId& id);
absl::StatusOr<ncclUniqueId> NewUniqueId();  // makes the store directory

struct CommOptions {
  int n_ranks = 0;
  int rank = -1;
  std::string store_dir;
  std::string prefix;  // store key prefix, unique per communicator
  uint64_t comm_hash = 0;
  std::string name;  // ncclConfig_t.commName, may be empty
  std::chrono::milliseconds timeout{300'000};
};

// $PITSTOP_CPU_NCCL_TIMEOUT_MS, else 300 s.
std::chrono::milliseconds DefaultTimeout();

class CpuComm {
 public:
  // Rendezvous and full-mesh connect; blocks until every rank arrived or
  // the timeout passed (DeadlineExceeded/Unavailable).
  static absl::StatusOr<std::unique_ptr<CpuComm>> Create(
      const CommOptions& options);
  ~CpuComm();
  CpuComm(const CpuComm&) = delete;
  CpuComm& operator=(const CpuComm&) = delete;

  int rank() const { return options_.rank; }
  int size() const { return options_.n_ranks; }
  int local_rank() const { return local_rank_; }
  uint64_t comm_hash() const { return options_.comm_hash; }
  CommProfiler* profiler() { return profiler_.get(); }
  // Next coll.seqNumber of `func` (per function, like NCCL).
  uint64_t NextSeq(const char* func);

  // The collectives. Buffers are host memory; send may equal recv.
  absl::Status AllReduce(const void* send, void* recv, size_t count,
                         ncclDataType_t type, ncclRedOp_t op);
  absl::Status AllGather(const void* send, void* recv, size_t send_count,
                         ncclDataType_t type);
  absl::Status ReduceScatter(const void* send, void* recv, size_t recv_count,
                             ncclDataType_t type, ncclRedOp_t op);
  absl::Status Broadcast(const void* send, void* recv, size_t count,
                         ncclDataType_t type, int root);
  absl::Status Reduce(const void* send, void* recv, size_t count,
                      ncclDataType_t type, ncclRedOp_t op, int root);
  absl::Status Barrier();

  // Point to point: Post* starts the transfer, Wait completes it (a group
  // posts all its sends and receives before waiting on any).
  struct P2p {
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
    bool is_send = true;
  };
  absl::StatusOr<P2p> PostSend(const void* buf, size_t bytes, int peer);
  absl::StatusOr<P2p> PostRecv(void* buf, size_t bytes, int peer);
  absl::Status Wait(P2p& p2p);

  // ncclCommSplit: collective over this communicator. nullptr for
  // kSplitNoColor.
  absl::StatusOr<std::unique_ptr<CpuComm>> Split(int color, int key,
                                                 const std::string& name);
  // ncclCommShrink: the ranks not excluded build a new communicator without
  // talking over this one (its excluded peers may be dead).
  absl::StatusOr<std::unique_ptr<CpuComm>> Shrink(
      const std::vector<int>& excluded, const std::string& name);

  // First error an operation hit (ok while healthy); any thread.
  absl::Status error() const;
  void SetError(const absl::Status& status);

 private:
  explicit CpuComm(const CommOptions& options);
  absl::Status Connect();
  absl::Status ConnectRing(const std::vector<char>& addresses);
  uint32_t NextTag() { return tag_++; }
  template <typename F>
  absl::Status Guard(const char* what, F&& body);
  // An operation's failure: the communicator is in error from now on and
  // its connections are closed. The error carries the communicator's first
  // failure when another member failed before (first_failure.h).
  absl::Status Failed(const char* what, const absl::Status& st);
  std::string first_failure_path() const {
    return FirstFailurePath(options_.store_dir, options_.prefix);
  }
  void CloseConnections();

  CommOptions options_;
  std::shared_ptr<gloo::rendezvous::Store> file_store_;
  std::shared_ptr<gloo::rendezvous::Store> store_;
  std::shared_ptr<gloo::Context> context_;
  std::unique_ptr<CommProfiler> profiler_;
  std::unique_ptr<RingTransport> ring_;  // null for a single rank
  std::vector<char> ring_scratch_;
  uint64_t n_allreduces_ = 0;
  int local_rank_ = 0;
  int n_nodes_ = 1;
  uint32_t tag_ = 1;
  uint64_t n_splits_ = 0;
  uint64_t n_shrinks_ = 0;
  std::vector<uint64_t> sends_to_;    // per peer, p2p slot counters
  std::vector<uint64_t> recvs_from_;  // per peer
  std::vector<std::pair<std::string, uint64_t>> seqs_;
  mutable Mutex mu_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pitstop::cpunccl

#endif  // PITSTOP_SRC_NCCL_CPU_CPU_COMM_H_
