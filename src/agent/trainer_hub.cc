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

void TrainerHub::SetControllerConnected(bool connected) {
  MutexLock lock(&mu_);
  connected_ = connected;
}

TrainerHub::Counters TrainerHub::counters() const {
  MutexLock lock(&mu_);
  return counters_;
}

}  // namespace pitstop::agent
