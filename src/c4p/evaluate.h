// ECMP vs the plan vs the lower bound for a data-parallel ring all-reduce on
// a fabric, healthy and with degraded links: what `pitstop plan` prints and
// the planning benchmark measures.
//
// - ECMP: every seed draws the switches' hash seeds and each QP's source
//   port; the completion time's distribution over seeds (mean, p50, p99).
// - planned: Planner::Plan(); with degraded links, Planner::Replan() from
//   the healthy plan (only flows crossing a degraded link move).
// - bound: no routing can beat the most loaded unavoidable cut at full
//   capacity: a NIC (a host's NICs when its NIC is degraded and flows may
//   move), a ToR's uplinks or downlinks, a pod's uplinks or downlinks. On a
//   Clos this is what perfect per-packet spraying reaches.
// - max_link_util: the busiest link's bytes over what it carries at full
//   capacity in the bound's completion time (1.0 = as busy as the ideal
//   bottleneck; 2.0 = two flows where the ideal has one).
#ifndef PITSTOP_SRC_CONTROLLER_PLAN_EVALUATE_H_
#define PITSTOP_SRC_CONTROLLER_PLAN_EVALUATE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "src/c4p/bound.h"
#include "src/c4p/fabric.h"
#include "src/c4p/flow_sim.h"
#include "src/c4p/flows.h"
#include "src/c4p/planner.h"

namespace pitstop::c4p {

// At most this many ECMP seeds (--seeds): each is one simulation of the
// job, and 10,000 already gives a p99.99.
inline constexpr int kMaxEcmpSeeds = 10000;

// One ECMP seed evaluated: `done` of `seeds` at one stage ("healthy",
// "degraded") with `qps` QPs per connection.
struct EcmpProgress {
  const char* stage = "";
  int qps = 1;
  int done = 0;
  int seeds = 0;
};

struct EvalOptions {
  int ranks = 0;  // 0: every GPU of the fabric
  Placement placement = Placement::kPacked;
  uint64_t placement_seed = 1;
  RingSpec ring;
  bool tree = false;  // NCCL's tree all-reduce instead of the ring
  std::string hash = "crc32";
  int seeds = 100;
  uint64_t first_seed = 1;
  // The fabric's real switch seeds, for pinning source ports.
  uint64_t fabric_seed = 0x7c4;
  bool pin_ports = true;
  // Links (Fabric::FindLinks specs) and the share of capacity left.
  std::vector<std::pair<std::string, double>> degrade;
  // "busiest": degrade the plan's most loaded switch-to-switch link (both
  // directions) to this fraction; 0 = off. For benchmarks.
  double degrade_busiest = 0;
  SimMode sim_mode = SimMode::kSteady;
  // Called after each ECMP seed (the slow part at thousands of GPUs: a
  // minute and more at 8,192); empty: not called.
  std::function<void(const EcmpProgress&)> on_ecmp_seed;
  // PlannerOptions::progress of the planner it runs (planning and source
  // port pinning); empty: not called.
  std::function<void(const char* step, int done, int total)> on_plan_step;
};

struct StrategyResult {
  double completion_s = 0;  // ECMP: mean over seeds
  double completion_s_p50 = 0;
  double completion_s_p99 = 0;
  double max_link_util = 0;
};

struct Evaluation {
  StrategyResult ecmp, planned, bound;
};

struct EvalReport {
  std::string fabric;
  std::vector<std::string> assumptions;
  std::vector<std::string> warnings;  // Fabric::warnings()
  int ranks = 0;
  int hosts = 0;
  int channels = 0;
  int flows = 0;
  int network_flows = 0;
  int pinned_flows = 0;
  int seeds = 0;
  std::string hash;
  double plan_ms = 0;      // Planner::Plan, wall clock
  double plan_cpu_ms = 0;  // and CPU time (the machine may be shared)
  double pin_ms = 0;       // Planner::PinAll
  Evaluation healthy;
  // With degraded links:
  bool degraded = false;
  std::vector<std::string> degraded_links;
  Evaluation after;  // ecmp on the degraded fabric, re-plan, bound
  int crossing = 0;
  int moved = 0;  // QPs (flows) whose path changed
  // Connections with a QP that moved, of the connections that cross hosts
  // (equal to the QP counts with one QP per connection).
  int moved_connections = 0;
  int network_connections = 0;
  double replan_ms = 0;
  double replan_cpu_ms = 0;
  double recovery = 0;  // healthy bound / re-planned completion
  FlowPlan plan;        // the final plan (re-plan when degraded)
  std::vector<Flow> flow_list;
};

// Evaluates on `fabric` (its capacities are changed for --degrade and left
// so; ResetCapacities() to undo).
absl::StatusOr<EvalReport> Evaluate(Fabric* fabric, const EvalOptions& o);

}  // namespace pitstop::c4p

#endif  // PITSTOP_SRC_CONTROLLER_PLAN_EVALUATE_H_
