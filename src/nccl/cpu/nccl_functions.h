// Our declarations of the NCCL API functions the CPU backend exports, for
// programs that link it directly (its tests, the deterministic trainer).
// Same signatures as NCCL 2.28.9 (facts: ../shared/docs/nccl-plugin-abi.md
// §16); the "stream" argument is an opaque pointer the backend ignores.
#ifndef PITSTOP_SRC_NCCL_CPU_NCCL_FUNCTIONS_H_
#define PITSTOP_SRC_NCCL_CPU_NCCL_FUNCTIONS_H_

#include <cstddef>

#include "src/nccl/cpu/nccl_api.h"

extern "C" {

ncclResult_t ncclGetVersion(int* version);
const char* ncclGetErrorString(ncclResult_t result);
const char* ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclGetUniqueId(ncclUniqueId* id);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id,
                              int rank);
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks,
                                    ncclUniqueId id, int rank,
                                    ncclConfig_t* config);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* result);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key,
                           ncclComm_t* newcomm, ncclConfig_t* config);
ncclResult_t ncclCommShrink(ncclComm_t comm, int* exclude_ranks,
                            int exclude_count, ncclComm_t* newcomm,
                            ncclConfig_t* config, int shrink_flags);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revoke_flags);
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device);
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count,
                           ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                           void* stream);
ncclResult_t ncclAllGather(const void* send, void* recv, size_t send_count,
                           ncclDataType_t type, ncclComm_t comm, void* stream);
ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recv_count,
                               ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, void* stream);
ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count,
                           ncclDataType_t type, int root, ncclComm_t comm,
                           void* stream);
ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t type, int root,
                       ncclComm_t comm, void* stream);
ncclResult_t ncclReduce(const void* send, void* recv, size_t count,
                        ncclDataType_t type, ncclRedOp_t op, int root,
                        ncclComm_t comm, void* stream);
ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t type,
                      int peer, ncclComm_t comm, void* stream);
ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, void* stream);

}  // extern "C"

// NCCL_CONFIG_INITIALIZER's values for our ncclConfig_t.
inline ncclConfig_t PitstopNcclConfigInit() {
  ncclConfig_t c;
  c.size = sizeof(ncclConfig_t);
  c.magic = pitstop::cpunccl::kConfigMagic;
  c.version = static_cast<unsigned int>(pitstop::cpunccl::kReportedVersion);
  c.blocking = c.cgaClusterSize = c.minCTAs = c.maxCTAs =
      pitstop::cpunccl::kConfigUndefInt;
  c.netName = nullptr;
  c.splitShare = c.trafficClass = pitstop::cpunccl::kConfigUndefInt;
  c.commName = nullptr;
  c.collnetEnable = c.CTAPolicy = c.shrinkShare = c.nvlsCTAs =
      c.nChannelsPerNetPeer = c.nvlinkCentricSched =
          pitstop::cpunccl::kConfigUndefInt;
  return c;
}

#endif  // PITSTOP_SRC_NCCL_CPU_NCCL_FUNCTIONS_H_
