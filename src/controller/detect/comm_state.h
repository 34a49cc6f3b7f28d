// Per-communicator state of the detection engine: membership, the open
// cross-rank joins, the current detection window and rank progress.
// Internal to pitstop_detect; not thread-safe (the engine serialises).
#ifndef PITSTOP_CONTROLLER_DETECT_COMM_STATE_H_
#define PITSTOP_CONTROLLER_DETECT_COMM_STATE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "pitstop/v1/agent.pb.h"
#include "pitstop/v1/common.pb.h"

namespace pitstop::controller {

// Where one comm rank runs. Filled from whatever report names it first and
// refined by later ones.
struct Member {
  bool known = false;  // some report named this rank
  // Host id (HostIds) whose report created this member: its members share
  // (and that of its summaries in open joins) is charged.
  uint32_t payer = 0;
  int32_t global_rank = -1;
  std::string host;
  uint32_t pid = 0;
  // CommunicatorInfo.process_start of the process that registered it (0:
  // unknown): with host and pid, the process (R18-2).
  uint64_t start = 0;
  int32_t cuda_device = -1;
  // Heuristic: GPU i <-> NIC i on rail-optimised nodes (see engine docs).
  std::string nic;
  bool dead = false;    // RankLifecycle DIED
  bool exited = false;  // RankLifecycle CLEAN_EXIT
  // CommunicatorInfo.finalized: this member's process destroyed the
  // communicator (and may live on); judged like a member that exited.
  bool finalized = false;
  // Took part in the communicator and left it cleanly: exited or finalized.
  bool Left() const { return exited || finalized; }
  // Registered while its communicator had no job (by records of no job,
  // e.g. an anonymous tenant's); cleared when a communicator record of the
  // job registers it. Once the communicator has a job, such a member adds
  // nothing more and a record of the job for its rank supersedes it.
  bool jobless = false;
  bool unreachable = false;  // its node's agent is gone (NodeLost)
  int64_t died_ns = 0;       // engine clock of the DIED report; 0 = alive
  // Key of the PROCESS_DIED fault its death belongs to (deaths of one job
  // close together share one fault); empty: "died/<host>/<pid>".
  std::string death_key;
};

// One connection sample of a joined collective (directed src -> dst).
struct ConnSample {
  int32_t src = 0;  // comm ranks
  int32_t dst = 0;
  double throughput_bps = 0;  // as reported (bytes / proxy op duration)
  // The rank whose proxy op this is, and the op's bytes and duration: with
  // the rank's wait in the collective known, its link is judged on the
  // time data moved (FoldConnections). 0 when not reported.
  int32_t reporter = 0;
  uint64_t bytes = 0;
  uint64_t duration_ns = 0;
};

// The summaries of one (func, seq) collected so far: one entry per rank
// that reported (memory follows what arrived, not what n_ranks claims).
struct Join {
  absl::btree_map<int32_t, int64_t> duration_ns;  // -1 = unknown duration
  uint32_t n_reported = 0;
  uint64_t bytes = 0;
  int64_t first_seen_ns = 0;  // engine clock
  std::vector<ConnSample> connections;
};

// What the closing detection window has accumulated.
struct WindowAccum {
  uint32_t collectives = 0;             // with durations on every member
  std::vector<double> sum_wait_ns;      // per comm rank
  std::vector<uint32_t> last_count;     // times the rank arrived last
  std::vector<double> min_duration_ns;  // per collective
  std::vector<double> lateness_ns;      // per collective: median wait
  // Per (func, log2 bytes) key: min durations in this window.
  std::map<uint64_t, std::vector<double>> min_duration_by_key;
  // Directed link -> throughput ratios to the collective's median.
  std::map<std::pair<int32_t, int32_t>, std::vector<double>> link_ratio;
  uint32_t collectives_with_connections = 0;
  bool any_deep = false;
};

// One rank's progress in one (comm, func); -1 = nothing yet.
struct RankProgressState {
  bool reported = false;
  int64_t enqueued = -1;
  int64_t started = -1;
  int64_t completed = -1;
  uint64_t oldest_incomplete_age_ns = 0;
  int64_t oldest_incomplete_seq = -1;
  // What that op is, as the rank issued it (0 = unknown): ranks that issued
  // different collectives at one point are a mismatch (mismatch.h).
  uint64_t oldest_incomplete_count = 0;
  int32_t oldest_incomplete_datatype = 0;
  // How long the agent had heard nothing from the rank's process at its
  // latest report (0: heard, or unknown): frozen_members.h.
  uint64_t process_silent_ns = 0;
  // In-flight proxy bytes per (peer, channel, is_send), now and before.
  std::map<std::tuple<int32_t, uint32_t, bool>, std::pair<uint64_t, uint64_t>>
      in_flight;
  // Proxy ops of the oldest incomplete op that have stopped (their
  // ConnectionSummary.duration_ns > 0); the others in in_flight are open.
  std::set<std::tuple<int32_t, uint32_t, bool>> in_flight_stopped;
};

struct FuncProgress {
  // Per comm rank that reported (sparse: a rank number does not size it).
  absl::btree_map<int32_t, RankProgressState> ranks;
  // The state of `rank`; a default (nothing reported) one when absent.
  const RankProgressState& RankAt(int32_t rank) const;
  int64_t min_completed = -2;   // -2 = not computed yet
  int64_t last_advance_ns = 0;  // engine clock
  // Engine clock of the latest progress report of this (comm, func).
  int64_t last_input_ns = 0;
  // Since when some member has an op the others have not completed:
  // 0 = seen idle (nothing outstanding) at the last cycle, -1 = never
  // judged yet. A hang is timed from the later of this and the last
  // advance, so a pause with nothing enqueued (a checkpoint longer than
  // the hang timeout) does not count as time stuck once work resumes.
  int64_t waiting_since_ns = -1;
};

// Baseline of the min duration per (func, size) for the comm-slow detector.
struct Baseline {
  double ewma_ns = 0;
  uint32_t windows = 0;
};

struct CommState {
  uint64_t comm_hash = 0;
  std::string comm_name;
  std::string job_id;
  int32_t n_ranks = 0;  // 0 = unknown
  bool n_ranks_known = false;
  uint64_t parent_comm_hash = 0;
  // Ranks some report named, by comm rank. Sparse on purpose: n_ranks comes
  // from the wire and must not size anything (docs/reliability.md).
  absl::btree_map<int32_t, Member> members;
  // Members with `dead` set (AddLifecycle; a death is never undone), so a
  // cycle need not walk every member of every comm to find none.
  uint32_t dead_members = 0;
  // Host whose report created this state (its communicators share is
  // charged), as a HostIds id.
  uint32_t owner = 0;
  // Engine clock of the last input naming this communicator (expiry).
  int64_t last_input_ns = 0;
  // Engine clock when this state was created (generations: a comm created
  // after a death is a newer one).
  int64_t created_ns = 0;
  // Hangs open when the controller restarted, per func: (stuck seq, when
  // the hang started on the engine clock). The hang detector uses it once,
  // so a hang adopted after a restart keeps its age.
  std::map<int32_t, std::pair<int64_t, int64_t>> adopted_hang_start;

