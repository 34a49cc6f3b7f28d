// A hang in which one member's whole process went silent: stopped or
// frozen (SIGSTOP, a debugger, the kernel), often inside the collective. The
// agents report how long they heard nothing from each process
// (RankProgress.process_silent_ns); the library heartbeats every second from
// its own thread, so the peers blocked in the same collective are not silent.
// Without this the hang read as a COMM_HANG with no suspect ("every member
// entered seq N and none completes"), or, when the stop came late in a ring
// all-reduce that some members had finished, as a completion stall naming the
// frozen member and its ring successor that waits for it; the network is fine
// and one process is the cause. It is judged before the other hang rules.
// Internal to pitstop_detect; not thread-safe (the engine serialises).
#ifndef PITSTOP_CONTROLLER_DETECT_FROZEN_MEMBERS_H_
#define PITSTOP_CONTROLLER_DETECT_FROZEN_MEMBERS_H_

#include <cstdint>
#include <set>

#include "pitstop/v1/controller.pb.h"
#include "src/controller/detect/comm_state.h"

namespace pitstop::controller {

// Three missed heartbeats.
inline constexpr uint64_t kFrozenProcessNs = 3'000'000'000;

// The `judged` members whose process has been silent for kFrozenProcessNs
// or more in `fp`'s reports, when some judged member is not (a silence
// shared by everyone says nothing about anyone: an agent that stopped
// reading, say). Empty otherwise.
std::set<int32_t> FrozenMembers(const FuncProgress& fp,
                                const std::set<int32_t>& judged);

// Fills `f` as a NON_COMM_HANG (detector "hang") naming the frozen members
// at PROCESS level (confidence 0.8; the others are victims), with evidence
// "process_silent_ns/rankR" and "members_frozen". `f` holds the func, seq
// and one evidence entry already.
void BuildFrozenMemberHang(const CommState& comm, const FuncProgress& fp,
                           const std::set<int32_t>& frozen, int64_t stuck_ns,
                           v1::Fault* f);

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_DETECT_FROZEN_MEMBERS_H_
