// How the live planner reads its inputs onto the fabric: which fabric host
// an agent's host is, and how many bytes a connection carries per
// collective when no proxy step measured them (docs/planning.md, "Live
// planner").
#ifndef PITSTOP_SRC_CONTROLLER_PLANNING_FLOW_INPUTS_H_
#define PITSTOP_SRC_CONTROLLER_PLANNING_FLOW_INPUTS_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "pitstop/v1/agent.pb.h"
#include "src/c4p/fabric.h"

namespace pitstop::controller {

// Fabric host of an agent's host name. Immutable after construction: any
// thread may call Find.
//   1. the fabric host of the same name;
//   2. else by trailing number, "node7" = "host7" (generated fabrics);
//   3. else, when the fabric has no "host7" (a file whose hosts are hashed
//      ids or "node018"), the fabric's host 7 in the reader's order.
// -1 when none: no trailing number (or more than 6 digits), or the number
// is past the fabric's hosts.
class FabricHostIndex {
 public:
  explicit FabricHostIndex(const c4p::Fabric& fabric);
  int Find(const std::string& host) const;

 private:
  absl::flat_hash_map<std::string, int> by_name_;
  int hosts_ = 0;
};

// Bytes per collective of each connection of `s` (by index; 0 for receive
// connections). A connection's measured bytes (from proxy steps, which the
// library records only while deep profiling is on) where it has them;
// else its share of what the rank sends per collective by the algorithm
// bus factor (all-reduce 2(n-1)/n x bytes, all-gather, reduce-scatter and
// all-to-all (n-1)/n x bytes, anything else x 1), split over the
// summary's send connections by their steps (evenly when none has steps).
// `n_ranks` is the communicator's size.
std::vector<double> ConnectionBytes(const v1::CollectiveSummary& s,
                                    int n_ranks);

}  // namespace pitstop::controller

#endif  // PITSTOP_SRC_CONTROLLER_PLANNING_FLOW_INPUTS_H_
