// Per-job multi-LoRA rescheduling policy (mLoRA pipelines).
//
// Inputs: step reports of multi-LoRA trainers (StepReport.lora: each
// rank's stage, layer range and stage compute time; python/pitstop through
// the agents) and the controller's open faults. Per job and cycle:
//
//  * speed per rank: median over its last `window_steps` steps of
//    cost units (sum of its layers' costs x micro-batches) / stage compute
//    seconds; an excluded rank: the median of its probes (the trainer
//    times one block on a fixed micro-batch every few steps), else the
//    speed it last had;
//  * slow ranks: speed < (1 - slow_min_effect) x the median rank's, or
//    named by an open NON_COMM_SLOW fault of the job; with
//    settings.slow_signal CONFIRMED_FAULTS only named by such a fault the
//    detection engine confirmed (decisions list them: fault_ids);
//  * the placement for these speeds (placement.h) and its estimated
//    throughput against the current placement's; moving is worth it when
//    the gain over horizon_s beats the samples lost while moving
//    (moved layers x move_s_per_layer) and the gain is >= min_gain, and
//    a rank is slow or an excluded rank comes back (its probes show it
//    recovered). Several pipelines (adapters split) when the job's
//    settings allow max_pipelines > 1 and the ranks' memory (reported
//    max_layers) holds the model;
//  * once that held for slow_persist_s: OFF nothing; ADVISE (default) the
//    decision is recorded and published (JobLora.proposed, decisions);
//    AUTO it becomes a TrainerDirective with the placement, applied by the
//    trainers at apply_at_step = last reported step + apply_lead_steps; a
//    directive not applied within `resend` goes out again with a new id.
//    Directive ids are the job's sequence shared with the sync policy
//    (directives/directive_ids.h).
//
// Not thread-safe: TrainerPolicyService calls it under its mu_. Times come from
// the injected Clock (FakeClock in tests).
#ifndef PITSTOP_CONTROLLER_TRAINERS_LORA_LORA_POLICY_H_
#define PITSTOP_CONTROLLER_TRAINERS_LORA_LORA_POLICY_H_

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pitstop/clock.h"
#include "pitstop/v1/controller.pb.h"
#include "pitstop/v1/trainer.pb.h"
#include "src/controller/trainers/directive_ids.h"
#include "src/controller/trainers/lora/placement.h"
#include "src/controller/trainers/trainer_policy.h"

namespace pitstop::controller {

v1::LoraSettings DefaultLoraSettings();
// InvalidArgument naming the field ("settings.min_gain: ...").
absl::Status ValidateLoraSettings(const v1::LoraSettings& s);
v1::LoraSettings ResolveLoraSettings(const v1::LoraSettings& s,
                                     const v1::LoraSettings& defaults);

class LoraPolicyEngine {
 public:
  struct Options {
    v1::LoraSettings defaults = DefaultLoraSettings();
    uint32_t window_steps = 10;     // steps per rank in the window
    uint32_t min_window_steps = 3;  // fewer: rank not measured
    absl::Duration sample_max_age = absl::Seconds(30);
    absl::Duration resend = absl::Seconds(60);
    size_t max_decisions = 64;
    size_t max_jobs = 4096;
    // Jobs the reports of one host may create (its share of max_jobs; 0:
    // none kept), as SyncPolicyEngine::Options::max_jobs_per_host.
    size_t max_jobs_per_host = 256;
    // With the table full, a new job replaces the one idle longest (no
    // report, no settings change) if that one has been idle this long: a
    // long-running controller sees many short fine-tuning jobs come and go.
    absl::Duration job_idle_expiry = absl::Hours(1);
    // The job's directive ids, shared with the sync policy (not owned;
    // null: the engine keeps its own).
    DirectiveIds* directive_ids = nullptr;
  };

  using Outgoing = OutgoingDirective;

  LoraPolicyEngine(Clock* clock, Options options);

  // One trainer report from the agent of `host`; steps without `lora` are
  // ignored. InvalidArgument names the field.
  absl::Status AddReport(const std::string& host,
                         const v1::ReportStepsRequest& report);
  std::vector<Outgoing> Evaluate(const std::vector<v1::Fault>& open_faults);

