// Collective mismatch (application desync): members of one communicator
// blocked in different collectives where NCCL requires every member to issue
// the same ones in the same order (e.g. Lightning-AI/pytorch-lightning#19106).
// Internal to pitstop_detect; not thread-safe (the engine serialises).
#ifndef PITSTOP_CONTROLLER_DETECT_MISMATCH_H_
#define PITSTOP_CONTROLLER_DETECT_MISMATCH_H_

#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "pitstop/v1/controller.pb.h"
#include "src/controller/detect/comm_state.h"

namespace pitstop::controller {

// The collective a member is blocked in, as it issued it.
struct IssuedOp {
  int32_t func = 0;
  int64_t seq = -1;
  uint64_t count = 0;    // 0 = unknown (older agents, imports without size)
  int32_t datatype = 0;  // 0 = unknown
};

// Members grouped by what they issued; groups[0] is the majority.
struct Mismatch {
  struct Group {
    IssuedOp op;
    std::set<int32_t> ranks;
  };
  std::vector<Group> groups;
  // No strict majority (e.g. one rank against one): every group but the
  // first (the one holding the lowest rank) is named, with less confidence.
  bool tie = false;
};

// Looks for a mismatch among the `judged` members of `comm`: every one of
// them is blocked (enqueued an op of a non-P2P function it has not
// completed) and they are blocked in different functions, or in one function
// with different element counts or datatypes (where both are known). Members
// blocked in one function at different sequence numbers are not a mismatch
// (that is a stalled member: the hang detector's case). nullopt when there is
// no mismatch.
std::optional<Mismatch> FindMismatch(const CommState& comm,
                                     const std::set<int32_t>& judged);

// Fills `f` as a FAULT_CLASS_MISMATCH fault (detector "hang"): suspects are
// the members outside the majority (RANK level: a bug of the job, never a
// hardware verdict), victims the majority; evidence names what each group
// issued. `stuck_ns` is how long the communicator has not advanced.
void BuildMismatchFault(const CommState& comm, const Mismatch& m,
                        int64_t stuck_ns, v1::Fault* f);

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_DETECT_MISMATCH_H_
