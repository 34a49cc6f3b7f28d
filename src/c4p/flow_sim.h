// Flow-level simulator: max-min fair sharing of link capacity (progressive
// filling). A collective completes when its slowest flow of its slowest
// channel does.
//
// Two modes. kSteady (what the evaluation uses): the rates of the max-min
// allocation hold until the end, so a flow takes bytes / rate. This is how a
// ring channel behaves: it is a pipeline, every connection of it carries
// data until the last chunk has gone round, so a connection that could run
// faster does not finish early and hand its share to others. kEvents
// re-allocates whenever a flow finishes (independent transfers); it is
// exact for those but costs one allocation per distinct finish time.
// Propagation and NCCL's per-step latencies are left out: at the sizes where
// paths matter (hundreds of MB per all-reduce) they are microseconds against
// seconds.
//
// Thread-compatible; one Simulate call at a time per object (no state).
#ifndef PITSTOP_SRC_CONTROLLER_PLAN_FLOW_SIM_H_
#define PITSTOP_SRC_CONTROLLER_PLAN_FLOW_SIM_H_

#include <vector>

#include "src/c4p/fabric.h"

namespace pitstop::c4p {

struct SimFlow {
  const std::vector<int>* links = nullptr;  // directed link ids
  double bytes = 0;
  int channel = 0;
};

struct SimResult {
  double completion_s = 0;             // slowest flow
  std::vector<double> channel_done_s;  // per channel (index = channel)
  bool stuck = false;  // some flow had no capacity (a link at 0)
};

enum class SimMode { kSteady, kEvents };

// `capacity_gbps[link]`; flows with empty paths are ignored.
SimResult SimulateMaxMin(const std::vector<SimFlow>& flows,
                         const std::vector<double>& capacity_gbps,
                         SimMode mode = SimMode::kSteady);

}  // namespace pitstop::c4p

#endif  // PITSTOP_SRC_CONTROLLER_PLAN_FLOW_SIM_H_
