// The detection cycle of the engine: window closing, detectors, deaths.
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/controller/detect/comm_slow_detector.h"
#include "src/controller/detect/engine_impl.h"
#include "src/controller/detect/hang_detector.h"
#include "src/controller/detect/straggler_detector.h"
#include "src/controller/detect/suspects.h"

namespace pitstop::controller {

namespace {

// A copy of `c` without the open joins (the input side, the bulk of a
// comm's memory) and the window and, unless `bulk`, without the members
// and the progress reports (for CopyForDetection to copy in pieces).
CommState CopyWithout(CommState* c, bool bulk) {
  auto pending = std::move(c->pending);
  auto order = std::move(c->pending_order);
  auto watermark = std::move(c->folded_watermark);
  WindowAccum window = std::move(c->window);
  absl::btree_map<int32_t, Member> members;
  std::map<int32_t, FuncProgress> progress;
  if (!bulk) {
    members = std::move(c->members);
    progress = std::move(c->progress);
    c->members.clear();
    c->progress.clear();
  }
  c->pending.clear();
  c->pending_order.clear();
  c->folded_watermark.clear();
  c->window = WindowAccum{};
  CommState copy = *c;
  c->pending = std::move(pending);
  c->pending_order = std::move(order);
  c->folded_watermark = std::move(watermark);
  c->window = std::move(window);
  if (!bulk) {
    c->members = std::move(members);
    c->progress = std::move(progress);
  }
  return copy;
}

// Copies the entries of `from` into `to` (empty) in runs of at most
// `*budget` entries, calling `between` whenever the budget is used up
// (`from` may change there: the run goes on from the next key).
template <typename Map>
void CopyInPieces(const Map& from, Map* to, size_t chunk, size_t* budget,
                  const std::function<void()>& between) {
  auto it = from.begin();
  while (it != from.end()) {
    if (*budget == 0) {
      const auto next = it->first;
      between();
      *budget = chunk;
      it = from.lower_bound(next);
      continue;
    }
    to->insert(to->end(), *it);
    ++it;
    --*budget;
  }
}

}  // namespace

CommState EngineImpl::CopyForDetection(
    CommState* c, bool take_window,
    const std::function<void()>& between_comms) {
  size_t entries = c->members.size();
  for (const auto& [func, fp] : c->progress) entries += fp.ranks.size();
  const size_t chunk = options_.cycle_copy_chunk;
  const bool pieces = between_comms && chunk > 0 && entries > chunk;
  // The closed window is taken first: what is joined while the pieces are
  // copied belongs to the next one.
  WindowAccum closed;
  if (take_window) {
    closed = std::move(c->window);
    c->window = WindowAccum{};
  }
  CommState copy = CopyWithout(c, /*bulk=*/!pieces);
  if (pieces) {
    // A large communicator (a data-parallel one of thousands of ranks) is
    // copied in pieces and the lock let go between them, so a batch never
    // waits for the whole copy. Progress that arrives meanwhile lands in
    // the copy or not, rank by rank, as if its report came just before or
    // just after the cycle; a change of members (which the generation
    // counts) has the members copied again in one piece.
    const uint64_t generation = c->generation;
    size_t budget = chunk;
    CopyInPieces(c->members, &copy.members, chunk, &budget, between_comms);
    // The progress of funcs known now; their reports in pieces.
    std::vector<int32_t> funcs;
    for (const auto& [func, fp] : c->progress) funcs.push_back(func);
    for (int32_t func : funcs) {
      auto live = c->progress.find(func);
      if (live == c->progress.end()) continue;
      FuncProgress& fp = copy.progress[func];
      fp.min_completed = live->second.min_completed;
      fp.last_advance_ns = live->second.last_advance_ns;
      fp.last_input_ns = live->second.last_input_ns;
      fp.waiting_since_ns = live->second.waiting_since_ns;
      CopyInPieces(live->second.ranks, &fp.ranks, chunk, &budget,
                   between_comms);
    }
    ++stats_.copies_in_pieces;
    if (c->generation != generation) {
      ++stats_.copies_redone;
      copy = CopyWithout(c, /*bulk=*/true);
    }
  }
  if (take_window) copy.window = std::move(closed);
  return copy;
}

void JudgeHangs(CommState* c, const v1::JobPolicy& policy, int64_t now_ns,
                double now_unix, std::vector<HangClear>* clears,
                std::vector<HangVerdict>* out) {
  const size_t first_new = out->size();
  DetectHangs(c, policy, now_ns, clears, out);
  // Persist when each hang started (the age survives a restart).
  for (size_t i = first_new; i < out->size(); ++i) {
    v1::Fault& f = (*out)[i].fault;
    if ((*out)[i].pending || (*out)[i].dead_comm || f.evidence_size() == 0) {
      continue;
    }
    auto& values = *f.mutable_evidence(0)->mutable_values();
    auto stuck = values.find("stuck_ns");
    if (stuck != values.end()) {
      values[std::string(kHangStartedKey)] = now_unix - stuck->second;
    }
  }
}

void EngineCycleWork::Detect() {
  if (detected) return;
  detected = true;
  if (hook) hook();
  for (CommWork& w : comms) {
    if (w.window) {
      w.straggler = DetectStraggler(w.copy, w.policy);
      w.slow = DetectCommSlow(&w.copy, w.policy, w.straggler.hit);
    }
    if (w.hangs) {
      JudgeHangs(&w.copy, w.policy, w.now_ns, w.now_unix, &w.clears,
                 &w.hang_verdicts);
    }
  }
}

CycleResult EngineImpl::RunCycle(const std::function<void()>& between_comms) {
  std::unique_ptr<CycleWork> work = BeginCycle(between_comms);
  work->Detect();
  return FinishCycle(work.get(), between_comms);
}

std::unique_ptr<CycleWork> EngineImpl::BeginCycle(
    const std::function<void()>& between_comms) {
  auto work = std::make_unique<EngineCycleWork>();
  work->started = absl::Now();
  work->hook = options_.detect_hook;
  int64_t now = clock_->MonotonicNanos();
  ExpireComms(now);
  ForgetHosts();
  RetireOldGenerations();
  RetireReplacedComms();
  config_.Raise(&tracker_, now);
  // Only ExpireComms, ForgetHosts, RetireOldGenerations and
  // RetireReplacedComms erase from comms_ (above); inputs fed by
  // between_comms may insert, which keeps the std::map's iterators valid.
  for (auto it = comms_.begin(); it != comms_.end(); ++it) {
    if (between_comms) {
      between_comms();
      now = clock_->MonotonicNanos();
    }
    CaptureComm(&it->second, now, work.get(), between_comms);
  }
  return work;
}

void EngineImpl::CaptureComm(CommState* c, int64_t now_ns,
                             EngineCycleWork* work,
                             const std::function<void()>& between_comms) {
  EvictJoins(c, now_ns);
  v1::JobPolicy policy = GetJobPolicy(c->job_id);
  if (c->window_start_ns == 0) c->window_start_ns = now_ns;
  bool window = false;
  if (now_ns - c->window_start_ns >=
      static_cast<int64_t>(policy.window_ms()) * 1'000'000) {
    c->window_start_ns = now_ns;
    // A window without at least two timed collectives says nothing either
    // way (idle, or a pause): it neither hits nor counts as a miss.
    window = c->window.collectives >= 2;
    if (!window) c->ResetWindow();
  }
  // Without progress or a dead member the hang detector finds nothing.
  const bool hangs = !c->progress.empty() || c->dead_members > 0;
  if (!window && !hangs) return;
  CommWork& w = work->comms.emplace_back();
  w.comm_hash = c->comm_hash;
  w.policy = std::move(policy);
  w.now_ns = now_ns;
  w.now_unix = static_cast<double>(absl::ToUnixNanos(clock_->Now()));
  w.window = window;
  w.hangs = hangs;
  w.copy = CopyForDetection(c, window, between_comms);
  w.generation = w.copy.generation;  // of the members copied
}

CycleResult EngineImpl::FinishCycle(
    CycleWork* base, const std::function<void()>& between_comms) {
  auto* work = static_cast<EngineCycleWork*>(base);
  work->Detect();  // a caller that did not run it
  CycleResult result;
  std::vector<HangVerdict> hangs;
  for (CommWork& w : work->comms) {
    if (between_comms) between_comms();
    auto it = comms_.find(w.comm_hash);
    if (it == comms_.end()) continue;  // only a cycle expires comms
    // Retired meanwhile: what was judged of it no longer stands.
    if (retire_pending_.contains(w.comm_hash)) continue;
    PublishComm(&it->second, &w, &result, &hangs);
  }
  RaiseHangs(hangs, &tracker_);
  result.faults = tracker_.TakeChanged();
  ++stats_.cycles;
  result.cycle_time = absl::Now() - work->started;
  return result;
}

void EngineImpl::PublishComm(CommState* c, CommWork* w, CycleResult* result,
                             std::vector<HangVerdict>* hangs) {
  if (w->window) {
    std::map<std::string, v1::Fault> hits;
    const StragglerVerdict& straggler = w->straggler;
    c->straggler_identity.clear();
    if (straggler.hit) {
      std::string root_key;
      std::string folded_key;
      if (FoldStraggler(w->copy, straggler, w->policy, w->now_ns,
                        &folded_key)) {
        // Late because a slow communicator it is in holds it up: ranks
        // that wait for it here are victims of that fault too (a chain: a
        // TP-mate of a rank in a slow DP ring is late in its own DP ring).
        // Before that fault opens, they are remembered under the
        // straggler's own key (the rank is usually named elsewhere too).
        root_key = folded_key.empty() ? straggler.key : folded_key;
      } else if (!FoldStragglerVictim(*c, straggler, w->policy, w->now_ns,
                                      &root_key)) {
        hits[straggler.key] = straggler.fault;
        root_key = straggler.key;
      }
      // Remembered under the root's key, so ranks that wait for it here
      // fold there too.
      c->straggler_identity = RankIdentity(*c, straggler.rank);
      c->straggler_key = root_key;
      c->straggler_lateness_ns = straggler.others_wait_ns;
      c->straggler_at_ns = w->now_ns;
    }
    const CommSlowVerdict& slow = w->slow;
    if (slow.hit) hits[slow.key] = slow.fault;
    // Only the comm-slow detector changes baselines.
    c->baselines = std::move(w->copy.baselines);
    c->comm_slow_extra_ns = slow.hit ? slow.extra_ns : 0;
    c->comm_slow_at_ns = w->now_ns;
    if (slow.want_profiling) RequestProfiling(c, w->now_ns, result);
    std::set<std::string> held;
    if (straggler.inconclusive) held.insert(straggler.key);
    tracker_.EndWindow(c->comm_hash, hits, w->policy.persistence_n(),
                       w->policy.persistence_m(), held);
  }
  if (!w->hangs) return;
  if (c->generation != w->generation) {
    // A member was added, moved, died, exited or its node was lost or came
    // back since the copy: the verdicts may blame a rank on stale facts.
    // Judged again here, on the live state (rare: membership changes).
    w->clears.clear();
    w->hang_verdicts.clear();
    ++stats_.hang_verdicts_rejudged;
    JudgeHangs(c, w->policy, clock_->MonotonicNanos(),
               static_cast<double>(absl::ToUnixNanos(clock_->Now())),
               &w->clears, &w->hang_verdicts);
  } else {
    // The detector's bookkeeping of the copy; progress that arrived since
    // is compared with it in the next cycle (as if it came after this one).
    for (const auto& [func, fp] : w->copy.progress) {
      auto live = c->progress.find(func);
      if (live == c->progress.end()) continue;
      live->second.min_completed = fp.min_completed;
      live->second.last_advance_ns = fp.last_advance_ns;
      live->second.waiting_since_ns = fp.waiting_since_ns;
    }
    c->adopted_hang_start = std::move(w->copy.adopted_hang_start);
  }
  for (const HangClear& clear : w->clears)
    tracker_.Clear(clear.key, clear.note);
  for (HangVerdict& v : w->hang_verdicts) hangs->push_back(std::move(v));
}

void EngineImpl::RequestProfiling(CommState* c, int64_t now_ns,
                                  CycleResult* result) {
  if (now_ns < c->deep_requested_until_ns) return;
  c->deep_requested_until_ns =
      now_ns + absl::ToInt64Nanoseconds(options_.deep_profiling_duration);
  std::set<std::string> hosts;
  for (const auto& [r, m] : c->members) {
    if (!m.host.empty()) hosts.insert(m.host);
  }
  for (const std::string& host : hosts) {
    ProfilingRequest r;
    r.host = host;
    r.comm_hash = c->comm_hash;
    r.duration_ms = static_cast<uint32_t>(
        absl::ToInt64Milliseconds(options_.deep_profiling_duration));
    result->profiling.push_back(r);
  }
}

void EngineImpl::RaiseProcessDied(absl::string_view host,
                                  const v1::RankLifecycle& l) {
  const int64_t now = clock_->MonotonicNanos();
  std::string key = absl::StrCat("died/", host, "/", l.pid());
  auto set_key = [&](const std::string& k) {
    for (auto& [hash, c] : comms_) {
      for (auto& [r, m] : c.members) {
        if (m.dead && OfProcess(c, m, host, l)) m.death_key = k;
      }
    }
  };
  // A process that could not create its communicator and then ended is
  // part of the job's configuration fault, not a process fault.
  if (config_.Failed(host, l.pid())) {
    config_.NoteDeath(host, l.pid());
    set_key(absl::StrCat("config/", l.job_id()));
    return;
  }
  if (FoldDeath(host, l, now)) return;
  set_key(key);
  DeathEpisode& episode = job_deaths_[DeathEpisodeOf(host, l.job_id())];
  episode.key = key;
  episode.first_ns = now;
  episode.deaths = 1;
  v1::Fault f;
  f.set_fault_class(v1::FAULT_CLASS_PROCESS_DIED);
  f.set_detector("lifecycle");
  f.set_job_id(l.job_id());
  v1::Suspect* s = f.add_suspects();
  s->set_level(v1::SUSPECT_LEVEL_PROCESS);
  s->set_host(std::string(host));
  s->set_pid(l.pid());
  s->set_global_rank(l.global_rank());
  s->set_comm_rank(-1);
  s->set_gpu_index(-1);
  s->set_peer_global_rank(-1);
  s->set_peer_comm_rank(-1);
  s->set_confidence(1.0);
  v1::Evidence* e = f.add_evidence();
  e->set_text(absl::StrFormat(
      "the stream of pid %u on %s (global rank %d) ended without finalize",
      l.pid(), host, l.global_rank()));
  (*e->mutable_values())["time_cpu_ns"] = static_cast<double>(l.time_cpu_ns());
  std::set<std::string> seen_victims;
  int victims_total = 0;
  for (auto& [hash, c] : comms_) {
    int32_t dead_rank = -1;
    for (const auto& [r, m] : c.members) {
      if (m.dead && OfProcess(c, m, host, l)) dead_rank = r;
    }
    if (dead_rank < 0) continue;
    if (f.comm_hash() == 0) {
      f.set_comm_hash(c.comm_hash);
      f.set_comm_name(c.comm_name);
      if (f.job_id().empty()) f.set_job_id(c.job_id);
      const v1::Suspect from_member =
          MemberSuspect(c, dead_rank, v1::SUSPECT_LEVEL_PROCESS, 1.0);
      s->set_gpu_index(from_member.gpu_index());
      s->set_nic(from_member.nic());
      s->set_comm_rank(dead_rank);
      if (s->global_rank() < 0) s->set_global_rank(from_member.global_rank());
    }
    // Peers' hangs in this comm are consequences: fold them into this fault.
    for (const std::string& key :
         tracker_.OpenKeys(absl::StrFormat("hang/%x/", c.comm_hash))) {
      tracker_.Clear(key, "consequence of a process death");
    }
    for (const auto& [r, m] : c.members) {
      if (m.dead && OfProcess(c, m, host, l)) continue;
      const std::string id = m.global_rank >= 0
                                 ? absl::StrCat("g", m.global_rank)
                                 : absl::StrCat(hash, ":", r);
      if (!seen_victims.insert(id).second) continue;
      ++victims_total;
      if (f.victims_size() < kMaxVictims) {
        *f.add_victims() = MemberSuspect(c, r, v1::SUSPECT_LEVEL_RANK, 0);
      }
    }
  }
  (*e->mutable_values())["victims_total"] = victims_total;
  f.set_summary(absl::StrFormat(
      "process died: pid %u on %s (global rank %d) ended without finalize; "
      "%d peer rank(s) will block on it",
      l.pid(), host, s->global_rank(), victims_total));
  tracker_.Raise(key, f, v1::FAULT_STATE_CONFIRMED);
}

}  // namespace pitstop::controller
