// Which injected faults the job's traffic can show at all (docs/sim.md,
// "Not observable"). A slow link or NIC, or a stalled connection, shows
// only in the connections that cross it; in the model every member of a
// communicator sends to its ring successor on every channel (all channels
// share one ring), so two nodes that are neighbours in no ring exchange
// nothing and a NIC no rank uses to reach another node carries nothing.
// Such an injection is not a miss of pitstop's: it is scored neither found
// nor missed, and the run says why.
#ifndef PITSTOP_SRC_SIM_OBSERVABILITY_H_
#define PITSTOP_SRC_SIM_OBSERVABILITY_H_

#include <vector>

#include "src/sim/model.h"

namespace pitstop::sim {

// One connection of the job: a member of communicator `comm` sends to its
// ring successor (global ranks).
struct RingConnection {
  int comm = 0;  // index into Plan::comms
  int src = 0;
  int dst = 0;
};

// Every connection of every communicator of the plan (those the step or
// the evaluation step uses), inside nodes and between them.
std::vector<RingConnection> JobConnections(const Plan& plan);

// True for the faults that act on connections: slow_link, slow_nic,
// flapping_nic and comm_hang.
bool IsConnectionFault(FaultKind kind);

// Sets `not_observable` (the reason) on every truth of `plan` whose fault
// no connection of the job can show:
//   - no connection of any communicator crosses it (decided from the
//     communicators alone, before any traffic is timed);
//   - slow_link, slow_nic, flapping_nic: connections cross it, but none of
//     them moved data while it was active (`moved[i]` for truth i, from
//     the model's run: it begins after the run or after the job stopped,
//     or the communicators that cross it run only outside its windows).
// Other kinds are left alone (a hang that found no collective to stop
// already says it did not take effect).
void MarkUnobservable(const std::vector<bool>& moved, Plan* plan);

}  // namespace pitstop::sim

#endif  // PITSTOP_SRC_SIM_OBSERVABILITY_H_