  // What SetSettings checks before it changes anything: the job id and
  // ValidateLoraSettings (InvalidArgument naming the field).
  static absl::Status CheckSettings(const std::string& job_id,
                                    const v1::LoraSettings& s);
  absl::StatusOr<v1::LoraSettings> SetSettings(const std::string& job_id,
                                               const v1::LoraSettings& s);
  v1::LoraSettings Settings(const std::string& job_id) const;
  // NotFound for a job that is not a multi-LoRA job.
  absl::StatusOr<v1::JobLora> State(const std::string& job_id) const;
  std::map<std::string, std::set<std::string>> JobHosts() const;
  bool empty() const { return jobs_.empty(); }

 private:
  struct RankState {
    std::string host;
    // units/s, received ns: of its stage, or of its probes while excluded.
    std::deque<std::pair<double, int64_t>> speeds;
    uint32_t stage = 0, layer_begin = 0, layer_end = 0;
    uint32_t pipeline = 0;
    std::vector<uint32_t> adapters;  // of its pipeline (empty: all)
    uint32_t max_layers = 0;         // 0 = no limit
    bool excluded = false;
    bool known = false;
    double last_speed = 0;  // kept while excluded
    uint64_t last_step = 0;
  };
  struct Job {
    std::string first_host;  // whose report created it ("": settings)
    bool has_settings = false;
    v1::LoraSettings settings;
    std::map<int32_t, RankState> ranks;
    std::vector<double> layer_costs;
    uint32_t mb_per_adapter = 0;  // micro-batches per adapter per step
    uint32_t n_adapters = 0;      // reported without adapter ids
    std::set<uint32_t> adapters;  // ids of every reported pipeline
    double samples_per_mb = 1;
    // Per last-stage rank (one per pipeline): samples, wall s.
    std::map<int32_t, std::deque<std::pair<double, double>>> throughput;
    lora::Placement last_seen;
    bool seen_any = false;
    int64_t better_since_ns = 0;
    v1::JobLora view;  // computed parts, refreshed by Evaluate
    std::deque<v1::LoraDecision> decisions;
    int64_t last_sent_ns = 0;
    int64_t last_active_ns = 0;  // last report or settings change
    // AUTO: the placement sent, until the trainers report another one;
    // ADVISE: the last placement advised.
    std::string pending;
    // Whether `pending` went out as a directive: an advice recorded before
    // the operator switched to AUTO must not hold the first directive back
    // until the resend interval.
    bool pending_sent = false;
    uint64_t moves_applied = 0;
    uint64_t reports = 0;
  };

  void NoteReportedPlacement(const std::string& id, Job& job);
  // Finds or adds `id`; with the table full, drops the job idle longest if
  // it is past job_idle_expiry, else ResourceExhausted naming `field`.
  // `host`: the reporting agent's ("" for settings), charged with a new job.
  absl::StatusOr<Job*> FindOrAddJob(const std::string& id, const char* field,
                                    const std::string& host = "");
  void EvaluateJob(const std::string& id, Job& job,
                   const std::vector<v1::Fault>& open_faults, int64_t now,
                   std::vector<Outgoing>* out);
  // EvaluateJob's steps, in order (lora_policy.cc).
  struct Evaluation;
  // Each rank's speed (the median of its window; an excluded rank keeps
  // its last); false when a stage of the job's placement is not measured.
  bool MeasureSpeeds(Job& job, int64_t now, Evaluation* e) const;
  // Ranks slower than the median by slow_min_effect, and the suspects of
  // the job's open NON_COMM_SLOW faults (named in the view).
  void FindSlowRanks(const std::string& id, Job& job,
                     const std::vector<v1::Fault>& open_faults, Evaluation* e);
  // The current placement's estimate and the proposed placement; false
  // (logged) when either cannot be computed.
  bool Propose(const std::string& id, const Job& job, Evaluation* e) const;
  // The view (JobLora) with its evidence, whatever is decided.
  void FillView(Job& job, Evaluation* e) const;
  // Whether moving is worth it: layers move, a rank is slow or comes back,
  // the gain is large enough and pays the move back within horizon_s.
  bool Worth(const Evaluation& e) const;
  // Records the decision; in AUTO sends the placement to the job's agents.
  void Decide(const std::string& id, Job& job, const Evaluation& e, int64_t now,
              std::vector<Outgoing>* out);
  void Record(Job& job, v1::LoraDecision d);

  Clock* const clock_;
  const Options options_;
  DirectiveIds own_ids_;  // used when options_.directive_ids is null
  DirectiveIds* const ids_;
  std::map<std::string, Job> jobs_;
};

// Conversions between placement.h and the protos.
v1::LoraPlacement ToProto(const lora::Placement& p);
std::string PlacementText(const lora::Placement& p);

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_TRAINERS_LORA_LORA_POLICY_H_
