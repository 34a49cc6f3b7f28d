// The process group's plumbing (construction, Work, queueing, coalescing)
// and the collectives on one tensor. The collectives on lists of tensors
// are in process_group_lists.cc.
#include "src/torch_backend/process_group_pitstop_nccl.h"

#include <ATen/Functions.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "src/torch_backend/tensor_args.h"

namespace pitstop::torch_backend {
namespace {

constexpr char kUniqueIdKey[] = "pitstop_nccl/unique_id";

// A process pitstop started to take a migrated rank (docs/pytorch.md
// "The process group across the swap"): its communicator must be the
// job's, which the migration finds by the hash of the job's id.
bool MigrationJoiner() {
  const char* role = std::getenv("PITSTOP_MIGRATION_ROLE");
  return role != nullptr && std::strcmp(role, "joiner") == 0;
}

// Rank 0 makes the id and publishes it; the others wait for it. A joiner
// reads it whatever its rank: rank 0 published it when the job started.
ncclUniqueId ExchangeUniqueId(c10d::Store& store, int rank, int size,
                              std::chrono::milliseconds timeout) {
  ncclUniqueId id;
  if (rank == 0 && !MigrationJoiner()) {
    absl::StatusOr<ncclUniqueId> made = NewUniqueId();
    TORCH_CHECK(made.ok(), "pitstop_nccl: rank 0 of ", size,
                " could not make an NCCL unique id: ", made.status().message());
    id = *made;
    const auto* p = reinterpret_cast<const uint8_t*>(id.internal);
    store.set(kUniqueIdKey, std::vector<uint8_t>(p, p + sizeof(id.internal)));
    return id;
  }
  try {
    store.wait({kUniqueIdKey}, timeout);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "pitstop_nccl: rank ", rank, " of ", size, " waited ",
                timeout.count(), " ms for rank 0's NCCL unique id (store key '",
                kUniqueIdKey, "'): ", e.what());
  }
  const std::vector<uint8_t> bytes = store.get(kUniqueIdKey);
  TORCH_CHECK(bytes.size() == sizeof(id.internal), "pitstop_nccl: rank ", rank,
              " read an NCCL unique id of ", bytes.size(),
              " bytes from the store, expected ", sizeof(id.internal));
  std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  return id;
}

}  // namespace

// A Work completed by the worker (or its watchdog) with the op's outcome;
// its future holds the output tensors (DDP's reducer reads them).
class ProcessGroupPitstopNccl::NcclWork : public c10d::Work {
 public:
  NcclWork(int rank, c10d::OpType type, const char* title,
           const std::vector<at::Tensor>& inputs,
           std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type, title, inputs),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::ofTensors())) {}

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    return future_;
  }

  // Called once. `error` is the message of a failure (empty: success).
  void Complete(const std::string& error) {
    if (error.empty()) {
      finish();
      future_->markCompleted(c10::IValue(outputs_));
      return;
    }
    auto e = std::make_exception_ptr(c10::Error(error, ""));
    finish(e);
    future_->setError(e);
  }

 private:
  const std::vector<at::Tensor> outputs_;
  const c10::intrusive_ptr<c10::ivalue::Future> future_;
};

struct ProcessGroupPitstopNccl::Pending {
  std::string name;
  QueuedOp op;
  c10::intrusive_ptr<NcclWork> work;
  absl::Duration timeout;
};

