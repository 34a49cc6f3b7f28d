// NCCL's tuner plugin ABI, versions 4, 5 and 6 (NCCL 2.24-2.27, 2.28-2.29,
// 2.30; ../shared/docs/nccl-plugin-abi.md sec. 15).
//
// Our own declarations, written from the facts in that document and from
// reading NVIDIA/nccl's tuner interface headers (v4..v6); no NVIDIA header
// is used. All sizes are LP64 (x86-64 / aarch64 Linux); the static_asserts
// pin them.
//
//   v4: name, init(nRanks, nNodes, logger, void** ctx),
//       getCollInfo(...), destroy(ctx)           -- no communicator id
//   v5: name, init(void** ctx, commId, nRanks, nNodes, logger,
//       NvlDomainInfo*, TunerConstants*), getCollInfo(...), finalize(ctx)
//   v6: v5 + getChunkSize(ctx, coll, nBytes, algo, proto, nChannels,
//       size_t* chunkSize); constants and domain info as v5
//
// getCollInfo's cost table is NCCL's contiguous float[numAlgo][numProto]
// passed as float**; a cell of -1.0 (kCostIgnore) is a combination NCCL will
// not use. *nChannels comes in as 0 ("NCCL decides"); a positive value the
// plugin writes caps the channels of that collective.
#ifndef PITSTOP_TUNER_ABI_TUNER_ABI_H_
#define PITSTOP_TUNER_ABI_TUNER_ABI_H_

#include <cstddef>
#include <cstdint>

#include "plugin/abi/profiler_common.h"  // NcclResult, NcclLogger

namespace pitstop::abi {

// ncclFunc_t: a 4-byte C enum.
enum NcclFunc : int {
  kFuncBroadcast = 0,
  kFuncReduce = 1,
  kFuncAllGather = 2,
  kFuncReduceScatter = 3,
  kFuncAllReduce = 4,
  kFuncSendRecv = 5,
  kFuncSend = 6,
  kFuncRecv = 7,
};
static_assert(sizeof(NcclFunc) == 4);

inline constexpr unsigned long kNcclLogSubsysTuning = 0x40;
inline constexpr float kCostIgnore = -1.0f;  // NCCL_ALGO_PROTO_IGNORE

// ncclNvlDomainInfo_v5_t (also v6).
struct NvlDomainInfoV5 {
  int n_nvl_domains;
  int min_ranks_per_nvl_domain;
  int max_ranks_per_nvl_domain;
};
static_assert(sizeof(NvlDomainInfoV5) == 12);

// ncclTunerConstants_v5_t (also v6): NCCL's defaults, which init may
// change. We never do; declared so the pointer's type is honest.
inline constexpr int kTunerAlgosV5 = 7;
inline constexpr int kTunerProtosV5 = 3;
inline constexpr int kTunerHwLinksV5 = 3;
inline constexpr int kTunerCompCapsV5 = 4;
inline constexpr int kTunerScalesV5 = 3;
struct TunerConstantsV5 {
  double base_latencies[kTunerAlgosV5][kTunerProtosV5];
  double hw_latencies[kTunerHwLinksV5][kTunerAlgosV5][kTunerProtosV5];
  double ll_max_bws[kTunerCompCapsV5][kTunerScalesV5];
  double per_ch_max_ring_ll128_bws[kTunerCompCapsV5][kTunerScalesV5];
  double per_ch_max_tree_ll128_bws[kTunerCompCapsV5][kTunerScalesV5];
  double per_ch_max_tree_bws[kTunerCompCapsV5][kTunerScalesV5];
  double per_ch_max_nvls_tree_bws[kTunerCompCapsV5][kTunerScalesV5];
};
static_assert(sizeof(TunerConstantsV5) == 1152);
static_assert(offsetof(TunerConstantsV5, hw_latencies) == 168);
static_assert(offsetof(TunerConstantsV5, ll_max_bws) == 672);
static_assert(offsetof(TunerConstantsV5, per_ch_max_nvls_tree_bws) == 1056);

using TunerGetCollInfoFn = NcclResult (*)(void* ctx, NcclFunc coll,
                                          size_t n_bytes, int num_pipe_ops,
                                          float** coll_cost_table, int num_algo,
                                          int num_proto, int reg_buff,
                                          int* n_channels);

struct TunerV4 {
  const char* name;
  NcclResult (*init)(size_t n_ranks, size_t n_nodes, NcclLogger log,
                     void** ctx);
  TunerGetCollInfoFn get_coll_info;
  NcclResult (*destroy)(void* ctx);
};
static_assert(sizeof(TunerV4) == 32);
static_assert(offsetof(TunerV4, get_coll_info) == 16);

struct TunerV5 {
  const char* name;
  NcclResult (*init)(void** ctx, uint64_t comm_id, size_t n_ranks,
                     size_t n_nodes, NcclLogger log, NvlDomainInfoV5* nvl,
                     TunerConstantsV5* constants);
  TunerGetCollInfoFn get_coll_info;
  NcclResult (*finalize)(void* ctx);
};
static_assert(sizeof(TunerV5) == 32);
static_assert(offsetof(TunerV5, finalize) == 24);

struct TunerV6 {
  const char* name;
  NcclResult (*init)(void** ctx, uint64_t comm_id, size_t n_ranks,
                     size_t n_nodes, NcclLogger log, NvlDomainInfoV5* nvl,
                     TunerConstantsV5* constants);
  TunerGetCollInfoFn get_coll_info;
  NcclResult (*finalize)(void* ctx);
  NcclResult (*get_chunk_size)(void* ctx, NcclFunc coll, size_t n_bytes,
                               int algo, int proto, int n_channels,
                               size_t* chunk_size);
};
static_assert(sizeof(TunerV6) == 40);
static_assert(offsetof(TunerV6, get_chunk_size) == 32);

}  // namespace pitstop::abi

#endif  // PITSTOP_TUNER_ABI_TUNER_ABI_H_
