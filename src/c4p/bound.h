// The lower bound on any path assignment of a set of network flows: the
// most loaded cut the flows cannot avoid, at the fabric's current
// capacities: a NIC's links (a host's NICs, with all the host's flows, when
// one of its NICs is degraded below `degraded_below` of nominal and that
// NIC's flows may move to the others), a ToR's uplinks or
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

// The same cuts for flows that are not split across paths (each flow, each
// QP, takes one link of a cut): at least CutBound, more where the flows do
// not divide evenly over the cut's links (17 equal flows over 16 links need
// two on one link: 2/17 x 16 = 1.88x the fluid bound). What a path
// assignment can reach; the planner aims at it, so a fabric whose fluid
// bound no assignment reaches (an oversubscribed tier whose flows do not
// divide evenly) does not spend the repair's budget on the impossible.
double WholeFlowBound(const Fabric& fabric, const std::vector<Flow>& flows,
                      double degraded_below);

}  // namespace pitstop::c4p

#endif  // PITSTOP_SRC_CONTROLLER_PLAN_BOUND_H_
