// pitstopctl lora JOB (the multi-LoRA placement, speeds, estimate and
// decisions) and lora-policy JOB off|advise|auto [...] (rescheduling).
#include <CLI/CLI.hpp>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/pitstopctl/commands.h"
#include "tools/pitstopctl/ctl_client.h"
#include "tools/pitstopctl/ctl_format.h"

namespace pitstop::ctl {
namespace {

std::string PlacementLine(const v1::LoraPlacement& p) {
  std::vector<std::string> pipes;
  for (const v1::LoraPipeline& pipe : p.pipelines()) {
    std::vector<std::string> parts;
    for (const v1::LoraStage& s : pipe.stages()) {
      parts.push_back(absl::StrFormat("rank %d: layers [%u,%u)", s.rank(),
                                      s.layer_begin(), s.layer_end()));
    }
    std::string one = absl::StrJoin(parts, ", ");
    if (p.pipelines_size() > 1) {  // several: name each one's adapters
      absl::StrAppend(&one, " (adapters ", absl::StrJoin(pipe.adapters(), ","),
                      ")");
    }
    pipes.push_back(std::move(one));
  }
  std::string out = absl::StrJoin(pipes, " | ");
  if (!p.excluded_ranks().empty()) {
    absl::StrAppend(&out, "; excluded ",
                    absl::StrJoin(p.excluded_ranks(), ","));
  }
  return out.empty() ? "-" : out;
}

std::string PolicyName(v1::LoraPolicy p) {
  return ShortEnum(v1::LoraPolicy_Name(p), "LORA_POLICY_");
}

}  // namespace

void PrintLora(const v1::JobLora& l) {
  const v1::LoraSettings& s = l.settings();
  std::cout << "  lora policy " << PolicyName(s.policy()) << " (slow below "
            << absl::StrFormat("%.0f%%", 100 * (1 - s.slow_min_effect()))
            << " of median speed for " << s.slow_persist_s() << " s, horizon "
            << s.horizon_s() << " s, move " << s.move_s_per_layer()
            << " s/layer, min gain "
            << absl::StrFormat("%.0f%%", 100 * s.min_gain()) << ", slow signal "
            << SlowSignalText(s.slow_signal()) << ")\n"
            << "  lora trainers " << l.trainers() << ", step " << l.last_step()
            << ", reports " << l.reports() << ", moves applied "
            << l.moves_applied() << ", measured "
            << absl::StrFormat("%.2f", l.measured_samples_per_s())
            << " samples/s\n"
            << "  placement " << PlacementLine(l.current()) << "  (est. "
            << absl::StrFormat("%.2f", l.current_samples_per_s())
            << " samples/s)\n";
  for (const v1::LoraRankSpeed& r : l.ranks()) {
    std::cout << absl::StrFormat(
        "    rank %d  layers [%u,%u)  %.4g units/s  %.2fx%s%s\n", r.rank(),
        r.layer_begin(), r.layer_end(), r.units_per_s(), r.relative(),
        r.slow() ? "  SLOW" : "", r.excluded() ? "  excluded" : "");
  }
  if (!l.slow_faults().empty()) {
    std::cout << "  open NON_COMM_SLOW faults: "
              << absl::StrJoin(l.slow_faults(), ",") << "\n";
  }
  if (l.has_proposed()) {
    std::cout << "  proposed " << PlacementLine(l.proposed()) << "  (est. "
              << absl::StrFormat("%.2f", l.proposed_samples_per_s())
              << " samples/s, move ~"
              << absl::StrFormat("%.2f", l.move_cost_s()) << " s)\n";
  }
  if (l.decisions().empty()) {
    std::cout << "  lora decisions: none\n";
    return;
  }
  std::cout << "  lora decisions (oldest first):\n";
  for (const v1::LoraDecision& d : l.decisions()) {
    std::cout << "    " << Age(d.time_unix_ns()) << " "
              << (d.sent()
                      ? absl::StrCat("sent as directive ", d.directive_id(),
                                     " (apply at step ", d.apply_at_step(), ")")
                      : std::string("advised only"))
              << ": " << PlacementLine(d.to());
    if (!d.fault_ids().empty()) {
      std::cout << "\n      faults: " << absl::StrJoin(d.fault_ids(), ",");
    }
    std::cout << "\n      evidence: " << d.evidence().text() << "\n";
  }
}

void AddLoraCommands(CLI::App* app, GlobalOptions* g, int* rc) {
  static std::string job;
  CLI::App* show = app->add_subcommand(
      "lora",
      "one multi-LoRA job: placement, per-rank speed, estimate and decisions");
  show->add_option("JOB", job, "job id")->required();
  show->callback([g, rc] {
    v1::GetJobLoraRequest req;
    req.set_job_id(job);
    v1::GetJobLoraResponse r;
    if ((*rc = Call(*g, &v1::Controller::Stub::GetJobLora, req, &r))) return;
    if (g->output == "json") {
      std::cout << ToJson(r) << "\n";
      return;
    }
    std::cout << "job " << job << "\n";
    PrintLora(r.lora());
  });

  // The API reads 0 as "the controller's default": refuse it here rather
  // than silently setting the default.
  static const CLI::Validator kAboveZero(
      [](std::string& v) -> std::string {
        double x = 0;
        if (!absl::SimpleAtod(v, &x) || !(x > 0)) {
          return "must be > 0 (0 would mean the controller's default: leave "
                 "the option out for that)";
        }
        return "";
      },
      "> 0");
  static std::string policy, slow_signal;
  static uint32_t slow_s = 0, horizon_s = 0, lead = 0, max_pipelines = 0;
  static double effect = 0, move_s = 0, min_gain = 0;
  CLI::App* set = app->add_subcommand(
      "lora-policy",
      "set a job's multi-LoRA rescheduling policy: off, advise (default: "
      "record and publish the placement it would move to) or auto (move "
      "when the gain beats the cost); options not given take the "
      "controller's defaults (the API reads 0 as \"default\", so values "
      "must be > 0)");
  set->add_option("JOB", job, "job id")->required();
  set->add_option("POLICY", policy, "off | advise | auto")
      ->required()
      ->check(CLI::IsMember({"off", "advise", "auto"}));
  set->add_option("--slow-min-effect", effect,
                  "slow below (1 - this) x the median rank's speed")
      ->check(CLI::Range(0.001, 0.99));
  set->add_option("--slow-persist-s", slow_s,
                  "a better placement must hold this long before acting")
      ->check(kAboveZero);
  set->add_option("--horizon-s", horizon_s,
                  "gain counted over this long against the move's cost")
      ->check(kAboveZero);
  set->add_option("--move-s-per-layer", move_s,
                  "pipeline pause per moved layer (s)")
      ->check(kAboveZero);
  set->add_option("--min-gain", min_gain,
                  "minimum relative throughput gain (0.1 = 10%; for \"any "
                  "gain\" give a tiny value such as 1e-6)")
      ->check(kAboveZero);
  set->add_option("--apply-lead-steps", lead,
                  "apply at the last reported step + this")
      ->check(kAboveZero);
  set->add_option("--max-pipelines", max_pipelines,
                  "most pipelines (data-parallel replicas, adapters split "
                  "between them) a placement may have (default 1)")
      ->check(CLI::Range(1, 64));
  set->add_option("--slow-signal", slow_signal,
                  "what makes a stage slow: steps-or-faults (measured speed "
                  "or an open NON_COMM_SLOW fault) or confirmed-faults (only "
                  "a NON_COMM_SLOW fault confirmed from NCCL telemetry)")
      ->check(CLI::IsMember({"steps-or-faults", "confirmed-faults"}));
  set->callback([g, rc] {
    v1::SetLoraPolicyRequest req;
    req.set_job_id(job);
    v1::LoraSettings* s = req.mutable_settings();
    s->set_policy(policy == "off"      ? v1::LORA_POLICY_OFF
                  : policy == "advise" ? v1::LORA_POLICY_ADVISE
                                       : v1::LORA_POLICY_AUTO);
    s->set_slow_min_effect(effect);
    s->set_slow_persist_s(slow_s);
    s->set_horizon_s(horizon_s);
    s->set_move_s_per_layer(move_s);
    s->set_min_gain(min_gain);
    s->set_apply_lead_steps(lead);
    s->set_max_pipelines(max_pipelines);
    s->set_slow_signal(ParseSlowSignalFlag(slow_signal));
    v1::SetLoraPolicyResponse r;
    if ((*rc = Call(*g, &v1::Controller::Stub::SetLoraPolicy, req, &r))) {
      return;
    }
    if (g->output == "json") {
      std::cout << ToJson(r) << "\n";
      return;
    }
    const v1::LoraSettings& o = r.settings();
    std::cout << "job " << job << ": lora policy " << PolicyName(o.policy())
              << ", slow_persist_s " << o.slow_persist_s() << ", horizon_s "
              << o.horizon_s() << ", move_s_per_layer " << o.move_s_per_layer()
              << ", min_gain " << o.min_gain() << ", slow_min_effect "
              << o.slow_min_effect() << ", apply_lead_steps "
              << o.apply_lead_steps() << ", max_pipelines " << o.max_pipelines()
              << ", slow signal " << SlowSignalText(o.slow_signal()) << "\n";
  });
}

}  // namespace pitstop::ctl
