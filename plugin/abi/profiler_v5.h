// NCCL profiler ABI v5 (NCCL 2.28): 64-bit `type`, API-level events
// (GroupApi, CollApi, P2pApi, KernelLaunch), comm id 2nd in `init`.
// Our own declarations from ../shared/docs/nccl-plugin-abi.md secs. 6.1, 5.1,
// 7; the static_asserts pin the measured LP64 sizes and offsets.
#ifndef PITSTOP_PLUGIN_ABI_PROFILER_V5_H_
#define PITSTOP_PLUGIN_ABI_PROFILER_V5_H_

#include <cstddef>
#include <cstdint>

#include "plugin/abi/profiler_common.h"
#include "plugin/abi/profiler_v4.h"

namespace pitstop::abi {

// The v5 union members; v6 appends to them (see profiler_v6.h).
#define PITSTOP_ABI_V5_UNION_MEMBERS \
  struct {                           \
    bool graph_captured;             \
    int group_depth;                 \
  } group_api;                       \
  struct {                           \
    const char* func;                \
    size_t count;                    \
    const char* datatype;            \
    int root;                        \
    void* stream;                    \
    bool graph_captured;             \
  } coll_api;                        \
  struct {                           \
    const char* func;                \
    size_t count;                    \
    const char* datatype;            \
    void* stream;                    \
    bool graph_captured;             \
  } p2p_api;                         \
  struct {                           \
    void* stream;                    \
  } kernel_launch;                   \
  struct {                           \
    uint64_t seq_number;             \
    const char* func;                \
    const void* send_buff;           \
    void* recv_buff;                 \
    size_t count;                    \
    int root;                        \
    const char* datatype;            \
    uint8_t n_channels;              \
    uint8_t n_warps;                 \
    const char* algo;                \
    const char* proto;               \
    void* parent_group;              \
  } coll;                            \
  struct {                           \
    const char* func;                \
    void* buff;                      \
    const char* datatype;            \
    size_t count;                    \
    int peer;                        \
    uint8_t n_channels;              \
    void* parent_group;              \
  } p2p;                             \
  struct {                           \
    pid_t pid;                       \
    uint8_t channel_id;              \
    int peer;                        \
    int n_steps;                     \
    int chunk_size;                  \
    int is_send;                     \
  } proxy_op;                        \
  struct {                           \
    int step;                        \
  } proxy_step;                      \
  struct {                           \
    uint8_t channel_id;              \
    uint64_t p_timer;                \
  } kernel_ch;                       \
  struct {                           \
    int64_t id;                      \
    void* data;                      \
  } net_plugin;

struct DescrV5 {
  uint64_t type;
  void* parent_obj;
  int rank;
  union {
    PITSTOP_ABI_V5_UNION_MEMBERS
  };
};
static_assert(sizeof(DescrV5) == 112);
static_assert(offsetof(DescrV5, parent_obj) == 8);
static_assert(offsetof(DescrV5, rank) == 16);
static_assert(offsetof(DescrV5, group_api.group_depth) == 28);
static_assert(offsetof(DescrV5, coll_api.count) == 32);
static_assert(offsetof(DescrV5, coll_api.root) == 48);
static_assert(offsetof(DescrV5, coll_api.graph_captured) == 64);
static_assert(offsetof(DescrV5, p2p_api.graph_captured) == 56);
static_assert(offsetof(DescrV5, coll.seq_number) == 24);
static_assert(offsetof(DescrV5, coll.count) == 56);
static_assert(offsetof(DescrV5, coll.root) == 64);
static_assert(offsetof(DescrV5, coll.datatype) == 72);
static_assert(offsetof(DescrV5, coll.n_channels) == 80);
static_assert(offsetof(DescrV5, coll.n_warps) == 81);
static_assert(offsetof(DescrV5, coll.algo) == 88);
static_assert(offsetof(DescrV5, coll.proto) == 96);
static_assert(offsetof(DescrV5, coll.parent_group) == 104);
static_assert(offsetof(DescrV5, p2p.count) == 48);
static_assert(offsetof(DescrV5, p2p.peer) == 56);
static_assert(offsetof(DescrV5, p2p.n_channels) == 60);
static_assert(offsetof(DescrV5, p2p.parent_group) == 64);
static_assert(offsetof(DescrV5, proxy_op.pid) == 24);
static_assert(offsetof(DescrV5, proxy_op.channel_id) == 28);
static_assert(offsetof(DescrV5, proxy_op.peer) == 32);
static_assert(offsetof(DescrV5, proxy_op.n_steps) == 36);
static_assert(offsetof(DescrV5, proxy_op.chunk_size) == 40);
static_assert(offsetof(DescrV5, proxy_op.is_send) == 44);
static_assert(offsetof(DescrV5, kernel_ch.p_timer) == 32);
static_assert(offsetof(DescrV5, net_plugin.data) == 32);

using StateArgsV5 = StateArgsV4;

struct ProfilerV5 {
  const char* name;
  NcclResult (*init)(void** context, uint64_t comm_id, int* activation_mask,
                     const char* comm_name, int n_nodes, int n_ranks, int rank,
                     NcclLogger logfn);
  NcclResult (*start_event)(void* context, void** handle, DescrV5* descr);
  NcclResult (*stop_event)(void* handle);
  NcclResult (*record_event_state)(void* handle, int state, StateArgsV5* args);
  NcclResult (*finalize)(void* context);
};
static_assert(sizeof(ProfilerV5) == 48);

}  // namespace pitstop::abi

#endif  // PITSTOP_PLUGIN_ABI_PROFILER_V5_H_
