// pitstopctl job JOB (details with the sync policy and its decisions) and
// sync-policy JOB off|advise|auto [...] (the local-SGD switch).
#include <CLI/CLI.hpp>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/pitstopctl/commands.h"
#include "tools/pitstopctl/ctl_client.h"
#include "tools/pitstopctl/ctl_format.h"

namespace pitstop::ctl {

std::string SyncModeShort(v1::SyncMode m) {
  return m == v1::SYNC_MODE_UNSPECIFIED
             ? "-"
             : ShortEnum(v1::SyncMode_Name(m), "SYNC_MODE_");
}

v1::SlowSignal ParseSlowSignalFlag(const std::string& v) {
  if (v == "steps-or-faults") return v1::SLOW_SIGNAL_STEPS_OR_FAULTS;
  if (v == "confirmed-faults") return v1::SLOW_SIGNAL_CONFIRMED_FAULTS;
  return v1::SLOW_SIGNAL_UNSPECIFIED;
}

std::string SlowSignalText(v1::SlowSignal s) {
  switch (s) {
    case v1::SLOW_SIGNAL_STEPS_OR_FAULTS:
      return "steps-or-faults";
    case v1::SLOW_SIGNAL_CONFIRMED_FAULTS:
      return "confirmed-faults";
    default:
      return "-";
  }
}

std::string SyncSummary(const v1::Job& j) {
  const v1::JobSync& s = j.sync();
  std::string out =
      ShortEnum(v1::SyncPolicy_Name(s.settings().policy()), "SYNC_POLICY_");
  if (s.trainers() == 0) return out;
  absl::StrAppend(&out, " ", SyncModeShort(s.reported_mode()));
  if (s.target_mode() != s.reported_mode() &&
      s.target_mode() != v1::SYNC_MODE_UNSPECIFIED) {
    absl::StrAppend(&out, "->", SyncModeShort(s.target_mode()));
  }
  return out;
}

namespace {

// "8 steps / 2000 ms" (EDiT steps / A-EDiT ms), or the A-EDiT period in
// local steps when the controller converts it.
std::string PeriodText(const v1::SyncSettings& s) {
  if (s.timed_period_steps() > 0) {
    return absl::StrCat(s.period_steps(), " steps / ", s.timed_period_steps(),
                        " local steps (timed)");
  }
  return absl::StrCat(s.period_steps(), " steps / ", s.period_ms(), " ms");
}

void PrintJob(const v1::Job& j) {
  const v1::JobSync& s = j.sync();
  const v1::SyncSettings& st = s.settings();
  std::cout << "job " << j.job_id() << "\n"
            << "  ranks " << j.n_ranks() << ", hosts "
            << absl::StrJoin(j.hosts(), ",") << ", comms "
            << j.comm_hashes_size() << ", open faults " << j.open_faults()
            << "\n"
            << "  sync policy "
            << ShortEnum(v1::SyncPolicy_Name(st.policy()), "SYNC_POLICY_")
            << " (slow_persist_s " << st.slow_persist_s() << ", healthy_s "
            << st.healthy_s() << ", local mode "
            << SyncModeShort(st.local_mode()) << ", period " << PeriodText(st)
            << ", slow signal " << SlowSignalText(st.slow_signal()) << ")\n";
  if (s.trainers() == 0) {
    std::cout << "  no trainer reports steps (python/pitstop)\n";
    return;
  }
  std::cout << "  trainers " << s.trainers() << ", step " << s.last_step()
            << ", step reports " << s.reports() << ", running "
            << SyncModeShort(s.reported_mode()) << ", policy wants "
            << SyncModeShort(s.target_mode()) << ", switches applied "
            << s.switches_applied() << "\n"
            << "  median compute "
            << absl::StrFormat("%.1f", s.step_ms_median())
            << " ms/step; step-time stragglers: "
            << (s.step_stragglers().empty()
                    ? "none"
                    : absl::StrJoin(s.step_stragglers(), ","))
            << "; open slow faults: "
            << (s.slow_faults().empty() ? "none"
                                        : absl::StrJoin(s.slow_faults(), ","))
            << "\n";
  if (s.slow_since_unix_ns()) {
    std::cout << "  slow since " << Age(s.slow_since_unix_ns()) << "\n";
  }
  if (s.healthy_since_unix_ns()) {
    std::cout << "  healthy since " << Age(s.healthy_since_unix_ns()) << "\n";
  }
  if (s.decisions().empty()) {
    std::cout << "  decisions: none\n";
    return;
  }
  std::cout << "  decisions (oldest first):\n";
  for (const v1::SyncDecision& d : s.decisions()) {
    std::cout << "    " << Age(d.time_unix_ns()) << " "
              << SyncModeShort(d.from_mode()) << " -> "
              << SyncModeShort(d.to_mode()) << " "
              << (d.sent()
                      ? absl::StrCat("sent as directive ", d.directive_id(),
                                     " (apply at step ", d.apply_at_step(), ")")
                      : std::string("advised only"))
              << ": " << d.reason();
    if (!d.fault_ids().empty()) {
      std::cout << "\n      faults: " << absl::StrJoin(d.fault_ids(), ",");
    }
    std::cout << "\n      evidence: " << d.evidence().text();
    for (const auto& [k, v] : d.evidence().values()) {
      std::cout << " " << k << "=" << absl::StrFormat("%.4g", v);
    }
    std::cout << "\n";
  }
}

}  // namespace

void AddSyncCommands(CLI::App* app, GlobalOptions* g, int* rc) {
  static std::string job;
  CLI::App* show = app->add_subcommand(
      "job", "one job: ranks, faults, sync policy, state and decisions");
  show->add_option("JOB", job, "job id")->required();
  show->callback([g, rc] {
    v1::GetJobRequest req;
    req.set_job_id(job);
    v1::GetJobResponse r;
    if ((*rc = Call(*g, &v1::Controller::Stub::GetJob, req, &r))) return;
    if (g->output == "json") {
      std::cout << ToJson(r) << "\n";
      return;
    }
    PrintJob(r.job());
    if (r.job().has_lora()) PrintLora(r.job().lora());
  });

  static std::string policy, local_mode, slow_signal;
  static uint32_t slow_s = 0, healthy_s = 0, period_ms = 0, period_steps = 0,
                  lead = 0, timed_steps = 0;
  CLI::App* set = app->add_subcommand(
      "sync-policy",
      "set a job's local-SGD switch policy: off, advise (default: record and "
      "publish what it would do) or auto (switch the trainers); options not "
      "given take the controller's defaults");
  set->add_option("JOB", job, "job id")->required();
  set->add_option("POLICY", policy, "off | advise | auto")
      ->required()
      ->check(CLI::IsMember({"off", "advise", "auto"}));
  set->add_option("--slow-persist-s", slow_s,
                  "slow this long before switching to local SGD");
  set->add_option("--healthy-s", healthy_s,
                  "healthy this long before switching back");
  set->add_option("--local-mode", local_mode, "timed (A-EDiT) | local_sgd")
      ->check(CLI::IsMember({"timed", "local_sgd"}));
  set->add_option("--period-ms", period_ms, "A-EDiT sync period (ms)");
  set->add_option("--period-steps", period_steps, "EDiT local steps");
  set->add_option("--timed-period-steps", timed_steps,
                  "A-EDiT period in local steps of a fast rank, converted to "
                  "ms with the job's measured step time (instead of "
                  "--period-ms)");
  set->add_option("--apply-lead-steps", lead,
                  "apply at the last reported step + this");
  set->add_option("--slow-signal", slow_signal,
                  "what makes the job slow: steps-or-faults (step-time "
                  "stragglers or open slow faults) or confirmed-faults "
                  "(only slow faults confirmed from NCCL telemetry)")
      ->check(CLI::IsMember({"steps-or-faults", "confirmed-faults"}));
  set->callback([g, rc] {
    v1::SetSyncPolicyRequest req;
    req.set_job_id(job);
    v1::SyncSettings* s = req.mutable_settings();
    s->set_policy(policy == "off"      ? v1::SYNC_POLICY_OFF
                  : policy == "advise" ? v1::SYNC_POLICY_ADVISE
                                       : v1::SYNC_POLICY_AUTO);
    if (local_mode == "timed") s->set_local_mode(v1::SYNC_MODE_TIMED);
    if (local_mode == "local_sgd") s->set_local_mode(v1::SYNC_MODE_LOCAL_SGD);
    s->set_slow_persist_s(slow_s);
    s->set_healthy_s(healthy_s);
    s->set_period_ms(period_ms);
    s->set_period_steps(period_steps);
    s->set_apply_lead_steps(lead);
    s->set_timed_period_steps(timed_steps);
    s->set_slow_signal(ParseSlowSignalFlag(slow_signal));
    v1::SetSyncPolicyResponse r;
    if ((*rc = Call(*g, &v1::Controller::Stub::SetSyncPolicy, req, &r))) {
      return;
    }
    if (g->output == "json") {
      std::cout << ToJson(r) << "\n";
      return;
    }
    const v1::SyncSettings& o = r.settings();
    std::cout << "job " << job << ": sync policy "
              << ShortEnum(v1::SyncPolicy_Name(o.policy()), "SYNC_POLICY_")
              << ", slow_persist_s " << o.slow_persist_s() << ", healthy_s "
              << o.healthy_s() << ", local mode "
              << SyncModeShort(o.local_mode()) << ", period " << PeriodText(o)
              << ", slow signal " << SlowSignalText(o.slow_signal()) << "\n";
  });
}

}  // namespace pitstop::ctl
