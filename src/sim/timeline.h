// Perfetto / Chrome trace-event timeline of a simulator run: one track per
// rank (grouped by node), each collective a slice ("AllReduce dp1 #42",
// with its kernel duration and wait), compute time between them implicit,
// injected faults and the faults pitstop raised as instant events.
// Open it at https://ui.perfetto.dev or chrome://tracing.
#ifndef PITSTOP_SRC_SIM_TIMELINE_H_
#define PITSTOP_SRC_SIM_TIMELINE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "src/sim/model.h"
#include "src/sim/score.h"

namespace pitstop::sim {

// Writes the JSON to `path` (overwrites). Times in µs from plan time 0.
// Internal error naming the path if it cannot be written.
absl::Status WriteTimeline(const Plan& plan,
                           const std::vector<ObservedFault>& faults,
                           const std::string& path);

}  // namespace pitstop::sim

#endif  // PITSTOP_SRC_SIM_TIMELINE_H_