  // Joins by (func, seq).
  absl::flat_hash_map<std::pair<int32_t, uint64_t>, Join> pending;
  std::deque<std::pair<int32_t, uint64_t>> pending_order;
  // Per func: every seq <= watermark has been folded or evicted.
  absl::flat_hash_map<int32_t, int64_t> folded_watermark;
  uint64_t collectives_joined = 0;
  uint64_t last_joined_seq = 0;

  WindowAccum window;
  int64_t window_start_ns = 0;
  // Recent max durations (ring) for the adaptive hang timeout.
  std::vector<double> recent_max_duration_ns;
  size_t recent_next = 0;

  std::map<uint64_t, Baseline> baselines;
  // Ordered so detection (and fault numbering) is the same on every run.
  std::map<int32_t, FuncProgress> progress;
  int64_t deep_requested_until_ns = 0;
  // Comm-slow hit of the last closed window: collective time added over
  // the baseline in that window (ns, all collectives), and when (engine
  // clock); 0 when that window did not hit.
  double comm_slow_extra_ns = 0;
  int64_t comm_slow_at_ns = 0;
  // Bumped whenever a member is added or changes (host, pid, global rank,
  // device, dead, exited, unreachable) or n_ranks does: a cycle that judged
  // a copy of this comm (DetectionEngine::BeginCycle) sees whether its
  // verdicts are stale.
  uint64_t generation = 0;
  // The straggler this communicator's last window named (RankIdentity),
  // its fault key and how long the others waited for it (ns per collective,
  // StragglerVerdict::others_wait_ns), and when (engine clock); empty when
  // that window named none.
  std::string straggler_identity;
  std::string straggler_key;
  double straggler_lateness_ns = 0;
  int64_t straggler_at_ns = 0;

  // The member `rank`, created if absent.
  Member& MemberAt(int32_t rank);
  // nullptr when no report named `rank`.
  const Member* FindMember(int32_t rank) const;
  // Number of ranks a join needs: n_ranks if known, else the highest rank
  // seen + 1.
  int32_t ExpectedRanks() const;
  void ResetWindow();
};

// Folds a complete join of `func` into the comm's window statistics
// (waits, last arrivals, min durations, connection throughput ratios) and
// the recent-duration ring used by the hang timeout.
void FoldJoin(CommState* comm, int32_t func, const Join& join);

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_DETECT_COMM_STATE_H_
