// ProcessGroupPitstopNccl: a PyTorch c10d process group whose collectives
// call the NCCL C API (ncclAllReduce, ncclBroadcast, ...) of whatever
// libnccl.so.2 the loader found. A test and demo component for machines
// without a GPU: with the CPU NCCL backend (src/nccl/cpu) as libnccl.so.2,
// real PyTorch jobs (DDP, send/recv pipelines) run through the same C calls
// the pitstop library sees under torch's own 'nccl' backend on GPUs. On GPU
// machines users keep torch's 'nccl' backend; this one takes CPU tensors
// only. Python: pitstop.torch.nccl_backend (docs/pytorch.md).
//
// Model: one NCCL communicator per process group, made at construction
// (rank 0's ncclGetUniqueId travels through the c10d Store). Every
// collective is checked on the caller's thread (errors name the op and the
// argument), then queued on the group's worker thread (nccl_worker.h: issue
// order, per-op timeout, poisoned after the first failure) and returns a
// Work whose future completes with the output tensors. Lists of tensors
// (gather, scatter, all-to-all, coalesced ops) become one NCCL group
// (ncclGroupStart/End with ncclSend/ncclRecv or several collectives), as
// ProcessGroupNCCL does; startCoalescing/endCoalescing (batch_isend_irecv)
// put the ops issued between them into one group.
//
// Threads: every public method may be called from any thread (DDP calls
// allreduce from autograd's threads); ops are ordered by the time their
// call queued them. Inputs are read and outputs written on the worker
// thread: like with NCCL, a tensor must not be touched until its Work
// completed.
#ifndef PITSTOP_SRC_TORCH_BACKEND_PROCESS_GROUP_PITSTOP_NCCL_H_
#define PITSTOP_SRC_TORCH_BACKEND_PROCESS_GROUP_PITSTOP_NCCL_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "absl/status/status.h"
#include "pitstop/sync.h"
#include "src/torch_backend/nccl_comm.h"
#include "src/torch_backend/nccl_worker.h"

namespace pitstop::torch_backend {

inline constexpr char kBackendName[] = "pitstop_nccl";
// A Work's title (its name in torch.profiler traces), a string literal:
// PITSTOP_NCCL_TITLE("allreduce") is "pitstop_nccl:allreduce".
#define PITSTOP_NCCL_TITLE(op) ("pitstop_nccl:" op)
inline constexpr size_t kTitlePrefixSize = sizeof(PITSTOP_NCCL_TITLE("")) - 1;

// One queued operation: what runs on the worker thread, in three steps so
// that several ops can share one NCCL group (issue of all, then post of
// all after ncclGroupEnd completed them).
struct QueuedOp {
  std::function<void()> pre;  // before the NCCL calls (pack inputs)
  std::function<absl::Status(NcclComm&)> issue;  // the NCCL calls
  std::function<void()> post;  // after they completed (unpack outputs)
};

class ProcessGroupPitstopNccl : public c10d::ProcessGroup {
 public:
  // Runs its argument, a wait for the worker thread, on the destroying
  // thread. The Python module passes one that releases the interpreter lock
  // if that thread holds it: the worker drops the last references to the
  // ops' tensors, and freeing a tensor that has a Python object takes the
  // lock, so waiting for the worker while holding it would deadlock (the
  // last reference to a group often goes away in Python).
  using BlockingRegion = std::function<void(const std::function<void()>&)>;

  // Exchanges the unique id through `store` (rank 0 makes it, the others
  // wait for it up to `timeout`), creates the communicator (blocks until
  // every rank joined) and starts the worker. `timeout` is also each
  // collective's default timeout. Throws c10::Error on failure.
  ProcessGroupPitstopNccl(const c10::intrusive_ptr<c10d::Store>& store,
                          int rank, int size, std::chrono::milliseconds timeout,
                          BlockingRegion blocking_region = nullptr);
  // Runs the queued ops (each bounded by its timeout), then destroys the
  // communicator (it was aborted if an op failed); the waiting happens
  // inside the BlockingRegion.
  ~ProcessGroupPitstopNccl() override;

  const std::string getBackendName() const override { return kBackendName; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  int nccl_version() const { return nccl_version_; }
  // Whether the worker is inside an NCCL call (after a timeout: until the
  // NCCL call under the failed op returns).
  bool nccl_call_in_flight() const { return worker_->running(); }

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& output_tensors,
      std::vector<at::Tensor>& input_tensors,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& output_lists,
      std::vector<at::Tensor>& input_tensors,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& output_tensors,
      std::vector<at::Tensor>& input_tensors,
      const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& output_tensors,
      std::vector<std::vector<at::Tensor>>& input_tensors,
      const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& output_tensors,
      std::vector<std::vector<at::Tensor>>& input_tensors,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output, at::Tensor& input,
      std::vector<int64_t>& output_split_sizes,
      std::vector<int64_t>& input_split_sizes,
      const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& output_tensors,
      std::vector<at::Tensor>& input_tensors,
      const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors,
                                      int dst_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors,
                                      int src_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts) override;

  // batch_isend_irecv / _coalescing_manager: ops issued between the two
  // calls run as one NCCL group when endCoalescing is called; each still
  // returns its own Work (completed with the group).
  void startCoalescing() override;
  void endCoalescing(
      std::vector<c10::intrusive_ptr<c10d::Work>>& reqs) override;

  // Operations issued since the group was made (or the number was set).
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;

 private:
  class NcclWork;
  struct Pending;

  // Queues `op` (or holds it while coalescing) and returns its Work.
  c10::intrusive_ptr<c10d::Work> Enqueue(c10d::OpType type, const char* title,
                                         QueuedOp op,
                                         const std::vector<at::Tensor>& inputs,
                                         std::vector<at::Tensor> outputs,
                                         std::chrono::milliseconds timeout);
  void Submit(std::vector<Pending> ops);
  absl::Duration TimeoutOf(std::chrono::milliseconds op_timeout) const;

  const std::chrono::milliseconds timeout_;
  const BlockingRegion blocking_region_;
  int nccl_version_ = 0;
  std::shared_ptr<NcclComm> comm_;
  std::unique_ptr<NcclWorker> worker_;

  Mutex mu_;
  bool coalescing_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Pending> coalesced_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> seq_{0};
};

}  // namespace pitstop::torch_backend

#endif  // PITSTOP_SRC_TORCH_BACKEND_PROCESS_GROUP_PITSTOP_NCCL_H_
