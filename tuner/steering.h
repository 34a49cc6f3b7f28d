// How one table entry changes NCCL's choice for one collective: the part of
// the tuner that is plain arithmetic, apart from the ABI glue
// (tuner_plugin.cc) so tests call it directly.
#ifndef PITSTOP_TUNER_STEERING_H_
#define PITSTOP_TUNER_STEERING_H_

#include "pitstop/tuner_table.h"

namespace pitstop::tuner {

struct SteerOutcome {
  int cells_disabled = 0;  // cost cells set to "ignore"
  // The masks allowed no combination NCCL offered: the table was left as
  // NCCL built it (a collective with no algorithm would fail).
  bool nothing_allowed = false;
  bool channels_set = false;
};

// `table` is NCCL's cost table, float[num_algo][num_proto] row-major
// (cells of -1 are combinations NCCL will not use). Disallowed algorithms
// and protocols get -1 (never chosen) as long as one allowed combination
// remains. *n_channels: NCCL passes 0 ("NCCL decides"); max_channels caps
// it (sets it when 0), min_channels raises a value the cap left below it.
// NCCL has no floor of its own to set, so min_channels alone does nothing.
SteerOutcome ApplySteering(const Steering& s, float* table, int num_algo,
                           int num_proto, int* n_channels) noexcept;

}  // namespace pitstop::tuner

#endif  // PITSTOP_TUNER_STEERING_H_
