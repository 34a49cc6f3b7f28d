#include "src/controller/trainers/sync_policy.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pitstop/logging.h"

namespace pitstop::controller {
namespace {

constexpr uint32_t kMaxPeriodMs = 3'600'000;

std::string ModeName(v1::SyncMode m) {
  switch (m) {
    case v1::SYNC_MODE_SYNC:
      return "sync";
    case v1::SYNC_MODE_LOCAL_SGD:
      return "local_sgd";
    case v1::SYNC_MODE_TIMED:
      return "timed";
    default:
      return "unknown";
  }
}

bool SlowClass(v1::FaultClass c) {
  return c == v1::FAULT_CLASS_NON_COMM_SLOW || c == v1::FAULT_CLASS_COMM_SLOW;
}

// Confirmed by the detection engine at some point (an operator's
// acknowledgement or a mitigation keeps the confirmation).
bool Confirmed(const v1::Fault& f) {
  return f.confirmed_unix_ns() != 0 || f.state() == v1::FAULT_STATE_CONFIRMED;
}

}  // namespace

v1::SyncSettings DefaultSyncSettings() {
  v1::SyncSettings s;
  s.set_policy(v1::SYNC_POLICY_ADVISE);
  s.set_slow_persist_s(20);
  s.set_healthy_s(60);
  s.set_local_mode(v1::SYNC_MODE_TIMED);
  s.set_period_steps(8);
  s.set_period_ms(2000);
  s.set_apply_lead_steps(5);
  s.set_slow_signal(v1::SLOW_SIGNAL_STEPS_OR_FAULTS);
  return s;
}

absl::Status ValidateSyncSettings(const v1::SyncSettings& s) {
  if (!v1::SyncPolicy_IsValid(s.policy())) {
    return absl::InvalidArgumentError(
        absl::StrCat("settings.policy: unknown value ", s.policy()));
  }
  if (!v1::SyncMode_IsValid(s.local_mode()) ||
      s.local_mode() == v1::SYNC_MODE_SYNC) {
    return absl::InvalidArgumentError(
        absl::StrCat("settings.local_mode: must be LOCAL_SGD or TIMED, got ",
                     s.local_mode()));
  }
  if (s.slow_persist_s() > kMaxPolicySeconds ||
      s.healthy_s() > kMaxPolicySeconds) {
    return absl::InvalidArgumentError(absl::StrCat(
        s.slow_persist_s() > kMaxPolicySeconds ? "settings.slow_persist_s"
                                               : "settings.healthy_s",
        ": at most ", kMaxPolicySeconds, " (a week)"));
  }
  if (!v1::SlowSignal_IsValid(s.slow_signal())) {
    return absl::InvalidArgumentError(
        absl::StrCat("settings.slow_signal: unknown value ", s.slow_signal()));
  }
  if (s.period_steps() > 1'000'000) {
    return absl::InvalidArgumentError("settings.period_steps: at most 1000000");
  }
  if (s.period_ms() > kMaxPeriodMs) {
    return absl::InvalidArgumentError("settings.period_ms: at most 3600000");
  }
  if (s.timed_period_steps() > 1'000'000) {
    return absl::InvalidArgumentError(
        "settings.timed_period_steps: at most 1000000");
  }
  if (s.apply_lead_steps() > 1'000'000) {
    return absl::InvalidArgumentError(
        "settings.apply_lead_steps: at most 1000000");
  }
  return absl::OkStatus();
}

v1::SyncSettings ResolveSyncSettings(const v1::SyncSettings& s,
                                     const v1::SyncSettings& d) {
  v1::SyncSettings r = s;
  if (r.policy() == v1::SYNC_POLICY_UNSPECIFIED) r.set_policy(d.policy());
  if (r.slow_persist_s() == 0) r.set_slow_persist_s(d.slow_persist_s());
  if (r.healthy_s() == 0) r.set_healthy_s(d.healthy_s());
  if (r.local_mode() == v1::SYNC_MODE_UNSPECIFIED) {
    r.set_local_mode(d.local_mode());
  }
  if (r.period_steps() == 0) r.set_period_steps(d.period_steps());
  if (r.period_ms() == 0) r.set_period_ms(d.period_ms());
  if (r.apply_lead_steps() == 0) r.set_apply_lead_steps(d.apply_lead_steps());
  if (r.timed_period_steps() == 0) {
    r.set_timed_period_steps(d.timed_period_steps());
  }
  if (r.slow_signal() == v1::SLOW_SIGNAL_UNSPECIFIED) {
    r.set_slow_signal(d.slow_signal());
  }
  return r;
}

SyncPolicyEngine::SyncPolicyEngine(Clock* clock, Options options)
    : clock_(clock),
      options_(std::move(options)),
      ids_(options_.directive_ids ? options_.directive_ids : &own_ids_) {}

absl::Status SyncPolicyEngine::AddReport(const std::string& host,
                                         const v1::ReportStepsRequest& r) {
  const v1::TrainerIdentity& t = r.trainer();
  if (absl::Status st = ValidateTrainerReport(r); !st.ok()) return st;
  if (!v1::SyncMode_IsValid(r.current_mode())) {
    return absl::InvalidArgumentError("current_mode: unknown value");
  }
  ids_->Seen(t.job_id(), r.seen_directive_id());
  // Multi-LoRA pipelines are not data-parallel: the LoRA policy
  // (src/controller/trainers/lora/) judges them, not the local-SGD switch.
  for (const v1::StepReport& s : r.steps()) {
    if (s.has_lora()) return absl::OkStatus();
  }
  const int64_t now = clock_->MonotonicNanos();
  absl::StatusOr<Job*> found = FindOrAddJob(
      jobs_, t.job_id(), options_.max_jobs, options_.job_idle_expiry, now,
      "trainer.job_id", nullptr, host, options_.max_jobs_per_host);
  if (!found.ok()) return found.status();
  Job& job = **found;
  if (!job.ranks.count(t.global_rank()) &&
      job.ranks.size() >= options_.max_ranks_per_job) {
    return absl::ResourceExhaustedError(
        absl::StrCat("trainer.global_rank: job ", t.job_id(), " has ",
                     options_.max_ranks_per_job, " reporting ranks already"));
  }
  RankState& rs = job.ranks[t.global_rank()];
  rs.host = host;
  rs.seen_directive = std::max(rs.seen_directive, r.seen_directive_id());
  if (r.current_mode() != v1::SYNC_MODE_UNSPECIFIED) rs.mode = r.current_mode();
  job.world_size = std::max<uint32_t>(job.world_size, t.world_size());
  for (const v1::StepReport& s : r.steps()) {
    rs.last_step = std::max(rs.last_step, s.step());
    job.reports++;
    uint64_t comm = 0;
    bool context = false;
    for (const v1::PhaseTime& p : s.phases()) {
      if (p.phase() == v1::TRAIN_PHASE_COMMUNICATION) comm += p.duration_ns();
      if ((p.phase() == v1::TRAIN_PHASE_CHECKPOINT ||
           p.phase() == v1::TRAIN_PHASE_EVALUATION) &&
          p.duration_ns() > 0) {
        context = true;
      }
    }
    if (context) continue;  // checkpoint / evaluation: never a straggler
    rs.window.push_back({s.wall_ns() > comm ? s.wall_ns() - comm : 0, now});
    while (rs.window.size() > options_.window_steps) rs.window.pop_front();
  }
  // The job's mode: what every reporting rank says (none while it changes).
  v1::SyncMode common = rs.mode;
  for (const auto& [rank, other] : job.ranks) {
    if (other.mode != common) common = v1::SYNC_MODE_UNSPECIFIED;
  }
  if (common != v1::SYNC_MODE_UNSPECIFIED && common != job.reported) {
    if (job.reported != v1::SYNC_MODE_UNSPECIFIED) {
      job.switches_applied++;
      Logger("controller.sync")
          ->info("job {}: trainers now run {} (were {})", t.job_id(),
                 ModeName(common), ModeName(job.reported));
    }
    job.reported = common;
  }
  return absl::OkStatus();
}

void SyncPolicyEngine::Judge(Job& job, int64_t now) {
  const int64_t max_age = absl::ToInt64Nanoseconds(options_.sample_max_age);
  job.rank_ms.clear();
  for (auto& [rank, rs] : job.ranks) {
    while (!rs.window.empty() && now - rs.window.front().received_ns > max_age)
      rs.window.pop_front();
    if (rs.window.size() < options_.min_window_steps) continue;
    std::vector<double> v;
    for (const Sample& s : rs.window) v.push_back(s.compute_ns / 1e6);
    job.rank_ms[rank] = Median(std::move(v));
  }
  job.stragglers.clear();
  std::vector<double> all;
  for (const auto& [rank, ms] : job.rank_ms) all.push_back(ms);
  job.median_ms = Median(all);
  if (job.rank_ms.size() < 2) return;
  for (const auto& [rank, ms] : job.rank_ms) {
    std::vector<double> others;
    for (const auto& [r2, ms2] : job.rank_ms) {
      if (r2 != rank) others.push_back(ms2);
    }
    const double base = Median(std::move(others));
    if (base > 0 && ms >= (1.0 + options_.straggler_min_effect) * base) {
      job.stragglers.push_back(rank);
    }
  }
}

v1::Evidence SyncPolicyEngine::MakeEvidence(const Job& job, int64_t now) const {
  v1::Evidence e;
  std::vector<std::string> parts;
  for (int32_t r : job.stragglers) {
    const double ms = job.rank_ms.at(r);
    std::vector<double> others;
    for (const auto& [r2, ms2] : job.rank_ms) {
      if (r2 != r) others.push_back(ms2);
    }
    const double base = Median(std::move(others));
    parts.push_back(absl::StrCat("rank ", r, " computes ", absl::SixDigits(ms),
                                 " ms/step vs ", absl::SixDigits(base),
                                 " ms of the others"));
    (*e.mutable_values())[absl::StrCat("rank_", r, "_compute_ms")] = ms;
    (*e.mutable_values())[absl::StrCat("rank_", r, "_ratio")] =
        base > 0 ? ms / base : 0;
  }
  if (!job.slow_faults.empty()) {
    parts.push_back(absl::StrCat(job.faults_confirmed_only
                                     ? "confirmed slow faults (NCCL telemetry) "
                                     : "open slow faults ",
                                 absl::StrJoin(job.slow_faults, ", ")));
  }
  (*e.mutable_values())["median_compute_ms"] = job.median_ms;
  if (job.slow_since_ns) {
    (*e.mutable_values())["slow_for_s"] = (now - job.slow_since_ns) / 1e9;
  }
  if (job.healthy_since_ns) {
    (*e.mutable_values())["healthy_for_s"] = (now - job.healthy_since_ns) / 1e9;
  }
  (*e.mutable_values())["ranks_judged"] = job.rank_ms.size();
  e.set_text(parts.empty() ? "no straggler, no open slow fault"
                           : absl::StrJoin(parts, "; "));
  return e;
}

uint32_t SyncPolicyEngine::TimedPeriodMs(const Job& job,
                                         const v1::SyncSettings& s,
                                         std::string* how) const {
  if (s.timed_period_steps() == 0) return s.period_ms();
  // The pace of a rank that stops waiting: the median compute time per
  // step of the ranks that are not stragglers (all ranks when every one
  // is one).
  std::vector<double> fast;
  for (const auto& [rank, ms] : job.rank_ms) {
    if (std::find(job.stragglers.begin(), job.stragglers.end(), rank) ==
        job.stragglers.end()) {
      fast.push_back(ms);
    }
  }
  double step_ms = Median(std::move(fast));
  if (step_ms <= 0) step_ms = job.median_ms;
  if (step_ms <= 0) {
    *how = absl::StrCat("A-EDiT period ", s.period_ms(),
                        " ms (no step time measured yet for ",
                        s.timed_period_steps(), " steps)");
    return s.period_ms();
  }
  // Half a step of slack: a rank joins the outer sync at the last step
  // boundary that fits in the period (the trainer's timed_fit), so with
  // exactly N x step_ms a local step a little slower than the measured
  // median (reporting, jitter) would make every fast rank stop after N - 1
  // steps and wait. With N + 1/2 a fast rank takes its N steps, one at
  // half speed N / 2, and all arrive at about N x step_ms: the slack is
  // not waited for.
  const double ms = std::clamp((s.timed_period_steps() + 0.5) * step_ms, 1.0,
                               static_cast<double>(kMaxPeriodMs));
  const auto period = static_cast<uint32_t>(std::lround(ms));
  *how = absl::StrCat("A-EDiT period ", s.timed_period_steps(),
                      " steps (+ half a step of slack) x ",
                      absl::SixDigits(step_ms), " ms = ", period, " ms");
  return period;
}

void SyncPolicyEngine::Record(Job& job, v1::SyncDecision d) {
  job.decisions.push_back(std::move(d));
  while (job.decisions.size() > options_.max_decisions) {
    job.decisions.pop_front();
  }
}

std::vector<SyncPolicyEngine::Outgoing> SyncPolicyEngine::Evaluate(
    const std::vector<v1::Fault>& open_faults) {
  std::vector<Outgoing> out;
  const int64_t now = clock_->MonotonicNanos();
  for (auto& [id, job] : jobs_) {
    const v1::SyncSettings s = Settings(id);
    job.faults_confirmed_only =
        s.slow_signal() == v1::SLOW_SIGNAL_CONFIRMED_FAULTS;
    job.slow_faults.clear();
    for (const v1::Fault& f : open_faults) {
      if (f.job_id() == id && SlowClass(f.fault_class()) &&
          f.state() != v1::FAULT_STATE_RESOLVED &&
          (!job.faults_confirmed_only || Confirmed(f))) {
        job.slow_faults.push_back(f.fault_id());
      }
    }
    if (s.policy() == v1::SYNC_POLICY_OFF) {
      job.slow_since_ns = job.healthy_since_ns = 0;
      job.target = job.reported;
      continue;
    }
    Judge(job, now);
    // With confirmed faults as the signal, step-time stragglers do not
    // trigger a switch, but they still keep a switched job from going back:
    // in local SGD the slow rank no longer holds the others in a
    // collective, so its NCCL fault resolves while it is as slow as before.
    const bool slow = !job.slow_faults.empty() ||
                      (!job.faults_confirmed_only && !job.stragglers.empty());
    const bool healthy = job.slow_faults.empty() && job.stragglers.empty();
    if (slow) {
      job.healthy_since_ns = 0;
      if (job.slow_since_ns == 0) job.slow_since_ns = now;
    } else if (healthy) {
      job.slow_since_ns = 0;
      if (job.healthy_since_ns == 0) job.healthy_since_ns = now;
    } else {
      job.slow_since_ns = job.healthy_since_ns = 0;
    }
    if (job.target == v1::SYNC_MODE_UNSPECIFIED) job.target = job.reported;
    if (job.target == v1::SYNC_MODE_UNSPECIFIED) continue;  // no mode yet
    Decide(id, job, now, &out);
  }
  return out;
}

void SyncPolicyEngine::Decide(const std::string& id, Job& job, int64_t now,
                              std::vector<Outgoing>* out) {
  const v1::SyncSettings s = Settings(id);
  const bool sync = job.target == v1::SYNC_MODE_SYNC;
  v1::SyncMode to = v1::SYNC_MODE_UNSPECIFIED;
  std::string reason;
  if (sync && job.slow_since_ns != 0 &&
      now - job.slow_since_ns >= int64_t{s.slow_persist_s()} * 1'000'000'000) {
    to = s.local_mode();
    reason =
        absl::StrCat("slow for ", (now - job.slow_since_ns) / 1'000'000'000,
                     " s >= slow_persist_s ", s.slow_persist_s(),
                     ": local SGD keeps the fast ranks busy");
  } else if (!sync && job.healthy_since_ns != 0 &&
             now - job.healthy_since_ns >=
                 int64_t{s.healthy_s()} * 1'000'000'000) {
    to = v1::SYNC_MODE_SYNC;
    reason = absl::StrCat("healthy for ",
                          (now - job.healthy_since_ns) / 1'000'000'000,
                          " s >= healthy_s ", s.healthy_s());
  }
  const bool automatic = s.policy() == v1::SYNC_POLICY_AUTO;
  bool resend = false;
  if (to == v1::SYNC_MODE_UNSPECIFIED) {
    // AUTO and the trainers do not run what was decided (never sent: the
    // policy was ADVISE then; or lost / abandoned): send it again.
    if (!automatic || job.target == job.reported) return;
    if (job.last_sent_ns != 0 &&
        now - job.last_sent_ns < absl::ToInt64Nanoseconds(options_.resend)) {
      return;
    }
    to = job.target;
    resend = true;
    reason = absl::StrCat(
        "trainers run ", ModeName(job.reported), ", decided ",
        ModeName(job.target),
        job.last_sent_ns == 0 ? ": sending it now" : ": sending it again");
  }
  uint32_t period_ms = s.period_ms();
  if (to == v1::SYNC_MODE_TIMED) {
    std::string how;
    period_ms = TimedPeriodMs(job, s, &how);
    if (!how.empty()) absl::StrAppend(&reason, "; ", how);
  }
  v1::SyncDecision d;
  d.set_time_unix_ns(absl::ToUnixNanos(clock_->Now()));
  d.set_from_mode(resend ? job.reported : job.target);
  d.set_to_mode(to);
  d.set_policy(s.policy());
  d.set_reason(reason);
  *d.mutable_evidence() = MakeEvidence(job, now);
  for (const std::string& f : job.slow_faults) d.add_fault_ids(f);
  if (to == v1::SYNC_MODE_TIMED) {
    (*d.mutable_evidence()->mutable_values())["period_ms"] = period_ms;
  }
  job.target = to;
  if (automatic) {
    uint64_t last_step = 0;
    Outgoing o;
    o.job_id = id;
    std::set<std::string> hosts;
    for (const auto& [rank, rs] : job.ranks) {
      last_step = std::max(last_step, rs.last_step);
      hosts.insert(rs.host);
    }
    o.hosts.assign(hosts.begin(), hosts.end());
    v1::TrainerDirective& dir = o.directive;
    dir.set_directive_id(ids_->Next(id));
    dir.set_job_id(id);
    dir.set_mode(to);
    dir.set_period_steps(s.period_steps());
    dir.set_period_ms(period_ms);
    dir.set_apply_at_step(last_step + s.apply_lead_steps());
    dir.set_reason(absl::StrCat(reason, " (", d.evidence().text(), ")"));
    d.set_sent(true);
    d.set_directive_id(dir.directive_id());
    d.set_apply_at_step(dir.apply_at_step());
    job.last_sent_ns = now;
    job.last_sent = dir;
    out->push_back(std::move(o));
  }
  Logger("controller.sync")
      ->info("job {}: {} {} -> {}: {} [{}]", id,
             automatic ? "switching" : "advising", ModeName(d.from_mode()),
             ModeName(to), reason, d.evidence().text());
  Record(job, std::move(d));
}

absl::Status SyncPolicyEngine::CheckSettings(const std::string& job_id,
                                             const v1::SyncSettings& s) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id: required");
  if (job_id.size() > kMaxJobIdBytes) {
    return absl::InvalidArgumentError("job_id: at most 256 bytes");
  }
  return ValidateSyncSettings(s);
}

