// Internal state of RankJoiner (rank_joiner.h): one process stream and its
// open operations. Not part of the join library's stable API.
#ifndef PITSTOP_AGENT_JOIN_STATE_H_
#define PITSTOP_AGENT_JOIN_STATE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "src/agent/gpu_clock_fit.h"
#include "src/agent/rank_joiner.h"

namespace pitstop::agent {

// One proxy op (peer/channel/direction) of an operation.
struct JoinConn {
  bool present = false;  // ProxyOpRecord seen
  int32_t peer = -1;
  uint32_t channel = 0;
  bool is_send = false;
  uint64_t bytes = 0;
  uint32_t steps = 0;
  uint64_t start_cpu_ns = 0;
  uint64_t stop_cpu_ns = 0;
  uint64_t send_wait_ns = 0;
  uint64_t recv_wait_ns = 0;
  // Aggregated from ProxyStepRecords (deep profiling).
  uint32_t step_records = 0;
  uint64_t step_bytes = 0;
  uint64_t step_send_wait_ns = 0;
  uint64_t step_recv_wait_ns = 0;
};

// One rank's part of one operation while it is being joined.
struct JoinOp {
  uint64_t creation = 0;   // order of creation within the stream
  int64_t created_ns = 0;  // joiner clock when first seen
  bool has_record = false;
  v1::OpRecord record;
  bool completed = false;
  uint64_t completion_cpu_ns = 0;
  uint32_t children_expected = 0;
  uint32_t children_seen = 0;
  int64_t completion_seen_ns = 0;  // joiner clock when completion arrived
  bool pending = false;            // listed in Stream::pending
  // Kernel channels.
  uint32_t channels = 0;
  uint64_t start_gpu_min = 0, stop_gpu_max = 0, kernel_duration_ns = 0;
  uint64_t start_cpu_min = 0, stop_cpu_max = 0;
  // Proxy ops, indexed by proxy_index.
  std::vector<JoinConn> conns;
  bool deep = false;
};

struct ProgressState {
  uint64_t last_enqueued_seq = 0;
  uint64_t last_started_seq = 0;
  uint64_t last_completed_seq = 0;
  uint64_t last_enqueue_cpu_ns = 0;
  uint64_t last_completion_cpu_ns = 0;
  uint32_t pid = 0;
};

struct RankJoiner::Stream {
  uint64_t id = 0;
  bool has_hello = false;
  v1::ProcessHello hello;
  bool goodbye = false;
  uint64_t last_batch_seq = 0;
  bool has_drops = false;
  v1::DropCounters drops;
  GpuClockFit fit;
  absl::flat_hash_map<uint64_t, JoinOp> ops;
  // Open op ids by creation number: the oldest is begin(), and emitting
  // any op erases its entry in O(log n) (a queue of ids that may hold
  // emitted ones had to be re-sorted under load: quadratic).
  std::map<uint64_t, uint64_t> order;
  uint64_t next_creation = 0;
  std::vector<uint64_t> pending;  // completed, waiting for children
  // Recently emitted op ids, to recognise late records.
  absl::flat_hash_set<uint64_t> recent;
  std::deque<uint64_t> recent_order;
  absl::flat_hash_map<uint64_t, v1::CommunicatorInfo> comms;
  // Recently finalized/aborted communicators (bounded), still used to
  // summarise their last ops.
  std::deque<v1::CommunicatorInfo> ended_comms;
  // Looks up a live or recently ended communicator; nullptr if unknown.
  const v1::CommunicatorInfo* FindComm(uint64_t comm_hash) const;
  size_t conn_slots = 0;  // sum of ops[*].conns.size()
  // Sum of global_ranks entries over the live communicators (bounded by
  // kMaxGlobalRankEntries).
  size_t global_rank_entries = 0;
  // First invalid record's reason (for the caller to log once).
  std::string first_invalid;
  bool over_cap_logged = false;
  // (comm_hash, rank, func) -> progress.
  std::map<std::tuple<uint64_t, int32_t, int>, ProgressState> progress;
};

// Builds the summary of `op` (state, converted times, connections, busbw).
v1::CollectiveSummary BuildSummary(const RankJoiner::Stream& s,
                                   const JoinOp& op);

}  // namespace pitstop::agent

#endif  // PITSTOP_AGENT_JOIN_STATE_H_
