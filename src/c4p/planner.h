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
#include <functional>
#include <vector>

#include "src/c4p/ecmp.h"
#include "src/c4p/fabric.h"
#include "src/c4p/flows.h"

namespace pitstop::c4p {

// Ports tried per path when pinning: a path through g equal-cost choices
// needs about g tries, so this finds one for paths of up to ~1,000 choices
// 98% of the time and bounds the cost of paths no port reaches.
inline constexpr int kPinTries = 4096;

struct PlannedPath {
  std::vector<int> links;  // directed link ids (NVLink flows: their 2 links)
  int src_gpu = -1;        // NIC actually used (may differ after a re-plan)
  int dst_gpu = -1;
  uint16_t src_port = 0;  // 0: not pinned
  // A re-plan may spread a flow that had to leave a degraded link over
  // several QPs: the bytes are then split equally over `links` and these.
  std::vector<std::vector<int>> split;
  std::vector<uint16_t> split_ports;
  int parts() const { return 1 + static_cast<int>(split.size()); }
};

// Calls fn(links, bytes) for each part (QP) of a planned flow.
template <typename Fn>
void ForEachPart(const PlannedPath& p, double bytes, Fn fn) {
  const double share = bytes / p.parts();
  fn(p.links, share);
  for (const std::vector<int>& s : p.split) fn(s, share);
}

struct FlowPlan {
  uint64_t epoch = 0;
  std::vector<PlannedPath> paths;  // by flow id
};

struct PlannerOptions {
  // A NIC link below this share of its nominal capacity lets its flows move
  // to the host's other NICs.
  double degraded_below = 0.95;
  int improve_passes = 0;
  // Negotiated-congestion rounds (PathFinder-style) after the greedy pass,
  // aiming at the cut bound; stop early when within this share of it.
  int negotiate_rounds = 20;
  // Ejection chains (alternating paths, as in Konig's edge-colouring proof)
  // that move flows off over-target links: depth and rounds.
  int eject_depth = 30;
  int repair_rounds = 50;
  int repair_work = 400000;  // ejection steps per Repair()
  double target_slack = 0.01;
  // Re-plan: a flow that finds no path within the target may be spread over
  // up to this many QPs. Off (1) by default: links share per QP (max-min
  // per flow), so a connection on 8 QPs takes 8 shares of every link it
  // crosses and slows the single-QP flows there more than it gains; it pays
  // only where the fabric shares by bytes (weighted fair queueing).
  int max_split = 1;
  // With several QPs per connection and more network QPs than this, Plan()
  // routes whole connections first (PlanByConnection); up to it, QP by QP.
  // Both reach the bound on the healthy fabric; the QP-by-QP pass costs q
  // times the searches (at 8,192 GPUs with 8 QPs: 4-5 s CPU on the
  // three-tier fabric, about 2 minutes on the non-rail one, against 1.4 s
  // and 3.7 s), while up to 1,024 GPUs x 8 QPs it takes under a second and
  // its plans are the ones the docs' tables were measured with.
  int whole_connections_above = 16384;
  // Pin source ports for this hash and switch-seed set (the fabric's real
  // configuration); nullptr: do not pin.
  const HashFunction* hash = nullptr;
  uint64_t fabric_seed = 0;
  // Called as Plan() and PinAll() go: `done` of `total` steps of `step`
  // ("routing flows", "repair rounds", "negotiation rounds", "pinning
  // source ports"); empty: not called. At 131,072 GPUs they take a minute.
  std::function<void(const char* step, int done, int total)> progress;
};

class Planner {
 public:
  Planner(const Fabric* fabric, const std::vector<Flow>* flows,
          PlannerOptions options);

  // The plan (paths only; PinAll adds source ports).
  FlowPlan Plan(uint64_t epoch);
  // Pins every network flow's path(s) to source ports (options.hash);
  // returns how many flows got a port.
  int PinAll(FlowPlan* plan) const;

  struct ReplanStats {
    int crossing = 0;  // flows whose path crossed a changed link
    int moved = 0;     // flows whose path changed
  };
  // Re-plan after the capacities of `changed` links changed in the fabric.
  // `previous` by value: move it in to re-plan without a copy.
  FlowPlan Replan(FlowPlan previous, const std::vector<int>& changed,
                  uint64_t epoch, ReplanStats* stats);

  // Where the last Plan() spent its time (wall milliseconds per phase) and
  // how many bottleneck searches it ran: what the scale benchmark prints.
  struct PhaseTimes {
    double greedy_ms = 0;
    double goal_ms = 0;    // the cut and whole-flow bounds it aims at
    double repair_ms = 0;  // both ejection-chain repairs
    double negotiate_ms = 0;
    int64_t searches = 0;  // Best() calls
  };
  const PhaseTimes& phase_times() const { return phases_; }

  // Bytes per directed link under `plan` (every flow, NVLink included).
  static std::vector<double> LinkBytes(const Fabric& fabric,
                                       const std::vector<Flow>& flows,
                                       const FlowPlan& plan);

 private:
  struct Cost {
    double max = 0;
    double sum = 0;
    // Ends of the flow moved to another NIC of their host (Best only).
    int nic_moves = 0;
  };
  bool Better(const Cost& a, const Cost& b) const;
  void Report(const char* step, int done, int total) const {
    if (options_.progress) options_.progress(step, done, total);
  }
  double Time(int link, double extra) const;
  Cost LinkCost(int link, double bytes) const;
  const std::vector<int>& Hops(int node, int tor_idx);
  double MaxTime() const;
  // Plan() with several QPs per connection: whole connections first (a
  // QP-by-QP greedy pass costs q times the searches and leaves single QPs
  // over the goal for the repair to chase: 118 s CPU at 8,192 GPUs with 8
  // QPs on the non-rail three-tier fabric), each connection's path given
  // to all its QPs, then repaired QP by QP where it is still above the
  // goal (`whole`, `whole_of`: WholeConnections in planner.cc).
  FlowPlan PlanByConnection(uint64_t epoch, const std::vector<Flow>& whole,
                            const std::vector<int>& whole_of);
  // Sets target_ (the cut bound) and goal_ for Repair and Negotiate.
  void SetGoal();
  void Negotiate(FlowPlan* plan);
  void Repair(FlowPlan* plan);
  bool Eject(FlowPlan* plan, int link, int depth, double goal);
  void SetPath(FlowPlan* plan, int flow, PlannedPath path);
  void ClearPath(FlowPlan* plan, int flow);
  std::vector<std::vector<int>> on_link_;  // network flows per link
  std::vector<char> banned_;
  std::vector<char> locked_;
  int eject_budget_ = 0;
  double target_ = 0;  // seconds; the cut bound
  // Seconds; links above it are over: 1% above the cut bound, or the
  // whole-flow bound where that is higher.
  double goal_ = 0;
  bool negotiating_ = false;
  double eject_goal_ = 0;  // > 0: count links pushed over it (ejection)
  double pres_ = 0;
  std::vector<double> hist_;
  // Next hops per (node, destination ToR): an index into the node's few
  // distinct ECMP groups (-1: not looked up yet). A flat array, because
  // the bottleneck search asks millions of times.
  std::vector<int16_t> hop_index_;
  std::vector<std::vector<std::vector<int>>> hop_sets_;
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
  PhaseTimes phases_;
};

}  // namespace pitstop::c4p

#endif  // PITSTOP_SRC_CONTROLLER_PLAN_PLANNER_H_