ProcessGroupPitstopNccl::ProcessGroupPitstopNccl(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout, BlockingRegion blocking_region)
    : c10d::ProcessGroup(rank, size),
      timeout_(timeout),
      blocking_region_(std::move(blocking_region)) {
  TORCH_CHECK(store, "pitstop_nccl: no store");
  TORCH_CHECK(size >= 1 && rank >= 0 && rank < size, "pitstop_nccl: rank ",
              rank, " is not in [0, ", size, ")");
  absl::StatusOr<int> version = NcclVersion();
  TORCH_CHECK(version.ok(), "pitstop_nccl: ", version.status().message());
  nccl_version_ = *version;
  const ncclUniqueId id = ExchangeUniqueId(*store, rank, size, timeout);
  absl::StatusOr<std::unique_ptr<NcclComm>> comm =
      NcclComm::Create(id, rank, size);
  TORCH_CHECK(comm.ok(), "pitstop_nccl: rank ", rank, " of ", size,
              " could not create its NCCL communicator (libnccl.so.2: ",
              NcclLibraryPath(), "): ", comm.status().message());
  comm_ = std::move(*comm);
  NcclWorker::Options options;
  // After a failure no NCCL call is in flight on this communicator: abort
  // it so peers still blocked on this rank fail at once (NCCL's way out).
  options.on_error = [comm = comm_] { comm->Abort(); };
  worker_ = std::make_unique<NcclWorker>(std::move(options));
  init();
}

ProcessGroupPitstopNccl::~ProcessGroupPitstopNccl() {
  {
    MutexLock lock(&mu_);
    if (!coalesced_.empty()) Submit(std::move(coalesced_));
    coalesced_.clear();
  }
  auto drain = [this] {
    worker_.reset();  // drains the queue
    comm_.reset();    // ncclCommDestroy unless aborted or still in use
  };
  if (blocking_region_) {
    blocking_region_(drain);
  } else {
    drain();
  }
}

