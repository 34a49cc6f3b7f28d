#include "src/controller/trainers/lora/lora_policy.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "pitstop/logging.h"

namespace pitstop::controller {
namespace {

constexpr int kMaxLayers = 4096;

std::string Key(const lora::Placement& p) { return PlacementText(p); }

}  // namespace

v1::LoraSettings DefaultLoraSettings() {
  v1::LoraSettings s;
  s.set_policy(v1::LORA_POLICY_ADVISE);
  s.set_slow_min_effect(0.25);
  s.set_slow_persist_s(5);
  s.set_horizon_s(120);
  s.set_move_s_per_layer(0.05);
  s.set_apply_lead_steps(3);
  s.set_min_gain(0.1);
  s.set_max_pipelines(1);
  s.set_slow_signal(v1::SLOW_SIGNAL_STEPS_OR_FAULTS);
  return s;
}

absl::Status ValidateLoraSettings(const v1::LoraSettings& s) {
  if (!v1::LoraPolicy_IsValid(s.policy())) {
    return absl::InvalidArgumentError(
        absl::StrCat("settings.policy: unknown value ", s.policy()));
  }
  if (!(s.slow_min_effect() >= 0 && s.slow_min_effect() < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("settings.slow_min_effect: must be in [0, 1), got ",
                     s.slow_min_effect()));
  }
  if (s.slow_persist_s() > kMaxPolicySeconds ||
      s.horizon_s() > kMaxPolicySeconds) {
    return absl::InvalidArgumentError(absl::StrCat(
        s.slow_persist_s() > kMaxPolicySeconds ? "settings.slow_persist_s"
                                               : "settings.horizon_s",
        ": at most ", kMaxPolicySeconds, " (a week)"));
  }
  if (!(s.move_s_per_layer() >= 0 && s.move_s_per_layer() <= 3600)) {
    return absl::InvalidArgumentError(
        "settings.move_s_per_layer: must be in [0, 3600]");
  }
  if (!(s.min_gain() >= 0 && s.min_gain() <= 100)) {
    return absl::InvalidArgumentError("settings.min_gain: must be in [0, 100]");
  }
  if (s.apply_lead_steps() > 1'000'000) {
    return absl::InvalidArgumentError(
        "settings.apply_lead_steps: at most 1000000");
  }
  if (s.max_pipelines() > 64) {
    return absl::InvalidArgumentError("settings.max_pipelines: at most 64");
  }
  if (!v1::SlowSignal_IsValid(s.slow_signal())) {
    return absl::InvalidArgumentError(
        absl::StrCat("settings.slow_signal: unknown value ", s.slow_signal()));
  }
  return absl::OkStatus();
}

v1::LoraSettings ResolveLoraSettings(const v1::LoraSettings& s,
                                     const v1::LoraSettings& d) {
  v1::LoraSettings r = s;
  if (r.policy() == v1::LORA_POLICY_UNSPECIFIED) r.set_policy(d.policy());
  if (r.slow_min_effect() == 0) r.set_slow_min_effect(d.slow_min_effect());
  if (r.slow_persist_s() == 0) r.set_slow_persist_s(d.slow_persist_s());
  if (r.horizon_s() == 0) r.set_horizon_s(d.horizon_s());
  if (r.move_s_per_layer() == 0) r.set_move_s_per_layer(d.move_s_per_layer());
  if (r.apply_lead_steps() == 0) r.set_apply_lead_steps(d.apply_lead_steps());
  if (r.slow_signal() == v1::SLOW_SIGNAL_UNSPECIFIED) {
    r.set_slow_signal(d.slow_signal());
  }
  if (r.min_gain() == 0) r.set_min_gain(d.min_gain());
  if (r.max_pipelines() == 0) r.set_max_pipelines(d.max_pipelines());
  return r;
}

v1::LoraPlacement ToProto(const lora::Placement& p) {
  v1::LoraPlacement out;
  for (const lora::Pipeline& q : p.pipelines) {
    v1::LoraPipeline* pipe = out.add_pipelines();
    for (const lora::Stage& s : q.stages) {
      v1::LoraStage* st = pipe->add_stages();
      st->set_rank(s.rank);
      st->set_layer_begin(s.layer_begin);
      st->set_layer_end(s.layer_end);
    }
    for (uint32_t a : q.adapters) pipe->add_adapters(a);
  }
  for (int32_t r : p.excluded) out.add_excluded_ranks(r);
  out.set_estimated_samples_per_s(p.estimate.samples_per_s);
  return out;
}

std::string PlacementText(const lora::Placement& p) {
  std::vector<std::string> pipes;
  for (const lora::Pipeline& q : p.pipelines) {
    std::vector<std::string> parts;
    for (const lora::Stage& s : q.stages) {
      parts.push_back(absl::StrCat("r", s.rank, ":[", s.layer_begin, ",",
                                   s.layer_end, ")"));
    }
    std::string t = absl::StrJoin(parts, " ");
    // One pipeline trains every adapter: no list (the same placement
    // whether or not the adapters are named).
    if (p.pipelines.size() > 1) {
      absl::StrAppend(&t, " adapters ", absl::StrJoin(q.adapters, ","));
    }
    pipes.push_back(std::move(t));
  }
  std::string out = absl::StrJoin(pipes, " | ");
  if (!p.excluded.empty()) {
    absl::StrAppend(&out, " excluded ", absl::StrJoin(p.excluded, ","));
  }
  return out;
}

LoraPolicyEngine::LoraPolicyEngine(Clock* clock, Options options)
    : clock_(clock),
      options_(std::move(options)),
      ids_(options_.directive_ids ? options_.directive_ids : &own_ids_) {}

absl::Status LoraPolicyEngine::AddReport(const std::string& host,
                                         const v1::ReportStepsRequest& r) {
  const v1::TrainerIdentity& t = r.trainer();
  bool any = false;
  for (const v1::StepReport& s : r.steps()) any |= s.has_lora();
  if (!any) return absl::OkStatus();
  if (absl::Status st = ValidateTrainerReport(r); !st.ok()) return st;
  for (int i = 0; i < r.steps_size(); ++i) {
    const v1::LoraStageTime& l = r.steps(i).lora();
    if (l.layer_costs_size() > kMaxLayers ||
        (!l.excluded() && (l.layer_begin() >= l.layer_end() ||
                           l.layer_end() > uint32_t(l.layer_costs_size())))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "steps[", i, "].lora: layers [", l.layer_begin(), ", ", l.layer_end(),
          ") of ", l.layer_costs_size(), " layer costs"));
    }
  }
  absl::StatusOr<Job*> found = FindOrAddJob(t.job_id(), "trainer.job_id", host);
  if (!found.ok()) return found.status();
  ids_->Seen(t.job_id(), r.seen_directive_id());
  Job& job = **found;
  const int64_t now = clock_->MonotonicNanos();
  RankState& rs = job.ranks[t.global_rank()];
  rs.host = host;
  for (const v1::StepReport& s : r.steps()) {
    if (!s.has_lora()) continue;
    const v1::LoraStageTime& l = s.lora();
    job.reports++;
    rs.last_step = std::max(rs.last_step, s.step());
    job.layer_costs.assign(l.layer_costs().begin(), l.layer_costs().end());
    if (l.micro_batches() > 0) {
      // A trainer that does not say how many adapters: count micro-batches
      // as one adapter's.
      const uint32_t n = std::max<uint32_t>(l.adapters(), 1);
      job.mb_per_adapter = std::max<uint32_t>(l.micro_batches() / n, 1);
      job.n_adapters = std::max(job.n_adapters, n);
    }
    job.adapters.insert(l.adapter_ids().begin(), l.adapter_ids().end());
    if (l.samples() > 0 && l.micro_batches() > 0) {
      job.samples_per_mb = double(l.samples()) / l.micro_batches();
      auto& w = job.throughput[t.global_rank()];
      w.push_back({double(l.samples()), s.wall_ns() / 1e9});
      while (w.size() > options_.window_steps) w.pop_front();
    }
    if (!rs.known || rs.excluded != l.excluded() ||
        rs.layer_begin != l.layer_begin() || rs.layer_end != l.layer_end()) {
      rs.speeds.clear();  // another stage: older speeds are of other layers
      job.throughput.erase(t.global_rank());
    }
    rs.known = true;
    rs.excluded = l.excluded();
    rs.stage = l.stage();
    rs.layer_begin = l.layer_begin();
    rs.layer_end = l.layer_end();
    rs.pipeline = l.pipeline();
    rs.adapters.assign(l.adapter_ids().begin(), l.adapter_ids().end());
    rs.max_layers = l.max_layers();
    if (l.excluded()) {
      job.throughput.erase(t.global_rank());
      // The probe: one block timed on a fixed micro-batch.
      if (l.probe_units_per_s() > 0 && std::isfinite(l.probe_units_per_s())) {
        rs.speeds.push_back({l.probe_units_per_s(), now});
        while (rs.speeds.size() > options_.window_steps) rs.speeds.pop_front();
      }
      continue;
    }
    if (l.compute_ns() == 0) continue;
    double units = 0;
    for (uint32_t i = l.layer_begin(); i < l.layer_end(); ++i) {
      units += l.layer_costs(i);
    }
    rs.speeds.push_back(
        {units * l.micro_batches() / (l.compute_ns() / 1e9), now});
    while (rs.speeds.size() > options_.window_steps) rs.speeds.pop_front();
  }
  NoteReportedPlacement(t.job_id(), job);
  return absl::OkStatus();
}

