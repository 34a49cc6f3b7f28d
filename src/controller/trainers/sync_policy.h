// Per-job synchronisation policy (EDiT / A-EDiT local SGD switch).
//
// Inputs: step reports of the jobs' trainers (python/pitstop, through the
// agents) and the controller's open faults. Per job and cycle:
//
//  * step-time stragglers: per rank, the median compute time of its last
//    `window_steps` steps (wall - communication; steps with a checkpoint or
//    evaluation phase are left out: context, never a fault); a rank whose
//    median is >= (1 + straggler_min_effect) x the median of the other
//    ranks' medians is slow. This finds stragglers in jobs whose collectives
//    the NCCL plugin cannot see (CPU, gloo).
//  * slow condition = step-time stragglers or open NON_COMM_SLOW /
//    COMM_SLOW faults of the job; with settings.slow_signal
//    CONFIRMED_FAULTS only such faults the detection engine confirmed from
//    the job's NCCL telemetry (the decision names them: fault_ids).
//  * SYNC -> local (settings.local_mode) once the slow condition held for
//    slow_persist_s; local -> SYNC once the job was healthy (no slow fault
//    and no step-time straggler, whatever the signal) for healthy_s.
//
// OFF: nothing computed. ADVISE (default): the decision is recorded and
// published (JobSync.target_mode, decisions), nothing is sent. AUTO: the
// decision becomes a TrainerDirective for every host of the job, applied by
// the trainers at apply_at_step = last reported step + apply_lead_steps. A
// directive the trainers do not report applying within resend_s is issued
// again with a new id. Every decision keeps its evidence.
//
// Not thread-safe: TrainerPolicyService calls it under its mu_. Times come from
// the injected Clock (FakeClock in tests).
#ifndef PITSTOP_CONTROLLER_TRAINERS_SYNC_POLICY_H_
#define PITSTOP_CONTROLLER_TRAINERS_SYNC_POLICY_H_

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pitstop/clock.h"
#include "pitstop/v1/controller.pb.h"
#include "pitstop/v1/trainer.pb.h"
#include "src/controller/trainers/directive_ids.h"
#include "src/controller/trainers/trainer_policy.h"

namespace pitstop::controller {

// Defaults filled into SyncSettings where a field is 0.
v1::SyncSettings DefaultSyncSettings();
// InvalidArgument naming the field ("settings.local_mode: ...").
absl::Status ValidateSyncSettings(const v1::SyncSettings& s);
// `s` with zero fields taken from `defaults`.
v1::SyncSettings ResolveSyncSettings(const v1::SyncSettings& s,
                                     const v1::SyncSettings& defaults);

class SyncPolicyEngine {
 public:
  struct Options {
    v1::SyncSettings defaults = DefaultSyncSettings();
    uint32_t window_steps = 20;         // steps per rank in the window
    uint32_t min_window_steps = 5;      // fewer: rank not judged
    double straggler_min_effect = 0.3;  // 30% slower than the others
    absl::Duration sample_max_age = absl::Seconds(30);
    absl::Duration resend = absl::Seconds(60);
    size_t max_decisions = 64;
    size_t max_jobs = 4096;
    // Jobs the reports of one host may create (its share of max_jobs; 0:
    // none kept): one host's made-up jobs cannot fill the table (R18-8).
    size_t max_jobs_per_host = 256;
    // With the table full, a new job replaces the one idle longest once it
    // has been idle this long (no report, no settings change).
    absl::Duration job_idle_expiry = absl::Hours(1);
    size_t max_ranks_per_job = 65536;
    // The job's directive ids, shared with the LoRA policy (not owned;
    // null: the engine keeps its own).
    DirectiveIds* directive_ids = nullptr;
  };

  using Outgoing = OutgoingDirective;

  SyncPolicyEngine(Clock* clock, Options options);

  // One trainer report forwarded by the agent of `host`. InvalidArgument
  // names the field; a new job beyond max_jobs is ResourceExhausted.
  absl::Status AddReport(const std::string& host,
                         const v1::ReportStepsRequest& report);
  // One policy cycle; `open_faults` are the controller's open faults.
  std::vector<Outgoing> Evaluate(const std::vector<v1::Fault>& open_faults);

  // What SetSettings checks before it changes anything: the job id and
  // ValidateSyncSettings (InvalidArgument naming the field).
  static absl::Status CheckSettings(const std::string& job_id,
                                    const v1::SyncSettings& s);
  // Settings (zero fields = default); the result is resolved.
  absl::StatusOr<v1::SyncSettings> SetSettings(const std::string& job_id,
                                               const v1::SyncSettings& s);
  v1::SyncSettings Settings(const std::string& job_id) const;
  // NotFound for a job with neither trainers nor settings.
  absl::StatusOr<v1::JobSync> State(const std::string& job_id) const;
  // Jobs with reporting trainers: job -> (world size, hosts).
  struct JobInfo {
    uint32_t world_size = 0;
    std::set<std::string> hosts;
  };
  std::map<std::string, JobInfo> Jobs() const;
  bool empty() const { return jobs_.empty(); }

 private:
  struct Sample {
    uint64_t compute_ns = 0;
    int64_t received_ns = 0;
  };
  struct RankState {
    std::string host;
    std::deque<Sample> window;
    uint64_t last_step = 0;
    v1::SyncMode mode = v1::SYNC_MODE_UNSPECIFIED;
    uint64_t seen_directive = 0;
  };
  struct Job {
    int64_t last_active_ns = 0;  // last report or settings change
    std::string first_host;      // whose report created it ("": settings)
    bool has_settings = false;
    v1::SyncSettings settings;  // as set (zero = default)
    std::map<int32_t, RankState> ranks;
    uint32_t world_size = 0;
    v1::SyncMode reported = v1::SYNC_MODE_UNSPECIFIED;
    v1::SyncMode target = v1::SYNC_MODE_UNSPECIFIED;
    int64_t slow_since_ns = 0;
    int64_t healthy_since_ns = 0;
    std::vector<int32_t> stragglers;
    std::vector<std::string> slow_faults;
    // settings.slow_signal is SLOW_SIGNAL_CONFIRMED_FAULTS (this cycle).
    bool faults_confirmed_only = false;
    double median_ms = 0;
    std::map<int32_t, double> rank_ms;
    std::deque<v1::SyncDecision> decisions;
    int64_t last_sent_ns = 0;
    v1::TrainerDirective last_sent;
    uint64_t reports = 0;
    uint64_t switches_applied = 0;
  };

  void Judge(Job& job, int64_t now);
  void Decide(const std::string& id, Job& job, int64_t now,
              std::vector<Outgoing>* out);
  void Record(Job& job, v1::SyncDecision d);
  // The TIMED directive's period: settings.period_ms, or
  // (timed_period_steps + 1/2) x the median compute ms of the non-straggler
  // ranks
  // (`how` says which, for the decision's reason).
  uint32_t TimedPeriodMs(const Job& job, const v1::SyncSettings& s,
                         std::string* how) const;
  v1::Evidence MakeEvidence(const Job& job, int64_t now) const;

  Clock* const clock_;
  const Options options_;
  DirectiveIds own_ids_;  // used when options_.directive_ids is null
  DirectiveIds* const ids_;
  std::map<std::string, Job> jobs_;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_TRAINERS_SYNC_POLICY_H_
