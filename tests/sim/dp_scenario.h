// A small data-parallel scenario for the simulator's unit tests.
#ifndef PITSTOP_TESTS_SIM_DP_SCENARIO_H_
#define PITSTOP_TESTS_SIM_DP_SCENARIO_H_

#include "src/sim/scenario.h"

namespace pitstop::sim {

// nodes x gpus_per_node ranks in one DP ring (0 -> 1 -> ... -> 0), one
// channel, each step 100 ms of compute then a 64 MiB all-reduce, no
// jitter, 3 s long. GPU g uses NIC g % nics_per_node.
inline Scenario DpScenario(int nodes, int gpus_per_node, int nics_per_node) {
  Scenario s;
  s.nodes = nodes;
  s.gpus_per_node = gpus_per_node;
  s.nics_per_node = nics_per_node;
  s.tp = 1;
  s.dp = nodes * gpus_per_node;
  s.channels = 1;
  s.duration_s = 3;
  s.compute_jitter = 0;
  s.step = {PhaseSpec{true, 100, Group::kDp, "", 0},
            PhaseSpec{false, 0, Group::kDp, "AllReduce", 64 << 20}};
  s.eval_step = s.step;
  return s;
}

}  // namespace pitstop::sim

#endif  // PITSTOP_TESTS_SIM_DP_SCENARIO_H_
