// Fixed-size records the hot path writes into the per-thread rings and the
// exporter packs into telemetry.proto batches (proto/pitstop/v1/telemetry.proto
// names the fields). Plain data: no pointers except NCCL's static string
// literals (func/datatype/algo/proto), mapped to enums on the exporter thread.
// Times: *_cpu_ns CLOCK_MONOTONIC, *_gpu_ns GPU %globaltimer.
#ifndef PITSTOP_PLUGIN_RECORD_H_
#define PITSTOP_PLUGIN_RECORD_H_

#include <cstddef>
#include <cstdint>

namespace pitstop::plugin {

enum class RecordType : uint8_t {
  kNone = 0,
  kOp = 1,          // -> OpRecord
  kCompletion = 2,  // -> OpCompletion
  kKernelCh = 3,    // -> KernelChannelRecord
  kProxyOp = 4,     // -> ProxyOpRecord
  kProxyStep = 5,   // -> ProxyStepRecord
  kNetPlugin = 6,   // -> NetPluginRecord
};

struct OpRec {
  uint64_t op_id;
  uint64_t comm_hash;
  int32_t rank;
  uint8_t is_p2p;
  uint8_t n_channels;
  uint8_t n_warps;
  uint8_t graph_captured : 1;
  uint8_t graph_replay : 1;
  uint64_t seq_number;
  uint64_t count;
  int32_t root;
  int32_t peer;
  const char* func;      // NCCL static literal or nullptr
  const char* datatype;  // idem
  const char* algo;      // idem
  const char* proto;     // idem
  uint64_t api_cpu_ns;
  uint64_t enqueue_start_cpu_ns;
  uint64_t enqueue_stop_cpu_ns;
};

struct CompletionRec {
  uint64_t op_id;
  uint64_t completion_cpu_ns;
  uint32_t children;
};

struct KernelChRec {
  uint64_t op_id;
  uint32_t channel_id;
  uint64_t start_gpu_ns;
  uint64_t stop_gpu_ns;
  uint64_t start_cpu_ns;
  uint64_t stop_cpu_ns;
};

struct ProxyOpRec {
  uint64_t op_id;
  uint32_t proxy_index;
  uint32_t pid;
  uint32_t channel_id;
  int32_t peer;
  uint32_t is_send;
  uint32_t n_steps;
  uint32_t chunk_size_bytes;
  uint32_t steps_seen;
  uint64_t start_cpu_ns;
  uint64_t in_progress_cpu_ns;
  uint64_t stop_cpu_ns;
  uint64_t bytes;
  uint64_t send_wait_ns;
  uint64_t recv_wait_ns;
  uint64_t peer_wait_ns;
  uint64_t gpu_wait_ns;
};

// Indexes of ProxyStepRec::state_cpu_ns.
enum StepState : int {
  kStepSendGpuWait = 0,
  kStepSendPeerWait = 1,
  kStepSendWait = 2,
  kStepRecvWait = 3,
  kStepRecvFlushWait = 4,
  kStepRecvGpuWait = 5,
  kStepStates = 6,
};

struct ProxyStepRec {
  uint64_t op_id;
  uint32_t proxy_index;
  uint32_t step;
  uint64_t bytes;
  uint64_t start_cpu_ns;
  uint64_t stop_cpu_ns;
  uint64_t state_cpu_ns[kStepStates];
};

struct NetPluginRec {
  uint64_t op_id;
  uint32_t proxy_index;
  uint8_t transport;  // NetPluginRecord.Transport value
  int32_t device;
  uint32_t qp_num;
  int32_t socket_fd;
  uint64_t length_bytes;
  uint64_t start_cpu_ns;
  uint64_t stop_cpu_ns;
};

struct Record {
  RecordType type;
  union {
    OpRec op;
    CompletionRec completion;
    KernelChRec kernel;
    ProxyOpRec proxy_op;
    ProxyStepRec proxy_step;
    NetPluginRec net;
  };
};
static_assert(sizeof(Record) <= 128, "keep records two cache lines at most");

// 64-byte ring units a record of `type` takes (ring.h): what it carries.
inline constexpr uint32_t UnitsFor(RecordType type) {
  return (type == RecordType::kCompletion || type == RecordType::kKernelCh ||
          type == RecordType::kNetPlugin)
             ? 1
             : 2;
}
static_assert(offsetof(Record, completion) + sizeof(CompletionRec) <= 64);
static_assert(offsetof(Record, kernel) + sizeof(KernelChRec) <= 64);
static_assert(offsetof(Record, net) + sizeof(NetPluginRec) <= 64);

}  // namespace pitstop::plugin

#endif  // PITSTOP_PLUGIN_RECORD_H_
