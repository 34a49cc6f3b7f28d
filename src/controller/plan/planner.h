// C4P-style path planner: gives each network flow (each QP of a connection)
// a path (NIC port, then every switch's uplink choice) that minimises the
// most loaded link, measured as the time the link needs for its bytes at its
// effective capacity (so a degraded or Cora-measured slow link counts as
// slower). Greedy in decreasing size with a bottleneck-shortest-path search
// over the ECMP next-hop DAG, then rip-up-and-reroute passes.
//
// Re-plan: when links change capacity, only the flows whose path crosses a
// changed link are re-routed (the others keep their paths); a flow whose NIC
// is degraded may move to another NIC of its host (the interposer applies
// that as the communicator's NIC set; NCCL forwards over NVLink, PXN).
//
// Each planned path can be pinned to a UDP source port that makes the
// switches' known hash reproduce it (what a net plugin sets per QP); a path
// no port in the RoCE range reproduces stays unpinned (src_port 0).
//
// Thread-compatible: one Planner per thread.
#ifndef PITSTOP_SRC_CONTROLLER_PLAN_PLANNER_H_
#define PITSTOP_SRC_CONTROLLER_PLAN_PLANNER_H_

#include <cstdint>
#include <vector>

#include "src/controller/plan/ecmp.h"
#include "src/controller/plan/fabric.h"
#include "src/controller/plan/flows.h"

namespace pitstop::plan {

struct PlannedPath {
  std::vector<int> links;  // directed link ids (NVLink flows: their 2 links)
  int src_gpu = -1;        // NIC actually used (may differ after a re-plan)
  int dst_gpu = -1;
  uint16_t src_port = 0;  // 0: not pinned
};

struct FlowPlan {
  uint64_t epoch = 0;
  std::vector<PlannedPath> paths;  // by flow id
};

struct PlannerOptions {
  // A NIC link below this share of its nominal capacity lets its flows move
  // to the host's other NICs.
  double degraded_below = 0.95;
  int improve_passes = 3;
  // Pin source ports for this hash and switch-seed set (the fabric's real
  // configuration); nullptr: do not pin.
  const HashFunction* hash = nullptr;
  uint64_t fabric_seed = 0;
};

class Planner {
 public:
  Planner(const Fabric* fabric, const std::vector<Flow>* flows,
          PlannerOptions options);

  FlowPlan Plan(uint64_t epoch);

  struct ReplanStats {
    int crossing = 0;  // flows whose path crossed a changed link
    int moved = 0;     // flows whose path changed
  };
  // Re-plan after the capacities of `changed` links changed in the fabric.
  FlowPlan Replan(const FlowPlan& previous, const std::vector<int>& changed,
                  uint64_t epoch, ReplanStats* stats);

  // Bytes per directed link under `plan` (every flow, NVLink included).
  static std::vector<double> LinkBytes(const Fabric& fabric,
                                       const std::vector<Flow>& flows,
                                       const FlowPlan& plan);

 private:
  struct Cost {
    double max = 0;
    double sum = 0;
  };
  bool Better(const Cost& a, const Cost& b) const;
  double Time(int link, double extra) const;
  // Best path for `f` under current loads; fills *path.
  Cost Best(const Flow& f, PlannedPath* path);
  Cost Through(int node, int tor_idx, double bytes);
  Cost PathCost(const std::vector<int>& links, double bytes) const;
  void Add(const PlannedPath& p, double bytes, double sign);
  void Route(const Flow& f, PlannedPath* p);
  void Pin(const Flow& f, PlannedPath* p) const;
  std::vector<int> Candidates(int gpu) const;
  void Improve(FlowPlan* plan);

  const Fabric* fabric_;
  const std::vector<Flow>* flows_;
  PlannerOptions options_;
  std::vector<double> load_;
  // Memo of Through() per node for the flow being routed.
  std::vector<uint32_t> stamp_;
  std::vector<Cost> memo_;
  std::vector<int> memo_next_;
  uint32_t cur_stamp_ = 0;
  std::vector<int> hops_;
};

}  // namespace pitstop::plan

#endif  // PITSTOP_SRC_CONTROLLER_PLAN_PLANNER_H_
