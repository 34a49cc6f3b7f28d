#include "src/torch_backend/nccl_comm.h"

#include <dlfcn.h>
#include <link.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pitstop::torch_backend {
namespace {

absl::StatusCode CodeFor(ncclResult_t result) {
  switch (result) {
    case ncclSystemError:
    case ncclRemoteError:
      return absl::StatusCode::kUnavailable;  // a peer or the network
    case ncclInvalidArgument:
      return absl::StatusCode::kInvalidArgument;
    case ncclInvalidUsage:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

std::string NcclLibraryPath() {
  void* handle = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return "";
  std::string path;
  struct link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr &&
      map->l_name != nullptr) {
    path = map->l_name;
  }
  dlclose(handle);
  return path;
}

const char* NcclResultName(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
    case ncclNumResults:
      break;
  }
  return "unknown ncclResult_t";
}

absl::Status NcclStatus(const char* call, ncclResult_t result,
                        ncclComm_t comm) {
  if (result == ncclSuccess) return absl::OkStatus();
  const char* text = ncclGetErrorString(result);
  const char* last = ncclGetLastError(comm);
  std::string msg =
      absl::StrCat(call, " returned ", NcclResultName(result), " (",
                   static_cast<int>(result), ": ", text ? text : "", ")");
  if (last != nullptr && last[0] != '\0') {
    absl::StrAppend(&msg, ": ", last);
  }
  return absl::Status(CodeFor(result), msg);
}

absl::StatusOr<int> NcclVersion() {
  int version = 0;
  if (absl::Status st =
          NcclStatus("ncclGetVersion", ncclGetVersion(&version), nullptr);
      !st.ok()) {
    return st;
  }
  return version;
}

absl::StatusOr<ncclUniqueId> NewUniqueId() {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (absl::Status st =
          NcclStatus("ncclGetUniqueId", ncclGetUniqueId(&id), nullptr);
      !st.ok()) {
    return st;
  }
  return id;
}

absl::StatusOr<std::unique_ptr<NcclComm>> NcclComm::Create(
    const ncclUniqueId& id, int rank, int size) {
  ncclComm_t comm = nullptr;
  if (absl::Status st = NcclStatus(
          "ncclCommInitRank", ncclCommInitRank(&comm, size, id, rank), nullptr);
      !st.ok()) {
    return st;
  }
  return std::unique_ptr<NcclComm>(new NcclComm(comm, rank, size));
}

NcclComm::~NcclComm() {
  if (comm_ != nullptr) (void)ncclCommDestroy(comm_);
}

absl::Status NcclComm::Check(const char* call, ncclResult_t result) const {
  return NcclStatus(call, result, comm_);
}

absl::Status NcclComm::Live(const char* call) const {
  if (comm_ != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(call, ": the communicator was aborted after an error"));
}

absl::Status NcclComm::AllReduce(const void* send, void* recv, size_t count,
                                 ncclDataType_t type, ncclRedOp_t op) {
  if (absl::Status st = Live("ncclAllReduce"); !st.ok()) return st;
  return Check("ncclAllReduce",
               ncclAllReduce(send, recv, count, type, op, comm_, nullptr));
}

absl::Status NcclComm::Broadcast(const void* send, void* recv, size_t count,
                                 ncclDataType_t type, int root) {
  if (absl::Status st = Live("ncclBroadcast"); !st.ok()) return st;
  return Check("ncclBroadcast",
               ncclBroadcast(send, recv, count, type, root, comm_, nullptr));
}

absl::Status NcclComm::Reduce(const void* send, void* recv, size_t count,
                              ncclDataType_t type, ncclRedOp_t op, int root) {
  if (absl::Status st = Live("ncclReduce"); !st.ok()) return st;
  return Check("ncclReduce",
               ncclReduce(send, recv, count, type, op, root, comm_, nullptr));
}

absl::Status NcclComm::AllGather(const void* send, void* recv,
                                 size_t send_count, ncclDataType_t type) {
  if (absl::Status st = Live("ncclAllGather"); !st.ok()) return st;
  return Check("ncclAllGather",
               ncclAllGather(send, recv, send_count, type, comm_, nullptr));
}

absl::Status NcclComm::ReduceScatter(const void* send, void* recv,
                                     size_t recv_count, ncclDataType_t type,
                                     ncclRedOp_t op) {
  if (absl::Status st = Live("ncclReduceScatter"); !st.ok()) return st;
  return Check(
      "ncclReduceScatter",
      ncclReduceScatter(send, recv, recv_count, type, op, comm_, nullptr));
}

absl::Status NcclComm::Send(const void* buf, size_t count, ncclDataType_t type,
                            int peer) {
  if (absl::Status st = Live("ncclSend"); !st.ok()) return st;
  return Check("ncclSend", ncclSend(buf, count, type, peer, comm_, nullptr));
}

absl::Status NcclComm::Recv(void* buf, size_t count, ncclDataType_t type,
                            int peer) {
  if (absl::Status st = Live("ncclRecv"); !st.ok()) return st;
  return Check("ncclRecv", ncclRecv(buf, count, type, peer, comm_, nullptr));
}

absl::Status NcclComm::Group(absl::FunctionRef<absl::Status()> body) {
  if (absl::Status st = Live("ncclGroupStart"); !st.ok()) return st;
  if (absl::Status st = Check("ncclGroupStart", ncclGroupStart()); !st.ok()) {
    return st;
  }
  absl::Status first = body();
  absl::Status end = Check("ncclGroupEnd", ncclGroupEnd());
  return first.ok() ? end : first;
}

void NcclComm::Abort() {
  if (comm_ == nullptr) return;
  (void)ncclCommAbort(comm_);
  comm_ = nullptr;
}

}  // namespace pitstop::torch_backend
