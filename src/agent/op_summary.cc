// CollectiveSummary construction for RankJoiner (see rank_joiner.h).
#include <algorithm>

#include "src/agent/join_state.h"

namespace pitstop::agent {

double BusBandwidthFactor(v1::CollFunc func, int32_t n_ranks) {
  const double n = n_ranks;
  switch (func) {
    case v1::COLL_FUNC_ALL_REDUCE:
      return n_ranks > 0 ? 2.0 * (n - 1) / n : 0.0;
    case v1::COLL_FUNC_ALL_GATHER:
    case v1::COLL_FUNC_REDUCE_SCATTER:
    case v1::COLL_FUNC_ALL_TO_ALL:
      return n_ranks > 0 ? (n - 1) / n : 0.0;
    default:
      return 1.0;
  }
}

namespace {

v1::ConnectionSummary BuildConnection(const JoinConn& c) {
  v1::ConnectionSummary out;
  out.set_peer_rank(c.peer);
  out.set_channel_id(c.channel);
  out.set_is_send(c.is_send);
  const bool from_steps = c.step_records > 0 && c.bytes == 0;
  out.set_bytes(from_steps ? c.step_bytes : c.bytes);
  out.set_steps(std::max(c.steps, c.step_records));
  const uint64_t dur = c.stop_cpu_ns > c.start_cpu_ns && c.start_cpu_ns != 0
                           ? c.stop_cpu_ns - c.start_cpu_ns
                           : 0;
  out.set_duration_ns(dur);
  const bool waits_from_steps =
      c.step_records > 0 && c.send_wait_ns == 0 && c.recv_wait_ns == 0;
  out.set_send_wait_ns(waits_from_steps ? c.step_send_wait_ns : c.send_wait_ns);
  out.set_recv_wait_ns(waits_from_steps ? c.step_recv_wait_ns : c.recv_wait_ns);
  out.set_from_proxy_steps(c.step_records > 0);
  if (dur > 0) out.set_throughput_bps(out.bytes() * 1e9 / dur);
  return out;
}

}  // namespace

const v1::CommunicatorInfo* RankJoiner::Stream::FindComm(
    uint64_t comm_hash) const {
  if (auto it = comms.find(comm_hash); it != comms.end()) return &it->second;
  for (const v1::CommunicatorInfo& c : ended_comms) {
    if (c.comm_hash() == comm_hash) return &c;
  }
  return nullptr;
}

v1::CollectiveSummary BuildSummary(const RankJoiner::Stream& s,
                                   const JoinOp& op) {
  v1::CollectiveSummary out;
  const v1::OpRecord& r = op.record;
  out.set_comm_hash(r.comm_hash());
  out.set_rank(r.rank());
  out.set_seq_number(r.seq_number());
  out.set_kind(r.kind());
  out.set_func(r.func());
  out.set_peer(r.peer());
  out.set_count(r.count());
  out.set_bytes(r.bytes());
  out.set_datatype(r.datatype());
  out.set_algorithm(r.algorithm());
  out.set_protocol(r.protocol());
  out.set_n_channels(r.n_channels());
  out.set_api_cpu_ns(r.api_cpu_ns());
  out.set_enqueue_cpu_ns(r.enqueue_start_cpu_ns() != 0
                             ? r.enqueue_start_cpu_ns()
                             : r.enqueue_stop_cpu_ns());
  out.set_graph_replay(r.graph_replay());
  out.set_pid(s.hello.pid());
  out.set_deep(op.deep);

  int32_t n_ranks = 0;
  int32_t global_rank = s.has_hello ? s.hello.global_rank() : -1;
  if (const v1::CommunicatorInfo* found = s.FindComm(r.comm_hash())) {
    const v1::CommunicatorInfo& info = *found;
    n_ranks = info.n_ranks();
    if (r.rank() >= 0 && r.rank() < info.global_ranks_size() &&
        info.global_ranks(r.rank()) >= 0) {
      global_rank = info.global_ranks(r.rank());
    }
  }
  out.set_global_rank(global_rank);

  // Kernel times: GPU timers converted with the fitted offset, else the CPU
  // observations; the duration stays on one GPU clock.
  if (op.start_gpu_min != 0 && s.fit.fitted()) {
    out.set_kernel_start_cpu_ns(s.fit.ToCpu(op.start_gpu_min));
    out.set_kernel_end_cpu_ns(s.fit.ToCpu(op.stop_gpu_max));
  } else {
    out.set_kernel_start_cpu_ns(op.start_cpu_min);
    out.set_kernel_end_cpu_ns(op.stop_cpu_max);
  }
  out.set_kernel_duration_ns(op.kernel_duration_ns);

  uint64_t proxy_start = 0, proxy_stop = 0;
  for (const JoinConn& c : op.conns) {
    if (!c.present && c.step_records == 0) continue;
    *out.add_connections() = BuildConnection(c);
    if (c.start_cpu_ns != 0 &&
        (proxy_start == 0 || c.start_cpu_ns < proxy_start))
      proxy_start = c.start_cpu_ns;
    proxy_stop = std::max(proxy_stop, c.stop_cpu_ns);
  }
  if (proxy_start != 0 && proxy_stop > proxy_start) {
    out.set_proxy_duration_ns(proxy_stop - proxy_start);
  }

  const bool started = op.channels > 0 || !op.conns.empty();
  out.set_state(op.completed ? v1::OP_STATE_COMPLETED
                : started    ? v1::OP_STATE_STARTED
                             : v1::OP_STATE_ENQUEUED);
  out.set_completion_cpu_ns(op.completion_cpu_ns);

  uint64_t time_ns = out.kernel_duration_ns();
  if (time_ns == 0) time_ns = out.proxy_duration_ns();
  if (time_ns == 0 && op.completed && out.enqueue_cpu_ns() != 0 &&
      op.completion_cpu_ns > out.enqueue_cpu_ns()) {
    time_ns = op.completion_cpu_ns - out.enqueue_cpu_ns();
  }
  const double factor = BusBandwidthFactor(r.func(), n_ranks);
  if (time_ns > 0 && factor > 0 && r.bytes() > 0) {
    out.set_bus_bandwidth_bps(r.bytes() * 1e9 / time_ns * factor);
  }
  return out;
}

}  // namespace pitstop::agent
