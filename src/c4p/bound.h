// The lower bound on any path assignment of a set of network flows: the
// most loaded cut the flows cannot avoid, at the fabric's current
// capacities: a NIC's links (a host's NICs when the NIC is degraded below
// `degraded_below` of nominal and its flows may move), a ToR's uplinks or
// downlinks, a pod's uplinks or downlinks. On a Clos, perfect per-packet
// spraying reaches it.
#ifndef PITSTOP_SRC_CONTROLLER_PLAN_BOUND_H_
#define PITSTOP_SRC_CONTROLLER_PLAN_BOUND_H_

#include <vector>

#include "src/c4p/fabric.h"
#include "src/c4p/flows.h"

namespace pitstop::c4p {

// Seconds.
double CutBound(const Fabric& fabric, const std::vector<Flow>& flows,
                double degraded_below);

}  // namespace pitstop::c4p

#endif  // PITSTOP_SRC_CONTROLLER_PLAN_BOUND_H_