absl::StatusOr<v1::SyncSettings> SyncPolicyEngine::SetSettings(
    const std::string& job_id, const v1::SyncSettings& s) {
  if (absl::Status st = CheckSettings(job_id, s); !st.ok()) return st;
  absl::StatusOr<Job*> found =
      FindOrAddJob(jobs_, job_id, options_.max_jobs, options_.job_idle_expiry,
                   clock_->MonotonicNanos(), "job_id");
  if (!found.ok()) return found.status();
  Job& job = **found;
  job.has_settings = true;
  job.settings = s;
  return Settings(job_id);
}

v1::SyncSettings SyncPolicyEngine::Settings(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || !it->second.has_settings) return options_.defaults;
  return ResolveSyncSettings(it->second.settings, options_.defaults);
}

absl::StatusOr<v1::JobSync> SyncPolicyEngine::State(
    const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("job ", job_id, " has no reporting trainers"));
  }
  const Job& job = it->second;
  const int64_t now = clock_->MonotonicNanos();
  const int64_t unix_now = absl::ToUnixNanos(clock_->Now());
  v1::JobSync out;
  *out.mutable_settings() = Settings(job_id);
  out.set_reported_mode(job.reported);
  out.set_target_mode(job.target);
  out.set_trainers(job.ranks.size());
  for (const auto& [rank, rs] : job.ranks) {
    out.set_last_step(std::max<uint64_t>(out.last_step(), rs.last_step));
  }
  out.set_step_ms_median(job.median_ms);
  for (int32_t r : job.stragglers) out.add_step_stragglers(r);
  for (const auto& f : job.slow_faults) out.add_slow_faults(f);
  if (job.slow_since_ns) {
    out.set_slow_since_unix_ns(unix_now - (now - job.slow_since_ns));
  }
  if (job.healthy_since_ns) {
    out.set_healthy_since_unix_ns(unix_now - (now - job.healthy_since_ns));
  }
  for (const auto& d : job.decisions) *out.add_decisions() = d;
  out.set_reports(job.reports);
  out.set_switches_applied(job.switches_applied);
  return out;
}

std::map<std::string, SyncPolicyEngine::JobInfo> SyncPolicyEngine::Jobs()
    const {
  std::map<std::string, JobInfo> out;
  for (const auto& [id, job] : jobs_) {
    if (job.ranks.empty()) continue;
    JobInfo& info = out[id];
    info.world_size =
        std::max<uint32_t>(job.world_size, job.ranks.rbegin()->first + 1);
    for (const auto& [rank, rs] : job.ranks) info.hosts.insert(rs.host);
  }
  return out;
}

}  // namespace pitstop::controller
