// Non-comm-slow (straggler) detection over one closed window of one
// communicator. Clock-free: per collective, wait_r = duration_r - the
// shortest member duration, all measured on each rank's own clock (C4 §4).
#ifndef PITSTOP_CONTROLLER_DETECT_STRAGGLER_DETECTOR_H_
#define PITSTOP_CONTROLLER_DETECT_STRAGGLER_DETECTOR_H_

#include <string>

#include "pitstop/v1/controller.pb.h"
#include "src/controller/detect/comm_state.h"

namespace pitstop::controller {

struct StragglerVerdict {
  bool hit = false;
  int32_t rank = -1;       // comm rank of the straggler
  std::string key;         // fault key ("straggler/<job>/<rank identity>")
  v1::Fault fault;         // suspect (GPU level), victims, evidence
  double lateness_ns = 0;  // the others' median wait minus the suspect's
  // The median wait of the other ranks (without the suspect) minus the
  // suspect's: the time it keeps them waiting, also in a comm of two ranks
  // (where the median of all waits is half of it).
  double others_wait_ns = 0;
  // Not a hit only because the window held too few collectives for the
  // count to be unlikely by chance (a slow window under load: 2 of 2 at
  // p = 1/4 is 6%): `key` names the candidate, whose open fault this
  // window neither confirms nor counts as a miss.
  bool inconclusive = false;
};

// A window hits when one rank's mean wait is robustly below the others'
// (robust z = (median - its wait) / (1.4826 MAD) >= z_threshold; for comms
// of < 4 ranks, z is replaced by "last in >= 90% of collectives"), it was
// last in at least half the window's collectives, and the lateness it
// causes is >= min_effect x the median collective duration. No hit before
// warmup_collectives or with < 2 timed collectives in the window.
StragglerVerdict DetectStraggler(const CommState& comm,
                                 const v1::JobPolicy& policy);

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_DETECT_STRAGGLER_DETECTOR_H_
