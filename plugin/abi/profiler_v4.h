// NCCL profiler ABI v4 (NCCL 2.27): 8-bit `type`, GPU timers on kernelCh,
// and an `init` that takes the comm hash 4th (v5 moves it 2nd).
// Our own declarations from ../shared/docs/nccl-plugin-abi.md secs. 6.3, 5.1,
// 7; the static_asserts pin the measured LP64 sizes and offsets.
#ifndef PITSTOP_PLUGIN_ABI_PROFILER_V4_H_
#define PITSTOP_PLUGIN_ABI_PROFILER_V4_H_

#include <cstddef>
#include <cstdint>

#include "plugin/abi/profiler_common.h"

namespace pitstop::abi {

struct DescrV4 {
  uint8_t type;
  void* parent_obj;
  int rank;
  union {
    struct {
      uint64_t seq_number;
      const char* func;
      const void* send_buff;
      void* recv_buff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t n_channels;
      uint8_t n_warps;
      const char* algo;
      const char* proto;
    } coll;
    struct {
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
      uint8_t n_channels;
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
      uint64_t p_timer;
    } kernel_ch;
    struct {
      int64_t id;
      void* data;
    } net_plugin;
  };
};
static_assert(sizeof(DescrV4) == 104);
static_assert(offsetof(DescrV4, coll.seq_number) == 24);
static_assert(offsetof(DescrV4, coll.count) == 56);
static_assert(offsetof(DescrV4, coll.datatype) == 72);
static_assert(offsetof(DescrV4, coll.n_channels) == 80);
static_assert(offsetof(DescrV4, coll.proto) == 96);
static_assert(offsetof(DescrV4, p2p.peer) == 56);
static_assert(offsetof(DescrV4, p2p.n_channels) == 60);
static_assert(offsetof(DescrV4, kernel_ch.p_timer) == 32);

// Shared by v4, v5 and v6.
union StateArgsV4 {
  struct {
    size_t trans_size;
  } proxy_step;
  struct {
    int appended_proxy_ops;
  } proxy_ctrl;
  struct {
    void* data;
  } net_plugin;
  struct {
    uint64_t p_timer;
  } kernel_ch;
};
static_assert(sizeof(StateArgsV4) == 8);

struct ProfilerV4 {
  const char* name;
  NcclResult (*init)(void** context, int* activation_mask,
                     const char* comm_name, uint64_t comm_hash, int n_nodes,
                     int n_ranks, int rank, NcclLogger logfn);
  NcclResult (*start_event)(void* context, void** handle, DescrV4* descr);
  NcclResult (*stop_event)(void* handle);
  NcclResult (*record_event_state)(void* handle, int state, StateArgsV4* args);
  NcclResult (*finalize)(void* context);
};
static_assert(sizeof(ProfilerV4) == 48);

}  // namespace pitstop::abi

#endif  // PITSTOP_PLUGIN_ABI_PROFILER_V4_H_
