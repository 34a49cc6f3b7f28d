// Hang detection (non-comm-hang and comm-hang) from RankProgress, per
// communicator and collective function. Works on enqueue / start / complete
// sequence numbers alone, so it also runs on Flight Recorder imports that
// have no kernel timers.
#ifndef PITSTOP_CONTROLLER_DETECT_HANG_DETECTOR_H_
#define PITSTOP_CONTROLLER_DETECT_HANG_DETECTOR_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "pitstop/v1/controller.pb.h"
#include "src/controller/detect/comm_state.h"
#include "src/controller/detect/fault_tracker.h"

namespace pitstop::controller {

// Evidence value of hang faults: when the hang started (unix ns), so a
// controller restarted on its database keeps the hang's age.
inline constexpr absl::string_view kHangStartedKey = "hang_started_unix_ns";

// Adaptive hang timeout of a comm in ns: max(floor, multiplier x p99 of its
// recent collective durations); the floor alone without durations.
int64_t HangTimeoutNs(const CommState& comm, const v1::JobPolicy& policy);

// DefaultJobPolicy()'s hang_confirm_multiplier. 1.5 rather than 2: at the
// 5 s floor a hang is confirmed 7.5 s after it started, inside the 10 s
// the detection targets allow once the agents' reporting delay is added
// (docs/controller.md).
inline constexpr double kDefaultHangConfirmMultiplier = 1.5;

// How long a hang must be stuck (ns) before it is CONFIRMED rather than
// SUSPECTED: policy.hang_confirm_multiplier() timeouts.
int64_t HangConfirmAtNs(int64_t timeout_ns, const v1::JobPolicy& policy);

// A hang fault key whose condition no longer holds (or is now classified
// otherwise): FaultTracker::Clear(key, note), applied by the engine when it
// publishes the cycle (the detector itself may run on a snapshot, without
// the engine's caller's lock, and never touches the tracker).
struct HangClear {
  std::string key;
  std::string note;
};

// For each collective function of `comm`: N = 1 + the highest sequence
// number every live member completed. When some member enqueued N and the
// members' completions have not advanced for longer than the timeout (engine
// clock, or the oldest-incomplete age the agents report, whichever is
// longer):
//   - first, after a mismatch (below): if the process of some judged
//     members went silent (no record or heartbeat for 3 s, RankProgress.
//     process_silent_ns) while others' did not, NON_COMM_HANG naming those
//     at PROCESS level: a process stopped or frozen, often inside the
//     collective (frozen_members.h);
//   - members that never enqueued N are suspects (NON_COMM_HANG, RANK level),
//     the others victims;
//   - members whose completions stopped below what another member
//     completed, in a collective that needs every member (all-reduce,
//     all-gather, reduce-scatter, all-to-all, barrier), took part but
//     stopped reporting: their GPU or process stalled (NON_COMM_HANG, GPU
//     level; Flight Recorder dumps after a GPU error look like this); in a
//     collective with a root (broadcast, reduce) when a strict majority of
//     the judged members completed past them (silent divergence,
//     NVIDIA/nccl#1730; evidence "outstanding/rankR" = enqueued - completed);
//   - if every reporting member enqueued N but some reachable member never
//     sent any data (its telemetry never started; offline: no dump), those
//     are the suspects (PROCESS_DIED, PROCESS level, detector "hang",
//     evidence value "members_without_data"): NVIDIA/nccl#795's shape;
//   - first of all, if every judged member is blocked but in different
//     collectives (another function, or the same one with another element
//     count or datatype): MISMATCH, an application desync (mismatch.h);
//     suspects are the members outside the majority (RANK level), raised
//     once under the majority's function;
//   - else, if all enqueued N: COMM_HANG; suspects are the in-flight
//     connections with the least proxy progress when they stand out, else
//     none. Deep profiling is not asked for: NCCL samples the activation
//     mask when an operation starts, so the stuck one never records more.
// SUSPECTED after one timeout, CONFIRMED after two; resolved when the
// completions advance. Communicators with a dead member yield one
// `dead_comm` verdict (keyed by the PROCESS_DIED fault) instead. Members
// that never reported any progress for the comm (no agent, not connected
// yet) are not waited for, and blamed only as above, when every other
// member waits; so are members on a node whose agent is gone (NodeLost), and
// the fault names that node. Members that exited cleanly are judged on
// their last progress while a member that did not exit remains (one that
// left before a collective its peers wait in is the rank they wait for);
// with every member gone, nobody waits and nothing is judged. Key: "hang/<comm
// hex>/<func>/<class>" (a new class is a new fault). Verdicts are appended to
// `out` (RaiseHangs() raises them), keys to resolve to `clears`; `comm` is
// only written in its progress bookkeeping (FuncProgress::min_completed,
// last_advance_ns, adopted_hang_start), so it may be a snapshot.
struct HangVerdict {
  std::string key;
  v1::Fault fault;
  v1::FaultState state = v1::FAULT_STATE_SUSPECTED;
  // A comm with a dead member: `key` is "died/<host>/<pid>" of the dead
  // process; nothing of its own is raised.
  bool dead_comm = false;
  // Stuck for at least a quarter of its timeout: not raised, but a hang
  // not open yet that waits for its members is held back meanwhile.
  bool pending = false;
  // RankIdentity() of members that never enqueued the stuck op
  // (NON_COMM_HANG suspects of the "never enqueued" kind, and members that
  // left no data when they are the suspects).
  std::set<std::string> missing;
  // RankIdentity() of members blocked in this comm (entered the stuck op,
  // or dead).
  std::set<std::string> waiting;
};
void DetectHangs(CommState* comm, const v1::JobPolicy& policy, int64_t now_ns,
                 std::vector<HangClear>* clears, std::vector<HangVerdict>* out);

// Raises the verdicts of one cycle (all comms), folding cascades across
// communicators: a NON_COMM_HANG whose missing ranks are all blocked in a
// hang of another comm (or in a comm with a dead member) is a consequence
// of that fault, followed transitively to a root: its waiting ranks join
// the root's victims and an evidence entry names the comm, and its own key
// is cleared. Rings of such hangs (cross-comm deadlock) have no root and
// are raised as they are. Roots: COMM_HANG, GPU-level NON_COMM_HANG, a
// NON_COMM_HANG whose missing ranks are not blocked elsewhere, and open
// PROCESS_DIED faults.
void RaiseHangs(const std::vector<HangVerdict>& verdicts,
                FaultTracker* tracker);

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_DETECT_HANG_DETECTOR_H_