absl::StatusOr<LoraPolicyEngine::Job*> LoraPolicyEngine::FindOrAddJob(
    const std::string& id, const char* field, const std::string& host) {
  std::string forgotten;
  absl::StatusOr<Job*> job = controller::FindOrAddJob(
      jobs_, id, options_.max_jobs, options_.job_idle_expiry,
      clock_->MonotonicNanos(), field, &forgotten, host,
      options_.max_jobs_per_host);
  if (!forgotten.empty()) {
    Logger("controller.lora")
        ->info("job {}: forgotten, idle past {} with the job table full",
               forgotten, absl::FormatDuration(options_.job_idle_expiry));
  }
  return job;
}

void LoraPolicyEngine::NoteReportedPlacement(const std::string& id, Job& job) {
  lora::Placement p;
  // pipeline -> (stage, stage), adapters
  std::map<uint32_t, std::vector<std::pair<uint32_t, lora::Stage>>> stages;
  std::map<uint32_t, std::vector<uint32_t>> adapters;
  for (const auto& [rank, rs] : job.ranks) {
    if (!rs.known) continue;
    if (rs.excluded) {
      p.excluded.push_back(rank);
    } else {
      stages[rs.pipeline].push_back(
          {rs.stage, {rank, rs.layer_begin, rs.layer_end}});
      adapters[rs.pipeline] = rs.adapters;
    }
  }
  for (auto& [q, st] : stages) {
    std::sort(st.begin(), st.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    lora::Pipeline pipe;
    for (const auto& [unused, s] : st) pipe.stages.push_back(s);
    // Complete only: contiguous from 0 to the last layer.
    uint32_t next = 0;
    for (const lora::Stage& s : pipe.stages) {
      if (s.layer_begin != next) return;
      next = s.layer_end;
    }
    if (next != job.layer_costs.size()) return;
    pipe.adapters = adapters[q];
    std::sort(pipe.adapters.begin(), pipe.adapters.end());
    p.pipelines.push_back(std::move(pipe));
  }
  if (p.pipelines.empty()) return;
  if (p.pipelines.size() == 1) p.pipelines[0].adapters.clear();  // all
  if (job.seen_any && Key(p) != Key(job.last_seen)) {
    job.moves_applied++;
    Logger("controller.lora")
        ->info("job {}: trainers now run placement {} (was {})", id,
               PlacementText(p), PlacementText(job.last_seen));
    job.pending.clear();  // applied (or superseded by the trainers)
    job.pending_sent = false;
    job.better_since_ns = 0;  // judge the new placement afresh
  }
  job.seen_any = true;
  job.last_seen = std::move(p);
}

void LoraPolicyEngine::Record(Job& job, v1::LoraDecision d) {
  job.decisions.push_back(std::move(d));
  while (job.decisions.size() > options_.max_decisions) {
    job.decisions.pop_front();
  }
}

std::vector<LoraPolicyEngine::Outgoing> LoraPolicyEngine::Evaluate(
    const std::vector<v1::Fault>& open_faults) {
  std::vector<Outgoing> out;
  const int64_t now = clock_->MonotonicNanos();
  for (auto& [id, job] : jobs_) EvaluateJob(id, job, open_faults, now, &out);
  return out;
}

struct LoraPolicyEngine::Evaluation {
  v1::LoraSettings s;
  std::map<int32_t, double> speeds;
  double median = 0;
  std::set<int32_t> slow;
  std::vector<uint32_t> adapters;
  absl::StatusOr<lora::Estimate> current;
  absl::StatusOr<lora::Placement> proposed;
  uint32_t moved = 0;
  double move_cost_s = 0;
  bool returning = false;  // an excluded rank recovered
};

void LoraPolicyEngine::EvaluateJob(const std::string& id, Job& job,
                                   const std::vector<v1::Fault>& open_faults,
                                   int64_t now, std::vector<Outgoing>* out) {
  Evaluation e;
  e.s = ResolveLoraSettings(
      job.has_settings ? job.settings : v1::LoraSettings(), options_.defaults);
  job.view.Clear();
  if (e.s.policy() == v1::LORA_POLICY_OFF || !job.seen_any) return;
  if (!MeasureSpeeds(job, now, &e)) return;
  FindSlowRanks(id, job, open_faults, &e);
  if (!Propose(id, job, &e)) return;
  FillView(job, &e);
  if (!Worth(e)) {
    job.better_since_ns = 0;
    return;
  }
  v1::JobLora& v = job.view;
  *v.mutable_proposed() = ToProto(*e.proposed);
  v.set_proposed_samples_per_s(e.proposed->estimate.samples_per_s);
  v.set_move_cost_s(e.move_cost_s);
  if (job.better_since_ns == 0) job.better_since_ns = now;
  if (now - job.better_since_ns <
      absl::ToInt64Nanoseconds(absl::Seconds(e.s.slow_persist_s()))) {
    return;
  }
  Decide(id, job, e, now, out);
}

bool LoraPolicyEngine::MeasureSpeeds(Job& job, int64_t now,
                                     Evaluation* e) const {
  // Speeds: median of the window; excluded ranks keep their last one.
  const int64_t max_age = absl::ToInt64Nanoseconds(options_.sample_max_age);
  for (auto& [rank, rs] : job.ranks) {
    while (!rs.speeds.empty() && now - rs.speeds.front().second > max_age) {
      rs.speeds.pop_front();
    }
    // An excluded rank's probes count from the first (they come every few
    // steps only).
    if (rs.speeds.size() >= (rs.excluded ? 1 : options_.min_window_steps)) {
      std::vector<double> w;
      for (const auto& [sp, unused] : rs.speeds) w.push_back(sp);
      rs.last_speed = Median(std::move(w));
      e->speeds[rank] = rs.last_speed;
    } else if (rs.excluded && rs.last_speed > 0) {
      e->speeds[rank] = rs.last_speed;
    }
  }
  for (const lora::Stage& st : job.last_seen.AllStages()) {
    if (!e->speeds.contains(st.rank)) return false;  // not every stage yet
  }
  std::vector<double> all;
  for (const auto& [r, sp] : e->speeds) all.push_back(sp);
  e->median = Median(all);
  return true;
}

void LoraPolicyEngine::FindSlowRanks(const std::string& id, Job& job,
                                     const std::vector<v1::Fault>& open_faults,
                                     Evaluation* e) {
  // With confirmed faults as the signal, a measured speed never makes a
  // rank slow (the speeds still place the layers).
  const bool confirmed_only =
      e->s.slow_signal() == v1::SLOW_SIGNAL_CONFIRMED_FAULTS;
  for (const auto& [r, sp] : e->speeds) {
    if (!confirmed_only && sp < (1 - e->s.slow_min_effect()) * e->median) {
      e->slow.insert(r);
    }
  }
  v1::JobLora& v = job.view;
  for (const v1::Fault& f : open_faults) {
    if (f.job_id() != id || f.fault_class() != v1::FAULT_CLASS_NON_COMM_SLOW ||
        (confirmed_only && f.confirmed_unix_ns() == 0 &&
         f.state() != v1::FAULT_STATE_CONFIRMED)) {
      continue;
    }
    v.add_slow_faults(f.fault_id());
    for (const v1::Suspect& su : f.suspects()) {
      if (su.global_rank() >= 0 && job.ranks.contains(su.global_rank())) {
        e->slow.insert(su.global_rank());
      }
    }
  }
}

bool LoraPolicyEngine::Propose(const std::string& id, const Job& job,
                               Evaluation* e) const {
  const lora::Placement& cur = job.last_seen;
  e->adapters.assign(job.adapters.begin(), job.adapters.end());
  if (e->adapters.empty()) {
    for (uint32_t a = 0; a < job.n_adapters; ++a) e->adapters.push_back(a);
  }
  const uint32_t n_adapters = std::max<uint32_t>(e->adapters.size(), 1);
  const uint32_t micro_batches =
      std::max<uint32_t>(job.mb_per_adapter, 1) * n_adapters;
  e->current =
      lora::EstimatePipelines(cur.pipelines, e->speeds, job.layer_costs,
                              micro_batches, job.samples_per_mb, n_adapters);
  lora::PlacementInput in;
  in.speeds = e->speeds;
  in.layer_costs = job.layer_costs;
  in.micro_batches = micro_batches;
  in.samples_per_micro_batch = job.samples_per_mb;
  in.adapters = e->adapters;
  in.max_pipelines = std::max<uint32_t>(e->s.max_pipelines(), 1);
  for (const auto& [r, rs] : job.ranks) {
    if (rs.max_layers > 0 && (in.max_layers_per_rank == 0 ||
                              rs.max_layers < in.max_layers_per_rank)) {
      in.max_layers_per_rank = rs.max_layers;
    }
  }
  e->proposed = lora::ComputePlacement(in);
  if (!e->current.ok() || !e->proposed.ok()) {
    Logger("controller.lora")
        ->warn("job {}: no placement: {}", id,
               (!e->current.ok() ? e->current.status() : e->proposed.status())
                   .ToString());
    return false;
  }
  e->moved = lora::MovedLayers(cur, *e->proposed, e->adapters) +
             (cur.excluded != e->proposed->excluded ? 1 : 0);
  e->move_cost_s = e->moved * e->s.move_s_per_layer();
  // An excluded rank whose probes show it recovered comes back.
  for (int32_t r : cur.excluded) {
    e->returning |=
        std::find(e->proposed->excluded.begin(), e->proposed->excluded.end(),
                  r) == e->proposed->excluded.end();
  }
  return true;
}

void LoraPolicyEngine::FillView(Job& job, Evaluation* e) const {
  v1::JobLora& v = job.view;
  v.set_current_samples_per_s(e->current->samples_per_s);
  *v.mutable_current() = ToProto(job.last_seen);
  v.mutable_current()->set_estimated_samples_per_s(e->current->samples_per_s);
  for (const auto& [rank, rs] : job.ranks) {
    v1::LoraRankSpeed* rsp = v.add_ranks();
    rsp->set_rank(rank);
    rsp->set_layer_begin(rs.layer_begin);
    rsp->set_layer_end(rs.layer_end);
    rsp->set_excluded(rs.excluded);
    rsp->set_slow(e->slow.contains(rank));
    if (e->speeds.contains(rank)) {
      rsp->set_units_per_s(e->speeds[rank]);
      rsp->set_relative(e->median > 0 ? e->speeds[rank] / e->median : 0);
    }
  }
  for (int32_t r : e->slow) v.add_slow_ranks(r);
  // Pipelines run side by side: their rates add up.
  double measured = 0;
  for (const auto& [r, w] : job.throughput) {
    double samples = 0, wall = 0;
    for (const auto& [n, secs] : w) samples += n, wall += secs;
    if (wall > 0) measured += samples / wall;
  }
  if (measured > 0) v.set_measured_samples_per_s(measured);
}

bool LoraPolicyEngine::Worth(const Evaluation& e) const {
  const double gain =
      e.proposed->estimate.samples_per_s - e.current->samples_per_s;
  return e.moved > 0 && (!e.slow.empty() || e.returning) &&
         gain >= e.s.min_gain() * e.current->samples_per_s &&
         gain * e.s.horizon_s() >
             e.move_cost_s * e.proposed->estimate.samples_per_s;
}

namespace {

// A decision's evidence: each rank's speed, the slow ranks and the ranks
// coming back, the faults, and the move.
void DecisionEvidence(const lora::Placement& cur, const lora::Placement& prop,
                      std::map<int32_t, double> speeds, double median,
                      const std::set<int32_t>& slow, uint32_t moved,
                      double move_cost_s, double current_samples_per_s,
                      const v1::JobLora& v, v1::Evidence* e) {
  // operator[]: a slow rank without a speed (a fault's suspect) shows as 0
  // in the values below too.
  auto relative = [&](int32_t r) {
    return median > 0 ? speeds[r] / median : 0.0;
  };
  std::vector<std::string> slow_txt;
  for (int32_t r : slow) {
    slow_txt.push_back(absl::StrFormat("rank %d at %.2fx", r, relative(r)));
  }
  for (const auto& [r, sp] : speeds) {
    (*e->mutable_values())[absl::StrCat("units_per_s/rank", r)] = sp;
  }
  (*e->mutable_values())["median_units_per_s"] = median;
  (*e->mutable_values())["moved_layers"] = moved;
  std::vector<std::string> back_txt;
  for (int32_t r : cur.excluded) {
    if (std::find(prop.excluded.begin(), prop.excluded.end(), r) ==
            prop.excluded.end() &&
        speeds.contains(r)) {
      back_txt.push_back(
          absl::StrFormat("rank %d probes at %.2fx", r, relative(r)));
    }
  }
  e->set_text(absl::StrFormat(
      "%s%s%s (median speed %.3g units/s)%s; %s -> %s: %.3f -> %.3f "
      "samples/s (est.), move %u layers ~%.2f s",
      slow_txt.empty() ? "" : "slow: " + absl::StrJoin(slow_txt, ", "),
      !slow_txt.empty() && !back_txt.empty() ? "; " : "",
      back_txt.empty() ? "" : "back: " + absl::StrJoin(back_txt, ", "), median,
      v.slow_faults_size()
          ? absl::StrCat(", faults ", absl::StrJoin(v.slow_faults(), ","))
          : "",
      PlacementText(cur), PlacementText(prop), current_samples_per_s,
      prop.estimate.samples_per_s, moved, move_cost_s));
}

}  // namespace

void LoraPolicyEngine::Decide(const std::string& id, Job& job,
                              const Evaluation& e, int64_t now,
                              std::vector<Outgoing>* out) {
  const v1::LoraSettings& s = e.s;
  v1::JobLora& v = job.view;
  const std::string key = Key(*e.proposed);
  const bool auto_mode = s.policy() == v1::LORA_POLICY_AUTO;
  const bool resend_due =
      now - job.last_sent_ns >= absl::ToInt64Nanoseconds(options_.resend);
  // One move at a time: while a sent placement is not applied, nothing new
  // goes out (speeds measured meanwhile are of the old placement) until it
  // is due again; ADVISE records each distinct proposal once.
  if (auto_mode && job.pending_sent && !resend_due) return;
  if (!auto_mode && job.pending == key) return;
  uint64_t last_step = 0;
  for (const auto& [r, rs] : job.ranks) {
    last_step = std::max(last_step, rs.last_step);
  }
  v1::LoraDecision d;
  d.set_time_unix_ns(absl::ToUnixNanos(clock_->Now()));
  d.set_policy(s.policy());
  *d.mutable_from() = v.current();
  *d.mutable_to() = v.proposed();
  d.set_current_samples_per_s(e.current->samples_per_s);
  d.set_estimated_samples_per_s(e.proposed->estimate.samples_per_s);
  d.set_move_cost_s(e.move_cost_s);
  for (const std::string& f : v.slow_faults()) d.add_fault_ids(f);
  DecisionEvidence(job.last_seen, *e.proposed, e.speeds, e.median, e.slow,
                   e.moved, e.move_cost_s, e.current->samples_per_s, v,
                   d.mutable_evidence());
  d.set_reason(d.evidence().text());
  job.pending = key;
  job.pending_sent = auto_mode;
  job.last_sent_ns = now;
  if (auto_mode) {
    const uint64_t did = ids_->Next(id);
    d.set_sent(true);
    d.set_directive_id(did);
    d.set_apply_at_step(last_step + s.apply_lead_steps());
    Outgoing o;
    o.job_id = id;
    for (const auto& [r, rs] : job.ranks) {
      if (std::find(o.hosts.begin(), o.hosts.end(), rs.host) == o.hosts.end())
        o.hosts.push_back(rs.host);
    }
    o.directive.set_directive_id(did);
    o.directive.set_job_id(id);
    o.directive.set_apply_at_step(d.apply_at_step());
    o.directive.set_reason(d.reason());
    *o.directive.mutable_placement() = d.to();
    out->push_back(std::move(o));
    Logger("controller.lora")
        ->info("job {}: directive {} (apply at step {}): {}", id, did,
               d.apply_at_step(), d.reason());
  } else {
    Logger("controller.lora")->info("job {}: advise: {}", id, d.reason());
  }
  Record(job, std::move(d));
}

absl::Status LoraPolicyEngine::CheckSettings(const std::string& job_id,
                                             const v1::LoraSettings& s) {
  if (job_id.empty() || job_id.size() > kMaxJobIdBytes) {
    return absl::InvalidArgumentError("job_id: required, at most 256 bytes");
  }
  return ValidateLoraSettings(s);
}

absl::StatusOr<v1::LoraSettings> LoraPolicyEngine::SetSettings(
    const std::string& job_id, const v1::LoraSettings& s) {
  if (absl::Status st = CheckSettings(job_id, s); !st.ok()) return st;
  absl::StatusOr<Job*> job = FindOrAddJob(job_id, "job_id");
  if (!job.ok()) return job.status();
  (*job)->has_settings = true;
  (*job)->settings = s;
  return ResolveLoraSettings(s, options_.defaults);
}

v1::LoraSettings LoraPolicyEngine::Settings(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || !it->second.has_settings) return options_.defaults;
  return ResolveLoraSettings(it->second.settings, options_.defaults);
}

absl::StatusOr<v1::JobLora> LoraPolicyEngine::State(
    const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || !it->second.seen_any) {
    return absl::NotFoundError(
        absl::StrCat("job ", job_id, ": no multi-LoRA trainer reports (yet)"));
  }
  const Job& job = it->second;
  v1::JobLora v = job.view;
  *v.mutable_settings() = Settings(job_id);
  v.set_trainers(job.ranks.size());
  uint64_t last = 0;
  for (const auto& [r, rs] : job.ranks) last = std::max(last, rs.last_step);
  v.set_last_step(last);
  if (!v.has_current()) *v.mutable_current() = ToProto(job.last_seen);
  for (const v1::LoraDecision& d : job.decisions) *v.add_decisions() = d;
  v.set_moves_applied(job.moves_applied);
  v.set_reports(job.reports);
  return v;
}

std::map<std::string, std::set<std::string>> LoraPolicyEngine::JobHosts()
    const {
  std::map<std::string, std::set<std::string>> out;
  for (const auto& [id, job] : jobs_) {
    if (!job.seen_any) continue;
    for (const auto& [r, rs] : job.ranks) out[id].insert(rs.host);
  }
  return out;
}

}  // namespace pitstop::controller
