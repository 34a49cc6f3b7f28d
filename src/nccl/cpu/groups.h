// Operations and groups of the CPU NCCL backend: an operation is checked
// and its API-call profiler events emitted when it is called; it runs at
// once, or at the outermost ncclGroupEnd of its thread (all sends and
// receives posted first, collectives in call order, then the transfers
// waited for).
//
// Threads: group state is per thread, like NCCL's.
#ifndef PITSTOP_SRC_NCCL_CPU_GROUPS_H_
#define PITSTOP_SRC_NCCL_CPU_GROUPS_H_

#include <cstddef>
#include <memory>

#include "src/nccl/cpu/cpu_comm.h"
#include "src/nccl/cpu/nccl_api.h"
#include "src/nccl/cpu/profiler_hook.h"

namespace pitstop::cpunccl {

enum class Kind {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kReduce,
  kSend,
  kRecv
};

struct Pending {
  CpuComm* comm = nullptr;
  Kind kind = Kind::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int root_or_peer = -1;
  OpInfo info;
  std::unique_ptr<emu::Op> prof;
  CpuComm::P2p p2p;
};

// An operation's arguments (root for collectives, peer for send/recv).
Pending Coll(Kind kind, const void* send, void* recv, size_t count,
             ncclDataType_t type, ncclRedOp_t op, int root);
// Runs it now, or queues it in this thread's open group.
ncclResult_t Enqueue(ncclComm_t handle, Pending p);
ncclResult_t GroupStart();
ncclResult_t GroupEnd();

}  // namespace pitstop::cpunccl

#endif  // PITSTOP_SRC_NCCL_CPU_GROUPS_H_
