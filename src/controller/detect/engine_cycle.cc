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

CycleResult EngineImpl::RunCycle(const std::function<void()>& between_comms) {
  const absl::Time started = absl::Now();
  CycleResult result;
  int64_t now = clock_->MonotonicNanos();
  std::vector<HangVerdict> hangs;
  ExpireComms(now);
  // Only ExpireComms erases from comms_ (above); inputs fed by
  // between_comms may insert, which keeps the std::map's iterators valid.
  for (auto it = comms_.begin(); it != comms_.end(); ++it) {
    if (between_comms) {
      between_comms();
      now = clock_->MonotonicNanos();
    }
    CommState& c = it->second;
    EvictJoins(&c, now);
    const v1::JobPolicy policy = GetJobPolicy(c.job_id);
    if (c.window_start_ns == 0) c.window_start_ns = now;
    if (now - c.window_start_ns >=
        static_cast<int64_t>(policy.window_ms()) * 1'000'000) {
      CloseWindow(&c, policy, now, &result);
    }
    const size_t first_new = hangs.size();
    DetectHangs(&c, policy, now, &tracker_, &hangs);
    // Persist when each hang started (the age survives a restart).
    const double now_unix =
        static_cast<double>(absl::ToUnixNanos(clock_->Now()));
    for (size_t i = first_new; i < hangs.size(); ++i) {
      v1::Fault& f = hangs[i].fault;
      if (hangs[i].pending || hangs[i].dead_comm || f.evidence_size() == 0) {
        continue;
      }
      auto& values = *f.mutable_evidence(0)->mutable_values();
      auto stuck = values.find("stuck_ns");
      if (stuck != values.end()) {
        values[std::string(kHangStartedKey)] = now_unix - stuck->second;
      }
    }
  }
  RaiseHangs(hangs, &tracker_);
  result.faults = tracker_.TakeChanged();
  ++stats_.cycles;
  result.cycle_time = absl::Now() - started;
  return result;
}

void EngineImpl::CloseWindow(CommState* c, const v1::JobPolicy& policy,
                             int64_t now_ns, CycleResult* result) {
  c->window_start_ns = now_ns;
  // A window without at least two timed collectives says nothing either way
  // (idle, or a pause): it neither hits nor counts as a miss.
  if (c->window.collectives < 2) {
    c->ResetWindow();
    return;
  }
  std::map<std::string, v1::Fault> hits;
  const StragglerVerdict straggler = DetectStraggler(*c, policy);
  std::string root_key;
  c->straggler_identity.clear();
  if (straggler.hit && !FoldStraggler(*c, straggler, policy, now_ns)) {
    // A victim of another comm's straggler is remembered under that
    // straggler's key, so ranks that wait for it here fold there too.
    if (!FoldStragglerVictim(*c, straggler, policy, now_ns, &root_key)) {
      hits[straggler.key] = straggler.fault;
      root_key = straggler.key;
    }
    c->straggler_identity = RankIdentity(*c, straggler.rank);
    c->straggler_key = root_key;
    c->straggler_lateness_ns = straggler.others_wait_ns;
    c->straggler_at_ns = now_ns;
  }
  const CommSlowVerdict slow = DetectCommSlow(c, policy, straggler.hit);
  if (slow.hit) hits[slow.key] = slow.fault;
  c->comm_slow_extra_ns = slow.hit ? slow.extra_ns : 0;
  c->comm_slow_at_ns = now_ns;
  if (slow.want_profiling) RequestProfiling(c, now_ns, result);
  tracker_.EndWindow(c->comm_hash, hits, policy.persistence_n(),
                     policy.persistence_m());
  c->ResetWindow();
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
      if (m.dead && m.host == host && m.pid == l.pid()) dead_rank = r;
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
      if (m.dead && m.host == host && m.pid == l.pid()) continue;
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
  tracker_.Raise(absl::StrCat("died/", host, "/", l.pid()), f,
                 v1::FAULT_STATE_CONFIRMED);
}

}  // namespace pitstop::controller
