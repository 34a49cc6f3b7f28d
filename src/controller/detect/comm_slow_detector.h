// Comm-slow detection over one closed window of one communicator: the
// collectives got slower on every rank (no straggler) and/or some inter-node
// connections move data markedly slower than the others of the same
// collective. Localises to the NIC, node pair or links that the slow
// connections share (C4 §4, PerfTracker's differential observability).
#ifndef PITSTOP_CONTROLLER_DETECT_COMM_SLOW_DETECTOR_H_
#define PITSTOP_CONTROLLER_DETECT_COMM_SLOW_DETECTOR_H_

#include <string>

#include "pitstop/v1/controller.pb.h"
#include "src/controller/detect/comm_state.h"

namespace pitstop::controller {

struct CommSlowVerdict {
  bool hit = false;
  std::string key;  // "commslow/<job>/<target>"
  v1::Fault fault;
  // Durations grew but no connection data says where: ask for proxy steps.
  bool want_profiling = false;
  // Collective time added over the baseline in this window (ns, summed
  // over its collectives).
  double extra_ns = 0;
};

// Growth = median min-duration of the window / the comm's baseline for the
// same (func, size); slow links = inter-node directed links whose median
// throughput ratio to the collective's median is < 1 / (1 + min_effect).
// A window hits only when slow links localise it; growth without
// connection data requests deep profiling; growth with uniform connections
// is treated as context (job-wide slowdown), not a fault. Baselines are
// updated from quiet windows only. `straggler_hit`: a straggler makes the
// others wait, so the window is no baseline sample; it is still judged
// (growth of the last arriver's duration, links net of the ranks' waits).
CommSlowVerdict DetectCommSlow(CommState* comm, const v1::JobPolicy& policy,
                               bool straggler_hit);

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_DETECT_COMM_SLOW_DETECTOR_H_
