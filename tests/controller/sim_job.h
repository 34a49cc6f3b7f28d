// A deterministic, synthetic job for detection tests and benchmarks: ranks
// spread over hosts (ranks_per_host GPUs and as many NICs each), one
// communicator, and helpers that emit the telemetry an agent would send.
#ifndef PITSTOP_TESTS_CONTROLLER_SIM_JOB_H_
#define PITSTOP_TESTS_CONTROLLER_SIM_JOB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "pitstop/v1/agent.pb.h"
#include "src/controller/detect/detection_engine.h"

namespace pitstop::controller::testing {

class SimJob {
 public:
  // `first_global` offsets global ranks (several comms of one job).
  SimJob(uint64_t comm_hash, int32_t n_ranks, int32_t ranks_per_host,
         std::string job_id = "job1", int32_t first_global = 0);

  int32_t n_ranks() const { return n_ranks_; }
  uint64_t comm_hash() const { return comm_hash_; }
  std::string HostOf(int32_t rank) const;
  uint32_t PidOf(int32_t rank) const { return 1000 + first_global_ + rank; }

  std::vector<v1::NodeRegistration> Nodes() const;
  v1::CommunicatorInfo Info(int32_t rank) const;
  // Registers nodes and every member's CommunicatorInfo.
  void Register(DetectionEngine* engine) const;

  // rank's summary of collective `seq` with the given kernel duration (ns).
  v1::CollectiveSummary Summary(int32_t rank, uint64_t seq,
                                uint64_t duration_ns,
                                uint64_t bytes = 1 << 20) const;
  // Ring connections for `rank`: send to rank+1 and receive from rank-1 at
  // `send_bps` / `recv_bps` bytes per second.
  void AddRingConnections(v1::CollectiveSummary* s, double send_bps,
                          double recv_bps) const;
  v1::RankProgress Progress(int32_t rank, uint64_t enqueued,
                            uint64_t completed) const;

  // Feeds one collective: every rank's summary with durations[rank].
  void Feed(DetectionEngine* engine, uint64_t seq,
            const std::vector<uint64_t>& durations) const;

 private:
  uint64_t comm_hash_;
  int32_t n_ranks_;
  int32_t ranks_per_host_;
  std::string job_id_;
  int32_t first_global_;
};

// Durations with a small deterministic jitter (+-2%) around `base_ns`.
std::vector<uint64_t> JitteredDurations(int32_t n, uint64_t base_ns,
                                        uint64_t seq);

}  // namespace pitstop::controller::testing

#endif  // PITSTOP_TESTS_CONTROLLER_SIM_JOB_H_
