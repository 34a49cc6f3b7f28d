// One emulated rank: replays its part of a Plan through the real in-process
// library, loaded by the NCCL emulator harness, at the planned real times.
//
// Runs in its own process (pitstop-sim-rank), so a planned crash is a real
// process death and a hang is a real stop. The environment (set by the
// coordinator before the plugin loads) carries PITSTOP_AGENT_SOCKET,
// PITSTOP_HOST, PITSTOP_JOB_ID, RANK and LOCAL_RANK.
#ifndef PITSTOP_SRC_SIM_RANK_DRIVER_H_
#define PITSTOP_SRC_SIM_RANK_DRIVER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "src/sim/model.h"

namespace pitstop::sim {

struct RankDriverOptions {
  int rank = 0;
  // CLOCK_MONOTONIC ns of plan time 0 (shared by all ranks of a run).
  int64_t start_ns = 0;
  // Plugin: NCCL_PROFILER_PLUGIN-style value or path; empty = the built one.
  std::string plugin;
};

// Replays `plan.ranks[rank]`; returns after finalizing every communicator
// at the end of the run, or never (the process _exits) at a planned crash.
// Errors: the plugin cannot be loaded or a communicator init fails.
absl::Status RunRank(const Plan& plan, const RankDriverOptions& options);

// GPU %globaltimer of `rank` at CPU time `cpu_ns`: each emulated GPU has its
// own clock offset, as real GPUs do.
uint64_t EmulatedGpuNs(int rank, int64_t cpu_ns);

}  // namespace pitstop::sim

#endif  // PITSTOP_SRC_SIM_RANK_DRIVER_H_
