// The timing model: turns a Scenario into a Plan, the exact time of every
// profiler event of every emulated rank, for the whole run.
//
// Every rank process and the coordinator build the same Plan from the same
// scenario (deterministic: one seeded generator, no clocks), so ranks agree
// on each collective without talking to each other. Times are ns after the
// shared start time (CLOCK_MONOTONIC of the machine: one clock for all).
//
// Model (docs/sim.md):
//   - a rank's step is its phases in order; a compute phase lasts
//     compute_ms x (1 + jitter), x factor on a slow GPU;
//   - a collective on a communicator of n ranks starts moving data at
//     T0 = the latest member's arrival (it synchronises); each member sends
//     to its ring successor and receives from its predecessor on every
//     channel; a connection carries NCCL's ring traffic / channels bytes at
//     the bandwidth of the link it crosses (NVLink inside a node, the two
//     rail NICs between nodes, shared by the channels), so a slow NIC or link
//     lengthens exactly the connections that cross it;
//   - every member's kernel ends when the slowest connection of its channel
//     is done; its kernel duration is that end minus its own arrival, so the
//     last to arrive waits least;
//   - hangs and crashes make times kNever: a rank that never arrives blocks
//     the collective for every member, who then never progress further.
#ifndef PITSTOP_SRC_SIM_MODEL_H_
#define PITSTOP_SRC_SIM_MODEL_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/sim/scenario.h"

namespace pitstop::sim {

inline constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

struct CommDef {
  uint64_t hash = 0;
  std::string name;  // "tp0", "dp3", "world"
  Group group = Group::kWorld;
  std::vector<int> members;  // global rank of each comm rank
  int n_nodes = 1;
};

// One proxy op: a connection of one channel, as seen by one rank.
struct ConnPlan {
  int peer = 0;  // comm rank
  int peer_global = 0;
  int channel = 0;
  bool is_send = true;
  uint64_t bytes = 0;
  int n_steps = 1;
  int64_t post_ns = 0;         // ProxyOp start (posted at enqueue)
  int64_t progress_ns = 0;     // data starts moving (InProgress)
  int64_t stop_ns = 0;         // kNever: stalls (comm hang / blocked)
  int steps_before_stall = 0;  // steps done when stop_ns is kNever
};

struct OpPlan {
  int comm = 0;  // index into Plan::comms
  int comm_rank = 0;
  std::string func;
  uint64_t seq = 0;
  uint64_t bytes = 0;
  int step = 0;
  int phase = 0;
  bool eval = false;
  int64_t api_ns = 0;
  int64_t enqueue_ns = 0;
  int64_t kernel_start_ns = 0;
  std::vector<int64_t> channel_stop_ns;  // kNever when blocked
  std::vector<ConnPlan> conns;
  int64_t end_ns() const;  // latest channel stop (kNever if any is)
};

struct RankPlan {
  int rank = 0;
  int node = 0;
  int gpu = 0;
  int nic = 0;
  std::vector<int> comms;  // communicators this rank is a member of
  std::vector<OpPlan> ops;
  int64_t crash_ns = kNever;  // process dies here
  int64_t finish_ns = 0;      // last op done (or end of run if blocked)
};

// What an injected fault should produce, for scoring.
struct FaultTruth {
  int index = 0;  // in Scenario::faults
  FaultSpec spec;
  bool expect_fault = true;  // false for deceptive normals
  // When it really began (hangs: when the stuck collective was entered).
  int64_t onset_ns = 0;
  int64_t end_ns = kNever;
  bool happened = true;  // e.g. a comm hang found a collective to stop
  // Why no traffic of the job could show this fault ("" if some did): a
  // slow link or NIC that no connection crosses while it is active. Such a
  // fault is scored neither found nor missed.
  std::string not_observable;
  std::string expected_class;  // "NON_COMM_SLOW", ...
  // The culprit: a rank, a NIC (host + nic) or a node pair.
  int rank = -1;
  std::string host, nic, peer_host;
  int gpu = -1;
  int nics_per_node = 1;  // for the rail mapping GPU g -> NIC g % n
  std::string Describe() const;
};

struct Plan {
  Scenario scenario;
  std::vector<CommDef> comms;
  std::vector<RankPlan> ranks;
  std::vector<FaultTruth> truths;
  int64_t duration_ns = 0;
  int steps = 0;
};

// Emulated names, shared with the agents and the scoring.
std::string HostName(int node);  // "node3"
std::string NicName(int nic);    // "mlx5_1"

// Builds the plan. InvalidArgument if the scenario does not validate.
absl::StatusOr<Plan> BuildPlan(const Scenario& scenario);

}  // namespace pitstop::sim

#endif  // PITSTOP_SRC_SIM_MODEL_H_
