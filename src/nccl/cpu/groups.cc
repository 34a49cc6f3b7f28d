#include "src/nccl/cpu/groups.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/nccl/cpu/comm_handles.h"
#include "src/nccl/cpu/reduce_ops.h"

namespace pitstop::cpunccl {
namespace {

thread_local int t_group_depth = 0;
thread_local std::vector<Pending>* t_pending = nullptr;
thread_local ncclResult_t t_group_error = ncclSuccess;

const char* FuncName(Kind k) {
  switch (k) {
    case Kind::kAllReduce:
      return "AllReduce";
    case Kind::kAllGather:
      return "AllGather";
    case Kind::kReduceScatter:
      return "ReduceScatter";
    case Kind::kBroadcast:
      return "Broadcast";
    case Kind::kReduce:
      return "Reduce";
    case Kind::kSend:
      return "Send";
    case Kind::kRecv:
      return "Recv";
  }
  return "?";
}

absl::Status RunCollective(Pending& p) {
  CpuComm* c = p.comm;
  switch (p.kind) {
    case Kind::kAllReduce:
      return c->AllReduce(p.send, p.recv, p.count, p.type, p.op);
    case Kind::kAllGather:
      return c->AllGather(p.send, p.recv, p.count, p.type);
    case Kind::kReduceScatter:
      return c->ReduceScatter(p.send, p.recv, p.count, p.type, p.op);
    case Kind::kBroadcast:
      return c->Broadcast(p.send, p.recv, p.count, p.type, p.root_or_peer);
    case Kind::kReduce:
      return c->Reduce(p.send, p.recv, p.count, p.type, p.op, p.root_or_peer);
    default:
      return absl::InternalError("not a collective");
  }
}

// Runs one group: posts every send and receive, runs the collectives in
// call order, then waits for the point-to-point transfers. Returns the
// first error.
ncclResult_t RunGroup(std::vector<Pending>& ops) {
  absl::Status first;
  auto note = [&](const absl::Status& st) {
    if (first.ok() && !st.ok()) first = st;
  };
  for (Pending& p : ops) {
    if (p.kind != Kind::kSend && p.kind != Kind::kRecv) continue;
    const size_t bytes = p.count * DataTypeSize(p.type);
    auto posted = p.kind == Kind::kSend
                      ? p.comm->PostSend(p.send, bytes, p.root_or_peer)
                      : p.comm->PostRecv(p.recv, bytes, p.root_or_peer);
    if (posted.ok()) {
      p.p2p = std::move(*posted);
    } else {
      note(posted.status());
    }
  }
  for (Pending& p : ops) {
    if (p.kind == Kind::kSend || p.kind == Kind::kRecv) continue;
    if (p.prof == nullptr) {
      note(RunCollective(p));
      continue;
    }
    absl::Status st;
    p.comm->profiler()->Run(p.prof.get(), p.info,
                            [&] { st = RunCollective(p); });
    note(st);
  }
  for (Pending& p : ops) {
    if (p.kind != Kind::kSend && p.kind != Kind::kRecv) continue;
    if (p.prof == nullptr) {
      note(p.comm->Wait(p.p2p));
      continue;
    }
    absl::Status st;
    p.comm->profiler()->Run(p.prof.get(), p.info,
                            [&] { st = p.comm->Wait(p.p2p); });
    note(st);
  }
  ops.clear();  // profiler ops end before their communicator can go
  return FromStatus(first);
}

}  // namespace

ncclResult_t Enqueue(ncclComm_t handle, Pending p) {
  ncclResult_t r;
  CpuComm* comm = Ready(handle, &r);
  if (comm == nullptr) {
    if (t_group_depth > 0 && t_group_error == ncclSuccess) t_group_error = r;
    return r;
  }
  const size_t es = DataTypeSize(p.type);
  if (es == 0) {
    return Fail(ncclInvalidArgument,
                absl::StrCat("invalid datatype ", static_cast<int>(p.type)));
  }
  p.comm = comm;
  const bool p2p = p.kind == Kind::kSend || p.kind == Kind::kRecv;
  p.info.p2p = p2p;
  p.info.func = FuncName(p.kind);
  p.info.count = p.count;
  p.info.datatype = DataTypeName(p.type);
  p.info.root = p2p ? -1 : p.root_or_peer;
  p.info.peer = p2p ? p.root_or_peer : -1;
  p.info.seq_number = comm->NextSeq(p.info.func);
  p.info.bytes = p.count * es;
  p.info.proxy_peer = p2p ? p.root_or_peer : (comm->rank() + 1) % comm->size();
  p.info.proxy_send = p.kind != Kind::kRecv;
  if (comm->profiler() != nullptr) p.prof = comm->profiler()->Begin(p.info);
  if (t_group_depth > 0) {
    if (t_pending == nullptr) t_pending = new std::vector<Pending>();
    t_pending->push_back(std::move(p));
    return ncclSuccess;
  }
  std::vector<Pending> one;
  one.push_back(std::move(p));
  return RunGroup(one);
}

Pending Coll(Kind kind, const void* send, void* recv, size_t count,
             ncclDataType_t type, ncclRedOp_t op, int root) {
  Pending p;
  p.kind = kind;
  p.send = send;
  p.recv = recv;
  p.count = count;
  p.type = type;
  p.op = op;
  p.root_or_peer = root;
  return p;
}

ncclResult_t GroupStart() {
  if (t_group_depth++ == 0) t_group_error = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t GroupEnd() {
  if (t_group_depth == 0) {
    return Fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  }
  if (--t_group_depth > 0) return ncclSuccess;
  ncclResult_t r = t_group_error;
  if (t_pending != nullptr && !t_pending->empty()) {
    const ncclResult_t run = RunGroup(*t_pending);
    if (r == ncclSuccess) r = run;
  }
  t_group_error = ncclSuccess;
  return r;
}

}  // namespace pitstop::cpunccl
