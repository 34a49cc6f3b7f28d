#include "src/controller/detect/hang_detector.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "src/controller/detect/frozen_members.h"
#include "src/controller/detect/mismatch.h"
#include "src/controller/detect/open_proxy_ops.h"
#include "src/controller/detect/robust_stats.h"
#include "src/controller/detect/suspects.h"

namespace pitstop::controller {
namespace {

bool IsP2p(int32_t func) {
  return func == v1::COLL_FUNC_SEND || func == v1::COLL_FUNC_RECV ||
         func == v1::COLL_FUNC_SEND_RECV;
}

// Collectives that no member can complete before every member has taken
// part (each rank receives data from all others).
bool NeedsEveryMember(int32_t func) {
  return func == v1::COLL_FUNC_ALL_REDUCE || func == v1::COLL_FUNC_ALL_GATHER ||
         func == v1::COLL_FUNC_REDUCE_SCATTER ||
         func == v1::COLL_FUNC_ALL_TO_ALL || func == v1::COLL_FUNC_BARRIER;
}

struct Stalled {
  int32_t rank;
  int32_t peer;
  uint64_t bytes;
};

// In-flight connections of ranks working on `seq` whose bytes did not move
// since the previous report and are the lowest of all; empty when nothing
// stands out.
std::vector<Stalled> LeastProgress(const FuncProgress& fp) {
  std::vector<Stalled> all;
  for (const auto& [r, rp] : fp.ranks) {
    for (const auto& [k, bytes] : rp.in_flight) {
      if (bytes.first == bytes.second) {
        all.push_back({r, std::get<0>(k), bytes.first});
      }
    }
  }
  if (all.size() < 2) return {};
  const uint64_t min_bytes =
      std::min_element(all.begin(), all.end(), [](auto& a, auto& b) {
        return a.bytes < b.bytes;
      })->bytes;
  const double median = Median([&] {
    std::vector<double> v;
    for (const Stalled& s : all) v.push_back(static_cast<double>(s.bytes));
    return v;
  }());
  std::vector<Stalled> least;
  for (const Stalled& s : all) {
    if (s.bytes <= min_bytes + (median - min_bytes) / 4) least.push_back(s);
  }
  if (least.size() * 2 > all.size() || median <= min_bytes) return {};
  return least;
}

// Key of a hang fault: the class is part of it, so a fault's class never
// changes under one id (a comm hang that turns out to be a non-comm hang is
// a new fault; the old one is resolved).
std::string HangKey(const CommState& comm, int32_t func, v1::FaultClass cls) {
  return absl::StrFormat("hang/%x/%d/%d", comm.comm_hash, func,
                         static_cast<int>(cls));
}

// The classes a hang of one (comm, func) can be raised under; it moves
// between them as evidence changes, and all end when collectives complete.
// At most this many members without any data can be blamed for a hang.
constexpr int64_t kMaxSilentMembers = 64;

constexpr v1::FaultClass kHangClasses[] = {
    v1::FAULT_CLASS_NON_COMM_HANG, v1::FAULT_CLASS_COMM_HANG,
    v1::FAULT_CLASS_PROCESS_DIED, v1::FAULT_CLASS_MISMATCH};

void AddClear(std::vector<HangClear>* clears, std::string key,
              absl::string_view note) {
  clears->push_back(HangClear{std::move(key), std::string(note)});
}

void Resolve(CommState* comm, int32_t func, std::vector<HangClear>* clears,
             const char* why = "collectives complete again") {
  for (v1::FaultClass cls : kHangClasses) {
    AddClear(clears, HangKey(*comm, func, cls), why);
  }
}

// Clears the hang faults of (comm, func) of every class but `keep`.
void ClearOtherClasses(const CommState& comm, int32_t func, v1::FaultClass keep,
                       std::vector<HangClear>* clears) {
  for (v1::FaultClass cls : kHangClasses) {
    if (cls != keep) {
      AddClear(clears, HangKey(comm, func, cls),
               absl::StrCat("the hang is now classified ",
                            v1::FaultClass_Name(keep)));
    }
  }
}

// A mismatch is raised once, under the majority's function; the hangs of
// the other functions involved are the same fault and are cleared.
void RaiseMismatch(CommState* comm, int32_t func, const Mismatch& m,
                   const std::set<int32_t>& judged, int64_t stuck,
                   int64_t timeout, int64_t confirm_at,
                   std::vector<HangClear>* clears,
                   std::vector<HangVerdict>* out) {
  if (m.groups[0].op.func != func) {
    for (v1::FaultClass cls : kHangClasses) {
      AddClear(clears, HangKey(*comm, func, cls),
               "part of a collective mismatch raised under the "
               "majority's function");
    }
    return;
  }
  ClearOtherClasses(*comm, func, v1::FAULT_CLASS_MISMATCH, clears);
  HangVerdict& v = out->emplace_back();
  v.key = HangKey(*comm, func, v1::FAULT_CLASS_MISMATCH);
  v.state = stuck >= confirm_at ? v1::FAULT_STATE_CONFIRMED
                                : v1::FAULT_STATE_SUSPECTED;
  BuildMismatchFault(*comm, m, stuck, &v.fault);
  (*v.fault.mutable_evidence(0)->mutable_values())["timeout_ns"] =
      static_cast<double>(timeout);
  // Every member is blocked here: hangs of other communicators that wait
  // for them fold into this one.
  for (int32_t r : judged) v.waiting.insert(RankIdentity(*comm, r));
}

// Suspect + evidence for a link src -> dst of `comm`.
void AddLinkSuspect(const CommState& comm, int32_t src, int32_t dst,
                    v1::Fault* f) {
  v1::Suspect* sus = f->add_suspects();
  *sus = MemberSuspect(comm, src, v1::SUSPECT_LEVEL_LINK, 0.7);
  const v1::Suspect peer = MemberSuspect(comm, dst, v1::SUSPECT_LEVEL_LINK, 0);
  sus->set_peer_comm_rank(dst);
  sus->set_peer_global_rank(peer.global_rank());
  sus->set_peer_host(peer.host());
}

void BuildCommHang(const CommState& comm, const FuncProgress& fp,
                   v1::Fault* f) {
  FillFaultHeader(comm, v1::FAULT_CLASS_COMM_HANG, "hang", f);
  auto& values = *f->mutable_evidence(0)->mutable_values();
  int open_total = 0, conn_total = 0;
  const std::vector<OpenLink> open = OpenProxyLinks(
      fp, static_cast<int64_t>(f->seq_number()), &open_total, &conn_total);
  std::string how;
  if (!open.empty()) {
    std::string which;
    for (const OpenLink& l : open) {
      AddLinkSuspect(comm, l.src, l.dst, f);
      values[absl::StrCat("open_proxy_sides/", l.src, ">", l.dst)] =
          l.sides_open;
      values[absl::StrCat("open_channels/", l.src, ">", l.dst)] = l.channels;
      absl::StrAppend(&which, which.empty() ? "" : ", ",
                      DescribeRank(comm, l.src), " -> ",
                      DescribeRank(comm, l.dst));
    }
    values["connections_reported"] = conn_total;
    values["connections_open"] = open_total;
    how = absl::StrFormat(
        "%zu connection(s) whose proxy ops stayed open (%s) while the other "
        "%d of %d connections' proxy ops stopped",
        open.size(), which, conn_total - open_total, conn_total);
  } else {
    const std::vector<Stalled> least = LeastProgress(fp);
    for (const Stalled& s : least) {
      AddLinkSuspect(comm, s.rank, s.peer, f);
      values[absl::StrCat("in_flight_bytes/", s.rank, ">", s.peer)] = s.bytes;
    }
    // No deep profiling here: NCCL samples the activation mask when an
    // operation starts, so the stuck one would never record more.
    how = least.empty()
              ? "no connection stands out"
              : absl::StrCat(least.size(),
                             " connection(s) with the least proxy progress");
  }
  AddVictims(comm, {}, f);
  f->set_summary(absl::StrFormat(
      "comm-hang: every member of %s entered seq %d and none completes; %s",
      CommLabel(comm), f->seq_number(), how));
}

// Every member that reports waits in `seq`; the members in `silent` never
// sent anything (no telemetry stream started, or offline no dump): the hang
// can only be theirs. Classed as a process death, the likeliest reason a
// rank leaves no data while its peers wait for it (NVIDIA/nccl#795); the
// suspect level is the process, not its GPU, since nothing was measured.
void BuildSilentMemberHang(const CommState& comm,
                           const std::set<int32_t>& silent, int64_t seq,
                           int64_t stuck_ns, v1::Fault* f) {
  FillFaultHeader(comm, v1::FAULT_CLASS_PROCESS_DIED, "hang", f);
  auto& values = *f->mutable_evidence(0)->mutable_values();
  std::string who;
  for (int32_t r : silent) {
    *f->add_suspects() = MemberSuspect(comm, r, v1::SUSPECT_LEVEL_PROCESS, 0.7);
    if (f->suspects_size() <= 8) {
      absl::StrAppend(&who, who.empty() ? "" : ", ", DescribeRank(comm, r));
    }
  }
  values["members_without_data"] = static_cast<double>(silent.size());
  AddVictims(comm, silent, f);
  f->set_summary(absl::StrFormat(
      "process died or never started: %zu of %d ranks of %s left no data "
      "(no telemetry stream, no dump) while every other member waits in seq "
      "%d for %.1f s: %s",
      silent.size(), comm.ExpectedRanks(), CommLabel(comm), seq, stuck_ns / 1e9,
      who));
}

// The verdict of a comm with a dead member: its live members that have an
// op in flight, and the dead, are blocked here, under the death's fault.
HangVerdict DeadCommVerdict(const CommState& comm) {
  HangVerdict v;
  v.dead_comm = true;
  v.fault.set_comm_hash(comm.comm_hash);
  v.fault.set_comm_name(comm.comm_name);
  v.fault.set_job_id(comm.job_id);
  for (const auto& [rank, m] : comm.members) {
    if (m.dead) {
      if (v.key.empty()) {
        v.key = !m.death_key.empty()
                    ? m.death_key
                    : absl::StrCat("died/", m.host, "/", m.pid);
      }
      v.waiting.insert(RankIdentity(comm, rank));
      continue;
    }
    for (const auto& [func, fp] : comm.progress) {
      const RankProgressState& rp = fp.RankAt(rank);
      if (rp.enqueued > rp.completed) {
        v.waiting.insert(RankIdentity(comm, rank));
      }
    }
  }
  return v;
}

// Who a cycle judges in one communicator (DetectHangs' first step).
struct Judged {
  // Members that reported progress (and are not left out below).
  std::set<int32_t> ranks;
  // Members that left no data at all while reachable.
  std::set<int32_t> silent;
  // Members on a node whose agent is gone: their last report is stale.
  std::set<std::string> lost_hosts;
  int lost_members = 0;
  // Every member that reported left the communicator cleanly (exited, or
  // destroyed it): nobody waits, and a hang raised before is over.
  bool everyone_left = false;
};

Judged JudgedMembers(const CommState& comm, int32_t n) {
  Judged j;
  // The members judged: those that reported progress. Members that never
  // did (no agent on their node, or not connected yet) cannot be judged:
  // they are left out, not blamed. Sparse, so the work follows the ranks
  // that reported, not the n_ranks a message claims.
  for (const auto& [func, fp] : comm.progress) {
    for (const auto& [r, rp] : fp.ranks) {
      if (rp.reported && r < n) j.ranks.insert(r);
    }
  }
  // Members that left no data at all while reachable: no telemetry stream
  // ever started (or, offline, no dump was written). If their peers wait
  // for them in a hang, they are the only explanation left. Only a few can
  // be such suspects: with more silent than kMaxSilentMembers, data is
  // missing broadly (a node without an agent) and nobody is blamed; the
  // bound also keeps the work independent of the n_ranks a message claims.
  if (!j.ranks.empty() &&
      n - static_cast<int64_t>(j.ranks.size()) <= kMaxSilentMembers) {
    for (int32_t r = 0; r < n; ++r) {
      if (j.ranks.count(r)) continue;
      auto m = comm.members.find(r);
      if (m != comm.members.end() &&
          (m->second.Left() || m->second.dead || m->second.unreachable)) {
        continue;
      }
      j.silent.insert(r);
    }
  }
  // Members that exited cleanly (or destroyed the communicator) stay judged
  // while someone is still there to wait: one that left before a collective
  // its peers wait in is the rank they wait for (a sim rank that hung and
  // then exited read as "every member entered", a COMM_HANG). With every
  // member gone nobody waits, whatever their last records said.
  bool anyone_left = false;
  for (int32_t r : j.ranks) {
    auto m = comm.members.find(r);
    anyone_left |= m == comm.members.end() || !m->second.Left();
  }
  j.everyone_left = !anyone_left && !j.ranks.empty();
  for (const auto& [r, m] : comm.members) {
    if (r >= n) break;
    if (m.Left() && !anyone_left) j.ranks.erase(r);
    if (m.unreachable && !m.exited && !m.dead) {
      j.ranks.erase(r);
      j.lost_hosts.insert(m.host);
      ++j.lost_members;
    }
  }
  return j;
}

// One function's hang check in one communicator: the lowest sequence
// number not completed by every judged member, and how long it is stuck.
struct HangCheck {
  int32_t func = 0;
  int64_t min_completed = INT64_MAX;
  int64_t max_enqueued = -1;
  int64_t seq = 0;         // min_completed + 1
  int64_t stuck = 0;       // ns
  int64_t confirm_at = 0;  // ns stuck at which the hang is CONFIRMED
};

// The judged members' progress of `func`: the lowest completion (its
// advance time kept: a hang adopted from before a restart started back
// then) and the highest enqueue. False when no judged member reported it.
bool TrackProgress(CommState* comm, int32_t func, FuncProgress& fp,
                   const std::set<int32_t>& judged, int64_t now_ns,
                   HangCheck* h) {
  for (int32_t r : judged) {
    h->min_completed = std::min(h->min_completed, fp.RankAt(r).completed);
    h->max_enqueued = std::max(h->max_enqueued, fp.RankAt(r).enqueued);
  }
  if (h->min_completed == INT64_MAX) return false;
  if (h->min_completed != fp.min_completed) {
    // The first computation keeps the time the progress arrived.
    if (fp.min_completed != -2 || fp.last_advance_ns == 0) {
      fp.last_advance_ns = now_ns;
    }
    // A hang open before a controller restart started back then.
    auto adopted = comm->adopted_hang_start.find(func);
    if (adopted != comm->adopted_hang_start.end()) {
      if (adopted->second.first == h->min_completed + 1) {
        fp.last_advance_ns =
            std::min(fp.last_advance_ns, adopted->second.second);
      }
      comm->adopted_hang_start.erase(adopted);
    }
    fp.min_completed = h->min_completed;
  }
  return true;
}

// How long seq has been waited for: since the last advance, or since work
// resumed after an idle spell, or the oldest incomplete op's age.
int64_t StuckFor(FuncProgress& fp, int64_t seq, int64_t now_ns) {
  if (fp.waiting_since_ns == 0) {
    // Work resumed after an idle spell (dlrover#1749: a checkpoint
    // longer than the timeout): the wait starts with the report that
    // showed it, not at the last completion before the pause.
    fp.waiting_since_ns = std::max(fp.last_input_ns, fp.last_advance_ns);
  } else if (fp.waiting_since_ns < 0) {
    fp.waiting_since_ns = fp.last_advance_ns;
  }
  int64_t stuck = now_ns - std::max(fp.last_advance_ns, fp.waiting_since_ns);
  for (const auto& [r, rp] : fp.ranks) {
    if (rp.oldest_incomplete_seq == seq) {
      stuck =
          std::max(stuck, static_cast<int64_t>(rp.oldest_incomplete_age_ns));
    }
  }
  return stuck;
}

// Stuck for a quarter of the timeout: not raised yet, but new hangs
// elsewhere that wait for its members are held back meanwhile.
void PendingVerdict(const CommState& comm, const HangCheck& h,
                    const FuncProgress& fp, const std::set<int32_t>& judged,
                    std::vector<HangVerdict>* out) {
  HangVerdict& v = out->emplace_back();
  v.pending = true;
  v.key = absl::StrFormat("hang/%x/%d", comm.comm_hash, h.func);
  v.fault.set_comm_hash(comm.comm_hash);
  v.fault.set_job_id(comm.job_id);
  for (int32_t r : judged) {
    if (fp.RankAt(r).enqueued >= h.seq) {
      v.waiting.insert(RankIdentity(comm, r));
    }
  }
}

// Completion stall (added for imported Flight Recorder dumps): a member
// whose completions stopped below what another member completed, in a
// collective that needs every member, did take part in those collectives
// but no longer reports them: its GPU or process stopped (e.g. a GPU error
// freezes the watchdog's view).
//
// Silent divergence (NVIDIA/nccl#1730): one rank's watchdog fires while
// every other signal looks healthy. Its completions stopped while the
// others' went on, and it kept enqueuing (enqueued - completed grows). In a
// collective with a root (broadcast, reduce) one member can complete
// without another, so there it takes a strict majority of the judged
// members that completed past it.
struct Stall {
  std::set<int32_t> ranks;
  int64_t max_completed = -1;
  int moved_on = 0;  // judged members that completed seq
};

Stall StalledMembers(const FuncProgress& fp, const HangCheck& h,
                     const std::set<int32_t>& judged,
                     const std::set<int32_t>& behind) {
  Stall st;
  for (int32_t r : judged) {
    st.max_completed = std::max(st.max_completed, fp.RankAt(r).completed);
    if (fp.RankAt(r).completed >= h.seq) ++st.moved_on;
  }
  const bool every = NeedsEveryMember(h.func);
  const bool majority_moved_on =
      2 * st.moved_on > static_cast<int>(judged.size());
  for (int32_t r : judged) {
    if (behind.count(r)) continue;
    const int64_t c = fp.RankAt(r).completed;
    if (every ? st.max_completed >= h.seq && c < st.max_completed
              : majority_moved_on && c < h.seq) {
      st.ranks.insert(r);
    }
  }
  return st;
}

// NON_COMM_HANG of members whose completions stalled (GPU-level suspects).
void BuildStalledHang(const CommState& comm, const FuncProgress& fp,
                      const HangCheck& h, const std::set<int32_t>& judged,
                      const Stall& st, v1::Fault* f) {
  FillFaultHeader(comm, v1::FAULT_CLASS_NON_COMM_HANG, "hang", f);
  auto& values = *f->mutable_evidence(0)->mutable_values();
  std::string who;
  for (int32_t r : st.ranks) {
    *f->add_suspects() = MemberSuspect(comm, r, v1::SUSPECT_LEVEL_GPU, 0.8);
    values[absl::StrCat("last_completed_seq/rank", r)] =
        static_cast<double>(fp.RankAt(r).completed);
    values[absl::StrCat("outstanding/rank", r)] =
        static_cast<double>(fp.RankAt(r).enqueued - fp.RankAt(r).completed);
    if (f->suspects_size() <= 8) {
      absl::StrAppend(&who, who.empty() ? "" : ", ", DescribeRank(comm, r));
    }
  }
  values["max_completed_seq"] = static_cast<double>(st.max_completed);
  values["members_completed_past"] = st.moved_on;
  int64_t outstanding_others = 0;
  int64_t outstanding_stalled = 0;
  for (int32_t r : judged) {
    const int64_t o = fp.RankAt(r).enqueued - fp.RankAt(r).completed;
    int64_t& max = st.ranks.count(r) ? outstanding_stalled : outstanding_others;
    max = std::max(max, o);
  }
  values["max_outstanding_others"] = static_cast<double>(outstanding_others);
  AddVictims(comm, st.ranks, f);
  f->set_summary(absl::StrFormat(
      "non-comm-hang: %zu of %d ranks of %s never completed seq %d, "
      "which %d other member(s) completed (up to seq %d)%s: their GPU or "
      "process stalled %.1f s ago with up to %d op(s) enqueued and not "
      "completed, the others at most %d (silent divergence: only the "
      "stalled rank's own watchdog sees it): %s",
      st.ranks.size(), comm.ExpectedRanks(), CommLabel(comm), h.seq,
      st.moved_on, st.max_completed,
      NeedsEveryMember(h.func) ? " and which needed them" : "", h.stuck / 1e9,
      outstanding_stalled, outstanding_others, who));
}

// NON_COMM_HANG of members that never enqueued seq (rank-level suspects).
void BuildBehindHang(const CommState& comm, const FuncProgress& fp,
                     const HangCheck& h, const std::set<int32_t>& behind,
                     v1::Fault* f) {
  FillFaultHeader(comm, v1::FAULT_CLASS_NON_COMM_HANG, "hang", f);
  auto& values = *f->mutable_evidence(0)->mutable_values();
  std::string who;
  for (int32_t r : behind) {
    *f->add_suspects() = MemberSuspect(comm, r, v1::SUSPECT_LEVEL_RANK, 0.9);
    values[absl::StrCat("last_enqueued_seq/rank", r)] =
        static_cast<double>(fp.RankAt(r).enqueued);
    if (f->suspects_size() <= 8) {
      absl::StrAppend(&who, who.empty() ? "" : ", ", DescribeRank(comm, r));
    }
  }
  AddVictims(comm, behind, f);
  f->set_summary(absl::StrFormat(
      "non-comm-hang: %zu of %d ranks of %s never enqueued seq %d that "
      "the others wait in for %.1f s: %s",
      behind.size(), comm.ExpectedRanks(), CommLabel(comm), h.seq,
      h.stuck / 1e9, who));
}

// The verdict of a hang past its timeout: its class's key (the other hang
// classes' keys cleared), SUSPECTED, or CONFIRMED once stuck for the
// policy's hang_confirm_multiplier timeouts, who it waits for and who waits.
void EmitHangVerdict(const CommState& comm, const HangCheck& h, const Judged& j,
                     const std::set<int32_t>& behind,
                     const std::set<int32_t>& stalled, v1::Fault f,
                     std::vector<HangClear>* clears,
                     std::vector<HangVerdict>* out) {
  for (v1::FaultClass cls : kHangClasses) {
    if (cls != f.fault_class()) {
      AddClear(clears, HangKey(comm, h.func, cls),
               absl::StrCat("the hang is now classified ",
                            v1::FaultClass_Name(f.fault_class())));
    }
  }
  HangVerdict& v = out->emplace_back();
  v.key = HangKey(comm, h.func, f.fault_class());
  v.state = h.stuck >= h.confirm_at ? v1::FAULT_STATE_CONFIRMED
                                    : v1::FAULT_STATE_SUSPECTED;
  const bool silent_hang = f.fault_class() == v1::FAULT_CLASS_PROCESS_DIED;
  if (silent_hang) {
    for (int32_t r : j.silent) v.missing.insert(RankIdentity(comm, r));
  }
  for (int32_t r : j.ranks) {
    if (behind.count(r)) {
      if (stalled.empty()) v.missing.insert(RankIdentity(comm, r));
    } else {
      v.waiting.insert(RankIdentity(comm, r));
    }
  }
  v.fault = std::move(f);
}

// A hang past its timeout, classified: members that stalled, members
// behind (never enqueued seq), members silent, else the communicator
// itself (COMM_HANG); the unreachable nodes are named.
void RaiseHang(const CommState& comm, const FuncProgress& fp,
               const HangCheck& h, int64_t timeout, const Judged& j,
               std::vector<HangClear>* clears, std::vector<HangVerdict>* out) {
  const int32_t n = comm.ExpectedRanks();
  std::set<int32_t> behind;
  const int unreported = n - static_cast<int>(j.ranks.size());
  for (int32_t r : j.ranks) {
    if (fp.RankAt(r).enqueued < h.seq) behind.insert(r);
  }
  const Stall st = StalledMembers(fp, h, j.ranks, behind);
  v1::Fault f;
  f.set_func(static_cast<v1::CollFunc>(h.func));
  f.set_seq_number(static_cast<uint64_t>(h.seq));
  v1::Evidence* e = f.add_evidence();
  e->set_comm_hash(comm.comm_hash);
  e->add_seq_numbers(static_cast<uint64_t>(h.seq));
  auto& values = *e->mutable_values();
  values["stuck_ns"] = static_cast<double>(h.stuck);
  values["timeout_ns"] = static_cast<double>(timeout);
  values["max_enqueued_seq"] = static_cast<double>(h.max_enqueued);
  values["members_without_progress"] = unreported;
  // A member whose whole process went silent explains the hang before
  // anything else: it can take part in nothing, and the members that wait
  // for it (behind it in the ring, or short of what it held up) would
  // otherwise be named for it.
  const std::set<int32_t> frozen = FrozenMembers(fp, j.ranks);
  if (!frozen.empty()) {
    BuildFrozenMemberHang(comm, fp, frozen, h.stuck, &f);
  } else if (behind.empty() && !st.ranks.empty()) {
    BuildStalledHang(comm, fp, h, j.ranks, st, &f);
  } else if (!behind.empty()) {
    BuildBehindHang(comm, fp, h, behind, &f);
  } else if (!j.silent.empty()) {
    BuildSilentMemberHang(comm, j.silent, h.seq, h.stuck, &f);
  } else {
    BuildCommHang(comm, fp, &f);
  }
  e = f.mutable_evidence(0);
  e->set_text(f.summary());
  if (j.lost_members > 0) {
    (*e->mutable_values())["members_on_unreachable_nodes"] = j.lost_members;
    f.set_summary(absl::StrCat(
        f.summary(), "; ", j.lost_members, " rank(s) not judged: the agent of ",
        absl::StrJoin(j.lost_hosts, ", "), " is unreachable"));
    e->set_text(f.summary());
  }
  EmitHangVerdict(comm, h, j, behind, st.ranks, std::move(f), clears, out);
}

}  // namespace

int64_t HangTimeoutNs(const CommState& comm, const v1::JobPolicy& policy) {
  const double p99 = Quantile(comm.recent_max_duration_ns, 0.99);
  return std::max<int64_t>(
      static_cast<int64_t>(policy.hang_timeout_floor_ms()) * 1'000'000,
      static_cast<int64_t>(policy.hang_timeout_multiplier() * p99));
}

int64_t HangConfirmAtNs(int64_t timeout_ns, const v1::JobPolicy& policy) {
  // Resolved policies always set it; an unresolved one gets the default.
  const double k = policy.hang_confirm_multiplier() > 0
                       ? policy.hang_confirm_multiplier()
                       : kDefaultHangConfirmMultiplier;
  return static_cast<int64_t>(k * static_cast<double>(timeout_ns));
}

void DetectHangs(CommState* comm, const v1::JobPolicy& policy, int64_t now_ns,
                 std::vector<HangClear>* clears,
                 std::vector<HangVerdict>* out) {
  bool any_dead = false;
  for (const auto& [r, m] : comm->members) any_dead |= m.dead;
  const int64_t timeout = HangTimeoutNs(*comm, policy);
  const int64_t confirm_at = HangConfirmAtNs(timeout, policy);
  const Judged j = JudgedMembers(*comm, comm->ExpectedRanks());
  if (any_dead) out->push_back(DeadCommVerdict(*comm));
  // Looked for once per comm, when a hang reaches its timeout.
  std::optional<std::optional<Mismatch>> mismatch;
  for (auto& [func, fp] : comm->progress) {
    if (IsP2p(func)) continue;
    if (j.everyone_left) {
      Resolve(comm, func, clears,
              "every member left the communicator (exited, or destroyed it)");
      continue;
    }
    HangCheck h;
    h.func = func;
    if (!TrackProgress(comm, func, fp, j.ranks, now_ns, &h)) continue;
    if (any_dead) {
      Resolve(comm, func, clears);
      continue;
    }
    if (h.max_enqueued <= h.min_completed) {
      fp.waiting_since_ns = 0;  // idle: all done, nothing outstanding
      Resolve(comm, func, clears);
      continue;
    }
    h.seq = h.min_completed + 1;
    h.stuck = StuckFor(fp, h.seq, now_ns);
    h.confirm_at = confirm_at;
    if (h.stuck < timeout) {
      Resolve(comm, func, clears);
      if (h.stuck * 4 >= timeout) PendingVerdict(*comm, h, fp, j.ranks, out);
      continue;
    }
    if (!mismatch) mismatch = FindMismatch(*comm, j.ranks);
    if (*mismatch) {
      RaiseMismatch(comm, func, **mismatch, j.ranks, h.stuck, timeout,
                    confirm_at, clears, out);
      continue;
    }
    RaiseHang(*comm, fp, h, timeout, j, clears, out);
  }
}

}  // namespace pitstop::controller
