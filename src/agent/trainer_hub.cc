#include "src/agent/trainer_hub.h"

#include "absl/strings/str_cat.h"
#include "pitstop/logging.h"

namespace pitstop::agent {

absl::Status ValidateReport(const v1::ReportStepsRequest& r) {
  const v1::TrainerIdentity& t = r.trainer();
  if (t.job_id().empty()) {
    return absl::InvalidArgumentError("trainer.job_id: required");
  }
  if (t.job_id().size() > TrainerHub::kMaxJobIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trainer.job_id: longer than ", TrainerHub::kMaxJobIdBytes, " bytes"));
  }
  if (t.global_rank() < 0 || t.global_rank() >= TrainerHub::kMaxRanks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trainer.global_rank: ", t.global_rank(), " not in [0, 2^20)"));
  }
  if (t.world_size() < 0 || t.world_size() > TrainerHub::kMaxRanks ||
      (t.world_size() > 0 && t.global_rank() >= t.world_size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("trainer.world_size: ", t.world_size(),
                     " does not hold global_rank ", t.global_rank()));
  }
  if (!v1::SyncMode_IsValid(r.current_mode())) {
    return absl::InvalidArgumentError(
        absl::StrCat("current_mode: unknown value ", r.current_mode()));
  }
  if (r.steps_size() > TrainerHub::kMaxStepsPerReport) {
    return absl::InvalidArgumentError(
        absl::StrCat("steps: ", r.steps_size(), " reports, at most ",
                     TrainerHub::kMaxStepsPerReport, " per call"));
  }
  for (int i = 0; i < r.steps_size(); ++i) {
    const v1::StepReport& s = r.steps(i);
    if (s.phases_size() > TrainerHub::kMaxPhasesPerStep) {
      return absl::InvalidArgumentError(absl::StrCat(
          "steps[", i, "].phases: more than ", TrainerHub::kMaxPhasesPerStep));
    }
    for (int j = 0; j < s.phases_size(); ++j) {
      if (!v1::TrainPhase_IsValid(s.phases(j).phase()) ||
          s.phases(j).phase() == v1::TRAIN_PHASE_UNSPECIFIED) {
        return absl::InvalidArgumentError(
            absl::StrCat("steps[", i, "].phases[", j, "].phase: unknown value ",
                         s.phases(j).phase()));
      }
    }
    if (!v1::SyncMode_IsValid(s.mode())) {
      return absl::InvalidArgumentError(
          absl::StrCat("steps[", i, "].mode: unknown value ", s.mode()));
    }
    if (s.loss() != s.loss()) {  // NaN: the controller averages losses
      return absl::InvalidArgumentError(
          absl::StrCat("steps[", i, "].loss: NaN"));
    }
  }
  return ValidateProfiles(r);
}

absl::Status ValidateProfiles(const v1::ReportStepsRequest& r) {
  if (r.profiles_size() > TrainerHub::kMaxProfilesPerReport) {
    return absl::InvalidArgumentError(
        absl::StrCat("profiles: ", r.profiles_size(), " answers, at most ",
                     TrainerHub::kMaxProfilesPerReport, " per call"));
  }
  for (int i = 0; i < r.profiles_size(); ++i) {
    const v1::ProfileResult& p = r.profiles(i);
    if (p.request_id() == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("profiles[", i, "].request_id: required"));
    }
    if (p.steps() > TrainerHub::kMaxProfileSteps ||
        p.ops_size() > static_cast<int>(TrainerHub::kMaxProfileOps)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "profiles[", i, "]: ", p.steps(), " steps / ", p.ops_size(),
          " ops, at most ", TrainerHub::kMaxProfileSteps, " / ",
          TrainerHub::kMaxProfileOps));
    }
    for (int j = 0; j < p.ops_size(); ++j) {
      if (p.ops(j).name().empty() ||
          p.ops(j).name().size() > TrainerHub::kMaxProfileOpNameBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "profiles[", i, "].ops[", j, "].name: required, at most ",
            TrainerHub::kMaxProfileOpNameBytes, " bytes"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::ReportStepsResponse> TrainerHub::Report(
    const v1::ReportStepsRequest& request) {
  if (absl::Status s = ValidateReport(request); !s.ok()) return s;
  v1::ReportStepsResponse resp;
  MutexLock lock(&mu_);
  counters_.reports++;
  counters_.steps += request.steps_size();
  if (!forward_) {
    counters_.steps_dropped += request.steps_size();
  } else {
    queued_steps_ += request.steps_size();
    queue_.push_back(request);
    while (queued_steps_ > kMaxQueuedSteps && queue_.size() > 1) {
      queued_steps_ -= queue_.front().steps_size();
      counters_.steps_dropped += queue_.front().steps_size();
      queue_.pop_front();
    }
  }
  auto it = directives_.find(request.trainer().job_id());
  if (it != directives_.end() &&
      it->second.directive_id() > request.seen_directive_id()) {
    *resp.add_directives() = it->second;
  }
  auto prof = profiles_.find(
      {request.trainer().job_id(), request.trainer().global_rank()});
  if (prof != profiles_.end()) {
    *resp.add_profile_requests() = std::move(prof->second);
    profiles_.erase(prof);
    counters_.profile_requests++;
  }
  resp.set_controller_connected(connected_);
  return resp;
}

void TrainerHub::FillBatch(v1::ConnectRequest* batch) {
  MutexLock lock(&mu_);
  for (auto& r : queue_) *batch->add_trainer_reports() = std::move(r);
  queue_.clear();
  queued_steps_ = 0;
}

void TrainerHub::OnDirective(const v1::TrainerDirective& d) {
  MutexLock lock(&mu_);
  counters_.directives++;
  v1::TrainerDirective& cur = directives_[d.job_id()];
  if (d.directive_id() > cur.directive_id()) {
    cur = d;
    Logger("agent.trainer")
        ->info("job {}: directive {} mode {} (apply at step {}): {}",
               d.job_id(), d.directive_id(), v1::SyncMode_Name(d.mode()),
               d.apply_at_step(), d.reason());
  }
}

void TrainerHub::OnProfileRequest(const v1::ProfileRequest& r) {
  MutexLock lock(&mu_);
  const std::pair<std::string, int32_t> key{r.job_id(), r.global_rank()};
  const bool valid =
      !r.job_id().empty() && r.job_id().size() <= kMaxJobIdBytes &&
      r.global_rank() >= 0 && r.global_rank() < kMaxRanks &&
      r.request_id() != 0 && r.steps() >= 1 && r.steps() <= kMaxProfileSteps &&
      r.max_ops() >= 1 && r.max_ops() <= kMaxProfileOps;
  if (!valid ||
      (!profiles_.contains(key) && profiles_.size() >= kMaxProfileRequests)) {
    counters_.profile_requests_dropped++;
    Logger("agent.trainer")
        ->warn("job {} rank {}: profile request {} dropped ({})", r.job_id(),
               r.global_rank(), r.request_id(),
               valid ? "too many waiting" : "invalid");
    return;
  }
  profiles_[key] = r;
  Logger("agent.trainer")
      ->info("job {} rank {}: profile request {} ({} steps): {}", r.job_id(),
             r.global_rank(), r.request_id(), r.steps(), r.reason());
}

void TrainerHub::SetControllerConnected(bool connected) {
  MutexLock lock(&mu_);
  connected_ = connected;
}

TrainerHub::Counters TrainerHub::counters() const {
  MutexLock lock(&mu_);
  return counters_;
}

}  // namespace pitstop::agent
