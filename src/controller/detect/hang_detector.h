// Hang detection (non-comm-hang and comm-hang) from RankProgress, per
// communicator and collective function. Works on enqueue / start / complete
// sequence numbers alone, so it also runs on Flight Recorder imports that
// have no kernel timers.
#ifndef PITSTOP_CONTROLLER_DETECT_HANG_DETECTOR_H_
#define PITSTOP_CONTROLLER_DETECT_HANG_DETECTOR_H_

#include <cstdint>

#include "pitstop/v1/controller.pb.h"
#include "src/controller/detect/comm_state.h"
#include "src/controller/detect/fault_tracker.h"

namespace pitstop::controller {

// Adaptive hang timeout of a comm in ns: max(floor, multiplier x p99 of its
// recent collective durations); the floor alone without durations.
int64_t HangTimeoutNs(const CommState& comm, const v1::JobPolicy& policy);

// For each collective function of `comm`: N = 1 + the highest sequence
// number every live member completed. When some member enqueued N and the
// members' completions have not advanced for longer than the timeout (engine
// clock, or the oldest-incomplete age the agents report, whichever is
// longer):
//   - members that never enqueued N are suspects (NON_COMM_HANG, RANK level),
//     the others victims;
//   - members whose completions stopped below what another member
//     completed, in a collective that needs every member (all-reduce,
//     all-gather, reduce-scatter, all-to-all, barrier), took part but
//     stopped reporting: their GPU or process stalled (NON_COMM_HANG, GPU
//     level; Flight Recorder dumps after a GPU error look like this);
//   - if all enqueued N: COMM_HANG; suspects are the in-flight connections
//     with the least proxy progress when they stand out, else none yet (and
//     `*want_profiling` is set).
// SUSPECTED after one timeout, CONFIRMED after two; resolved when the
// completions advance. Communicators with a dead member are skipped (the
// process-died fault covers them). Members that never reported any
// progress for the comm (no agent, not connected yet) and members that
// exited cleanly are left out: neither blamed nor waited for. Key:
// "hang/<comm hex>/<func>".
void DetectHangs(CommState* comm, const v1::JobPolicy& policy, int64_t now_ns,
                 FaultTracker* tracker, bool* want_profiling);

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_DETECT_HANG_DETECTOR_H_