absl::Duration ProcessGroupPitstopNccl::TimeoutOf(
    std::chrono::milliseconds op_timeout) const {
  const std::chrono::milliseconds t =
      op_timeout == c10d::kUnsetTimeout ? timeout_ : op_timeout;
  return absl::FromChrono(t);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPitstopNccl::Enqueue(
    c10d::OpType type, const char* title, QueuedOp op,
    const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> outputs,
    std::chrono::milliseconds timeout) {
  // The profiler keeps the title's pointer: a string literal.
  const char* name = title + kTitlePrefixSize;
  auto work = c10::make_intrusive<NcclWork>(rank_, type, title, inputs,
                                            std::move(outputs));
  seq_.fetch_add(1, std::memory_order_relaxed);
  Pending p{name, std::move(op), work, TimeoutOf(timeout)};
  {
    MutexLock lock(&mu_);
    if (coalescing_) {
      coalesced_.push_back(std::move(p));
      return work;
    }
  }
  std::vector<Pending> one;
  one.push_back(std::move(p));
  Submit(std::move(one));
  return work;
}

// One worker task for `ops`: a single op runs alone; several (coalesced)
// share one NCCL group.
void ProcessGroupPitstopNccl::Submit(std::vector<Pending> ops) {
  auto shared = std::make_shared<std::vector<Pending>>(std::move(ops));
  NcclWorker::Task task;
  std::vector<std::string> names;
  task.timeout = absl::ZeroDuration();
  for (const Pending& p : *shared) {
    names.push_back(p.name);
    task.timeout = std::max(task.timeout, p.timeout);
  }
  task.what = names.size() == 1 ? names[0]
                                : absl::StrCat("coalesced [",
                                               absl::StrJoin(names, ", "), "]");
  task.run = [shared, comm = comm_]() -> absl::Status {
    for (Pending& p : *shared) {
      if (p.op.pre) p.op.pre();
    }
    absl::Status st;
    if (shared->size() == 1) {
      st = (*shared)[0].op.issue(*comm);
    } else {
      st = comm->Group([&]() -> absl::Status {
        for (Pending& p : *shared) {
          if (absl::Status s = p.op.issue(*comm); !s.ok()) return s;
        }
        return absl::OkStatus();
      });
    }
    if (!st.ok()) return st;
    for (Pending& p : *shared) {
      if (p.op.post) p.op.post();
    }
    return absl::OkStatus();
  };
  task.done = [shared, what = task.what, rank = rank_,
               size = size_](const absl::Status& st) {
    const std::string error =
        st.ok() ? std::string()
                : absl::StrCat(kBackendName, " ", what, " failed on rank ",
                               rank, " of ", size, ": ", st.message(), " [",
                               absl::StatusCodeToString(st.code()), "]");
    for (Pending& p : *shared) p.work->Complete(error);
  };
  worker_->Submit(std::move(task));
}

void ProcessGroupPitstopNccl::startCoalescing() {
  MutexLock lock(&mu_);
  TORCH_CHECK(!coalescing_, "pitstop_nccl: startCoalescing called twice");
  coalescing_ = true;
}

void ProcessGroupPitstopNccl::endCoalescing(
    std::vector<c10::intrusive_ptr<c10d::Work>>& /*reqs: ours already*/) {
  std::vector<Pending> ops;
  {
    MutexLock lock(&mu_);
    TORCH_CHECK(coalescing_,
                "pitstop_nccl: endCoalescing without startCoalescing");
    coalescing_ = false;
    ops.swap(coalesced_);
  }
  if (!ops.empty()) Submit(std::move(ops));
}

void ProcessGroupPitstopNccl::setSequenceNumberForGroup() { seq_ = 0; }

uint64_t ProcessGroupPitstopNccl::getSequenceNumberForGroup() { return seq_; }

c10::intrusive_ptr<c10d::Work> ProcessGroupPitstopNccl::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  const at::Tensor& t = CheckSingle("allreduce", "tensors", tensors);
  const ncclDataType_t type =
      NcclType("allreduce", "tensors[0]", t.scalar_type());
  const ncclRedOp_t op = NcclRedOp("allreduce", opts.reduceOp, nccl_version_);
  QueuedOp q;
  q.issue = [t, type, op](NcclComm& c) {
    return c.AllReduce(t.data_ptr(), t.data_ptr(), t.numel(), type, op);
  };
  return Enqueue(c10d::OpType::ALLREDUCE, PITSTOP_NCCL_TITLE("allreduce"),
                 std::move(q), tensors, tensors, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPitstopNccl::allreduce_coalesced(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(),
              "pitstop_nccl allreduce_coalesced: tensors is empty");
  std::vector<ncclDataType_t> types;
  for (size_t i = 0; i < tensors.size(); ++i) {
    types.push_back(CheckTensor("allreduce_coalesced",
                                absl::StrCat("tensors[", i, "]"), tensors[i]));
  }
  const ncclRedOp_t op =
      NcclRedOp("allreduce_coalesced", opts.reduceOp, nccl_version_);
  QueuedOp q;
  q.issue = [tensors, types, op](NcclComm& c) {
    return c.Group([&]() -> absl::Status {
      for (size_t i = 0; i < tensors.size(); ++i) {
        const at::Tensor& t = tensors[i];
        if (absl::Status s = c.AllReduce(t.data_ptr(), t.data_ptr(), t.numel(),
                                         types[i], op);
            !s.ok()) {
          return s;
        }
      }
      return absl::OkStatus();
    });
  };
  return Enqueue(c10d::OpType::ALLREDUCE_COALESCED,
                 PITSTOP_NCCL_TITLE("allreduce_coalesced"), std::move(q),
                 tensors, tensors, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPitstopNccl::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  const at::Tensor& t = CheckSingle("broadcast", "tensors", tensors);
  const ncclDataType_t type =
      NcclType("broadcast", "tensors[0]", t.scalar_type());
  CheckRank("broadcast", "root rank", opts.rootRank, size_);
  TORCH_CHECK(opts.rootTensor == 0, "pitstop_nccl broadcast: root tensor ",
              opts.rootTensor, " out of range (one tensor per process)");
  const int root = static_cast<int>(opts.rootRank);
  QueuedOp q;
  q.issue = [t, type, root](NcclComm& c) {
    return c.Broadcast(t.data_ptr(), t.data_ptr(), t.numel(), type, root);
  };
  return Enqueue(c10d::OpType::BROADCAST, PITSTOP_NCCL_TITLE("broadcast"),
                 std::move(q), tensors, tensors, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPitstopNccl::reduce(
    std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  const at::Tensor& t = CheckSingle("reduce", "tensors", tensors);
  const ncclDataType_t type = NcclType("reduce", "tensors[0]", t.scalar_type());
  const ncclRedOp_t op = NcclRedOp("reduce", opts.reduceOp, nccl_version_);
  CheckRank("reduce", "root rank", opts.rootRank, size_);
  TORCH_CHECK(opts.rootTensor == 0, "pitstop_nccl reduce: root tensor ",
              opts.rootTensor, " out of range (one tensor per process)");
  const int root = static_cast<int>(opts.rootRank);
  QueuedOp q;
  q.issue = [t, type, op, root](NcclComm& c) {
    return c.Reduce(t.data_ptr(), t.data_ptr(), t.numel(), type, op, root);
  };
  return Enqueue(c10d::OpType::REDUCE, PITSTOP_NCCL_TITLE("reduce"),
                 std::move(q), tensors, tensors, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPitstopNccl::send(
    std::vector<at::Tensor>& tensors, int dst_rank, int /*tag*/) {
  const at::Tensor& t = CheckSingle("send", "tensors", tensors);
  const ncclDataType_t type = NcclType("send", "tensors[0]", t.scalar_type());
  CheckRank("send", "destination", dst_rank, size_);
  TORCH_CHECK(dst_rank != rank_, "pitstop_nccl send: rank ", rank_,
              " cannot send to itself");
  QueuedOp q;
  q.issue = [t, type, dst_rank](NcclComm& c) {
    return c.Send(t.data_ptr(), t.numel(), type, dst_rank);
  };
  return Enqueue(c10d::OpType::SEND, PITSTOP_NCCL_TITLE("send"), std::move(q),
                 tensors, {}, c10d::kUnsetTimeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPitstopNccl::recv(
    std::vector<at::Tensor>& tensors, int src_rank, int /*tag*/) {
  const at::Tensor& t = CheckSingle("recv", "tensors", tensors);
  const ncclDataType_t type = NcclType("recv", "tensors[0]", t.scalar_type());
  CheckRank("recv", "source", src_rank, size_);
  TORCH_CHECK(src_rank != rank_, "pitstop_nccl recv: rank ", rank_,
              " cannot receive from itself");
  QueuedOp q;
  q.issue = [t, type, src_rank](NcclComm& c) {
    return c.Recv(t.data_ptr(), t.numel(), type, src_rank);
  };
  return Enqueue(c10d::OpType::RECV, PITSTOP_NCCL_TITLE("recv"), std::move(q),
                 {}, tensors, c10d::kUnsetTimeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPitstopNccl::recvAnysource(
    std::vector<at::Tensor>& /*tensors*/, int /*tag*/) {
  TORCH_CHECK(false,
              "pitstop_nccl recv: a source rank is required (NCCL has no "
              "receive from any source)");
}

// A small all-reduce, like ProcessGroupNCCL's barrier: every rank returns
// from wait() only after all ranks issued it.
c10::intrusive_ptr<c10d::Work> ProcessGroupPitstopNccl::barrier(
    const c10d::BarrierOptions& opts) {
  at::Tensor t = at::zeros({1}, at::kFloat);
  QueuedOp q;
  q.issue = [t](NcclComm& c) {
    return c.AllReduce(t.data_ptr(), t.data_ptr(), 1, ncclFloat32, ncclSum);
  };
  return Enqueue(c10d::OpType::BARRIER, PITSTOP_NCCL_TITLE("barrier"),
                 std::move(q), {}, {}, opts.timeout);
}

}  // namespace pitstop::torch_backend
