// One NCCL communicator of the torch backend, behind absl::Status: every
// failed call becomes a status naming the NCCL function, its result
// (ncclGetErrorString) and NCCL's own last error text (ncclGetLastError).
// No torch here, so this compiles fast and is tested without torch.
//
// Threads: Create on any thread; afterwards one thread at a time (NCCL's
// rule for one communicator, and group state is per thread in NCCL): the
// process group's worker thread.
#ifndef PITSTOP_SRC_TORCH_BACKEND_NCCL_COMM_H_
#define PITSTOP_SRC_TORCH_BACKEND_NCCL_COMM_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "src/torch_backend/nccl_api.h"

namespace pitstop::torch_backend {

// ncclGetVersion's code (e.g. 22809 for 2.28.9), or an error.
absl::StatusOr<int> NcclVersion();
// First NCCL version code with ncclAvg (2.10.0).
inline constexpr int kNcclAvgVersion = 21000;

// Path of the loaded object whose soname is libnccl.so.2 ("" if none): the
// NCCL this process calls (an interposer may sit in front of it).
std::string NcclLibraryPath();

// "ncclRemoteError" etc.
const char* NcclResultName(ncclResult_t result);
// ok for ncclSuccess; else a status for `call` with the result's name,
// ncclGetErrorString and the last error of `comm` (may be nullptr).
absl::Status NcclStatus(const char* call, ncclResult_t result, ncclComm_t comm);

// A new unique id (rank 0 makes it; the others receive its 128 bytes).
absl::StatusOr<ncclUniqueId> NewUniqueId();

class NcclComm {
 public:
  // ncclCommInitRank: blocks until all `size` ranks joined (NCCL's own
  // timeout applies; the CPU backend's is $PITSTOP_CPU_NCCL_TIMEOUT_MS).
  static absl::StatusOr<std::unique_ptr<NcclComm>> Create(
      const ncclUniqueId& id, int rank, int size);
  // ncclCommDestroy, or nothing after Abort.
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  absl::Status AllReduce(const void* send, void* recv, size_t count,
                         ncclDataType_t type, ncclRedOp_t op);
  absl::Status Broadcast(const void* send, void* recv, size_t count,
                         ncclDataType_t type, int root);
  absl::Status Reduce(const void* send, void* recv, size_t count,
                      ncclDataType_t type, ncclRedOp_t op, int root);
  absl::Status AllGather(const void* send, void* recv, size_t send_count,
                         ncclDataType_t type);
  absl::Status ReduceScatter(const void* send, void* recv, size_t recv_count,
                             ncclDataType_t type, ncclRedOp_t op);
  absl::Status Send(const void* buf, size_t count, ncclDataType_t type,
                    int peer);
  absl::Status Recv(void* buf, size_t count, ncclDataType_t type, int peer);

  // Runs `body` between ncclGroupStart and ncclGroupEnd (always balanced,
  // even when `body` fails). The first error of `body` or ncclGroupEnd.
  // Operations issued in `body` complete at the outermost ncclGroupEnd.
  absl::Status Group(absl::FunctionRef<absl::Status()> body);

  // ncclCommAbort. Later calls fail with FailedPrecondition.
  void Abort();
  bool aborted() const { return comm_ == nullptr; }

 private:
  NcclComm(ncclComm_t comm, int rank, int size)
      : comm_(comm), rank_(rank), size_(size) {}
  absl::Status Check(const char* call, ncclResult_t result) const;
  absl::Status Live(const char* call) const;

  ncclComm_t comm_;
  const int rank_;
  const int size_;
};

}  // namespace pitstop::torch_backend

#endif  // PITSTOP_SRC_TORCH_BACKEND_NCCL_COMM_H_
