// NCCL profiler ABI v6 (NCCL 2.29+): v5 plus copy-engine events appended to
// the descriptor union; every v5 offset and the size (112) are unchanged, so
// one implementation serves both. Our own declarations from
// ../shared/docs/nccl-plugin-abi.md sec. 6.2.
#ifndef PITSTOP_PLUGIN_ABI_PROFILER_V6_H_
#define PITSTOP_PLUGIN_ABI_PROFILER_V6_H_

#include <cstddef>
#include <cstdint>

#include "plugin/abi/profiler_common.h"
#include "plugin/abi/profiler_v5.h"

namespace pitstop::abi {

struct DescrV6 {
  uint64_t type;
  void* parent_obj;
  int rank;
  union {
    PITSTOP_ABI_V5_UNION_MEMBERS
    struct {
      uint64_t seq_number;
      const char* func;
      const void* send_buff;
      void* recv_buff;
      size_t count;
      int root;
      const char* datatype;
      const char* sync_strategy;
      bool intra_batch_sync;
      uint32_t batch_size;
      uint32_t num_batches;
      uint32_t ce_seq_num;
      void* stream;
    } ce_coll;
    struct {
      bool is_complete;
      int n_ranks;
    } ce_coll_sync;
    struct {
      int num_ops;
      size_t total_bytes;
      bool use_intra_sync;
    } ce_coll_batch;
  };
};
static_assert(sizeof(DescrV6) == 112);
static_assert(offsetof(DescrV6, coll.parent_group) == 104);
static_assert(offsetof(DescrV6, ce_coll.sync_strategy) == 80);
static_assert(offsetof(DescrV6, ce_coll.batch_size) == 92);
static_assert(offsetof(DescrV6, ce_coll.stream) == 104);
static_assert(offsetof(DescrV6, ce_coll_batch.total_bytes) == 32);

using StateArgsV6 = StateArgsV4;

struct ProfilerV6 {
  const char* name;
  NcclResult (*init)(void** context, uint64_t comm_id, int* activation_mask,
                     const char* comm_name, int n_nodes, int n_ranks, int rank,
                     NcclLogger logfn);
  NcclResult (*start_event)(void* context, void** handle, DescrV6* descr);
  NcclResult (*stop_event)(void* handle);
  NcclResult (*record_event_state)(void* handle, int state, StateArgsV6* args);
  NcclResult (*finalize)(void* context);
};
static_assert(sizeof(ProfilerV6) == 48);

}  // namespace pitstop::abi

#endif  // PITSTOP_PLUGIN_ABI_PROFILER_V6_H_
