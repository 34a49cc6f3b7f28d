#include "tests/controller/sim_job.h"

#include "absl/strings/str_cat.h"

namespace pitstop::controller::testing {

SimJob::SimJob(uint64_t comm_hash, int32_t n_ranks, int32_t ranks_per_host,
               std::string job_id, int32_t first_global)
    : comm_hash_(comm_hash),
      n_ranks_(n_ranks),
      ranks_per_host_(ranks_per_host),
      job_id_(std::move(job_id)),
      first_global_(first_global) {}

std::string SimJob::HostOf(int32_t rank) const {
  return absl::StrCat("node", (first_global_ + rank) / ranks_per_host_);
}

std::vector<v1::NodeRegistration> SimJob::Nodes() const {
  std::vector<v1::NodeRegistration> nodes;
  for (int32_t r = 0; r < n_ranks_; r += ranks_per_host_) {
    v1::NodeRegistration& reg = nodes.emplace_back();
    reg.set_host(HostOf(r));
    reg.set_agent_id(absl::StrCat("agent-", HostOf(r)));
    for (int32_t g = 0; g < ranks_per_host_; ++g) {
      reg.add_gpus()->set_index(g);
      v1::NicInfo* nic = reg.add_nics();
      nic->set_name(absl::StrCat("mlx5_", g));
      nic->set_kind(v1::NicInfo::KIND_INFINIBAND);
    }
  }
  return nodes;
}

v1::CommunicatorInfo SimJob::Info(int32_t rank) const {
  v1::CommunicatorInfo info;
  info.set_comm_hash(comm_hash_);
  info.set_comm_name(absl::StrCat("pg", comm_hash_ % 1000));
  info.set_n_ranks(n_ranks_);
  info.set_n_nodes((n_ranks_ + ranks_per_host_ - 1) / ranks_per_host_);
  info.set_rank(rank);
  for (int32_t r = 0; r < n_ranks_; ++r)
    info.add_global_ranks(first_global_ + r);
  info.set_host(HostOf(rank));
  info.set_pid(PidOf(rank));
  info.set_cuda_device((first_global_ + rank) % ranks_per_host_);
  info.set_job_id(job_id_);
  info.set_source(v1::CommunicatorInfo::SOURCE_INTERPOSER);
  return info;
}

void SimJob::Register(DetectionEngine* engine) const {
  for (const v1::NodeRegistration& reg : Nodes()) (void)engine->AddNode(reg);
  for (int32_t r = 0; r < n_ranks_; ++r) {
    (void)engine->AddCommunicator(HostOf(r), Info(r));
  }
}

v1::CollectiveSummary SimJob::Summary(int32_t rank, uint64_t seq,
                                      uint64_t duration_ns,
                                      uint64_t bytes) const {
  v1::CollectiveSummary s;
  s.set_comm_hash(comm_hash_);
  s.set_rank(rank);
  s.set_global_rank(first_global_ + rank);
  s.set_seq_number(seq);
  s.set_kind(v1::OP_KIND_COLLECTIVE);
  s.set_func(v1::COLL_FUNC_ALL_REDUCE);
  s.set_bytes(bytes);
  s.set_state(v1::OP_STATE_COMPLETED);
  s.set_kernel_duration_ns(duration_ns);
  s.set_pid(PidOf(rank));
  return s;
}

void SimJob::AddRingConnections(v1::CollectiveSummary* s, double send_bps,
                                double recv_bps) const {
  const int32_t r = s->rank();
  v1::ConnectionSummary* send = s->add_connections();
  send->set_peer_rank((r + 1) % n_ranks_);
  send->set_is_send(true);
  send->set_bytes(s->bytes());
  send->set_throughput_bps(send_bps);
  v1::ConnectionSummary* recv = s->add_connections();
  recv->set_peer_rank((r + n_ranks_ - 1) % n_ranks_);
  recv->set_is_send(false);
  recv->set_bytes(s->bytes());
  recv->set_throughput_bps(recv_bps);
}

v1::RankProgress SimJob::Progress(int32_t rank, uint64_t enqueued,
                                  uint64_t completed) const {
  v1::RankProgress p;
  p.set_comm_hash(comm_hash_);
  p.set_rank(rank);
  p.set_global_rank(first_global_ + rank);
  p.set_pid(PidOf(rank));
  p.set_func(v1::COLL_FUNC_ALL_REDUCE);
  p.set_last_enqueued_seq(enqueued);
  p.set_last_started_seq(completed);
  p.set_last_completed_seq(completed);
  p.set_last_enqueue_cpu_ns(1);
  p.set_last_completion_cpu_ns(1);
  return p;
}

void SimJob::Feed(DetectionEngine* engine, uint64_t seq,
                  const std::vector<uint64_t>& durations) const {
  for (int32_t r = 0; r < n_ranks_; ++r) {
    (void)engine->AddSummary(HostOf(r), Summary(r, seq, durations[r]));
  }
}

std::vector<uint64_t> JitteredDurations(int32_t n, uint64_t base_ns,
                                        uint64_t seq) {
  std::vector<uint64_t> d(n);
  for (int32_t r = 0; r < n; ++r) {
    // Deterministic pseudo-random in [-2%, +2%].
    const uint64_t h = (seq * 2654435761u + r * 40503u) % 41;
    d[r] = base_ns + base_ns * h / 1000 - base_ns * 20 / 1000;
  }
  return d;
}

}  // namespace pitstop::controller::testing
