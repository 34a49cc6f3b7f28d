// Our own declarations of the part of NCCL's C API the torch backend calls
// (facts: ../shared/docs/nccl-plugin-abi.md §16, NCCL's documented API; the
// same signatures since NCCL 2.7, ncclAvg since 2.10). Not NCCL's nccl.h:
// written from the documented ABI and pinned with static_asserts so that a
// mismatch fails the build, not a run.
//
// The backend calls these names through ordinary dynamic binding: the
// extension has a DT_NEEDED on libnccl.so.2 and no RPATH, so each ncclX
// resolves to the first definition in the process's global scope. That is
// the pitstop interposer when libnccl-profiler-pitstop.so is LD_PRELOADed
// (it forwards to NCCL's pncclX), else libnccl.so.2 itself: whatever the
// loader found (the CPU NCCL backend of src/nccl/cpu on machines without a
// GPU, NVIDIA's NCCL elsewhere).
#ifndef PITSTOP_SRC_TORCH_BACKEND_NCCL_API_H_
#define PITSTOP_SRC_TORCH_BACKEND_NCCL_API_H_

#include <cstddef>

// NCCL's own names (the ABI), not ours.
// NOLINTBEGIN(readability-identifier-naming)
extern "C" {

// The enums have a fixed underlying int, as in NCCL's ABI.
typedef enum : int {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
} ncclResult_t;

typedef enum : int {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9,
} ncclDataType_t;

typedef enum : int {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,  // NCCL >= 2.10
} ncclRedOp_t;

typedef struct {
  char internal[128];
} ncclUniqueId;

struct ncclComm;
typedef struct ncclComm* ncclComm_t;

// The `stream` argument is a cudaStream_t (a pointer); the backend passes
// nullptr (the CPU backend ignores it; on a GPU nobody uses this backend).
ncclResult_t ncclGetVersion(int* version);
const char* ncclGetErrorString(ncclResult_t result);
const char* ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclGetUniqueId(ncclUniqueId* id);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id,
                              int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count,
                           ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                           void* stream);
ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count,
                           ncclDataType_t type, int root, ncclComm_t comm,
                           void* stream);
ncclResult_t ncclReduce(const void* send, void* recv, size_t count,
                        ncclDataType_t type, ncclRedOp_t op, int root,
                        ncclComm_t comm, void* stream);
ncclResult_t ncclAllGather(const void* send, void* recv, size_t send_count,
                           ncclDataType_t type, ncclComm_t comm, void* stream);
ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recv_count,
                               ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, void* stream);
ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t type,
                      int peer, ncclComm_t comm, void* stream);
ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, void* stream);

}  // extern "C"
// NOLINTEND(readability-identifier-naming)

static_assert(sizeof(ncclResult_t) == 4);
static_assert(sizeof(ncclDataType_t) == 4);
static_assert(sizeof(ncclRedOp_t) == 4);
static_assert(sizeof(ncclUniqueId) == 128);
static_assert(sizeof(ncclComm_t) == sizeof(void*));

#endif  // PITSTOP_SRC_TORCH_BACKEND_NCCL_API_H_
