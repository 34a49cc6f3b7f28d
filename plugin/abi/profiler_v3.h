// NCCL profiler ABI v3 (NCCL 2.26): descriptor, state args, function table.
// Our own declarations from ../shared/docs/nccl-plugin-abi.md secs. 6.4, 5.1,
// 7; the static_asserts pin the measured LP64 sizes and offsets.
#ifndef PITSTOP_PLUGIN_ABI_PROFILER_V3_H_
#define PITSTOP_PLUGIN_ABI_PROFILER_V3_H_

#include <cstddef>
#include <cstdint>

#include "plugin/abi/profiler_common.h"

namespace pitstop::abi {

struct DescrV3 {
  uint8_t type;
  void* parent_obj;
  int rank;
  union {
    struct {
      const char* name;
      uint64_t comm_hash;
      uint64_t seq_number;
      const char* func;
      const void* send_buff;
      void* recv_buff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t n_max_channels;
      uint8_t n_warps;
      const char* algo;
      const char* proto;
    } coll;
    struct {
      const char* name;
      uint64_t comm_hash;
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channel_id;
      int peer;
      int n_steps;
      int chunk_size;
      int is_send;
    } proxy_op;
    struct {
      int step;
    } proxy_step;
    struct {
      uint8_t channel_id;
    } kernel_ch;
    struct {
      int64_t id;
      void* data;
    } net_plugin;
  };
};
static_assert(sizeof(DescrV3) == 120);
static_assert(offsetof(DescrV3, parent_obj) == 8);
static_assert(offsetof(DescrV3, rank) == 16);
static_assert(offsetof(DescrV3, coll.comm_hash) == 32);
static_assert(offsetof(DescrV3, coll.seq_number) == 40);
static_assert(offsetof(DescrV3, coll.func) == 48);
static_assert(offsetof(DescrV3, coll.count) == 72);
static_assert(offsetof(DescrV3, coll.root) == 80);
static_assert(offsetof(DescrV3, coll.datatype) == 88);
static_assert(offsetof(DescrV3, coll.n_max_channels) == 96);
static_assert(offsetof(DescrV3, coll.algo) == 104);
static_assert(offsetof(DescrV3, coll.proto) == 112);
static_assert(offsetof(DescrV3, p2p.peer) == 72);
static_assert(offsetof(DescrV3, proxy_op.channel_id) == 28);
static_assert(offsetof(DescrV3, proxy_op.is_send) == 44);

union StateArgsV3 {
  struct {
    size_t trans_size;
    int steps;
  } proxy_op;
  struct {
    int appended_proxy_ops;
  } proxy_ctrl;
};
static_assert(sizeof(StateArgsV3) == 16);

struct ProfilerV3 {
  const char* name;
  NcclResult (*init)(void** context, int* activation_mask);
  NcclResult (*start_event)(void* context, void** handle, DescrV3* descr);
  NcclResult (*stop_event)(void* handle);
  NcclResult (*record_event_state)(void* handle, int state, StateArgsV3* args);
  NcclResult (*finalize)(void* context);
};
static_assert(sizeof(ProfilerV3) == 48);

}  // namespace pitstop::abi

#endif  // PITSTOP_PLUGIN_ABI_PROFILER_V3_H_
