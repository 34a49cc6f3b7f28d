#include "src/controller/trainers/trainer_policy_service.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pitstop/logging.h"
#include "src/controller/ha/leadership.h"
#include "src/controller/store/fault_store.h"

namespace pitstop::controller {

TrainerPolicyService::TrainerPolicyService(Options options)
    : options_(std::move(options)) {
  Reset(Settings{});
}

absl::StatusOr<TrainerPolicyService::Settings>
TrainerPolicyService::ReadSettings() const {
  Settings out;
  absl::StatusOr<std::map<std::string, v1::SyncSettings>> sync =
      options_.store->SyncPolicies();
  if (!sync.ok()) return sync.status();
  absl::StatusOr<std::map<std::string, v1::LoraSettings>> lora =
      options_.store->LoraPolicies();
  if (!lora.ok()) return lora.status();
  out.sync = std::move(*sync);
  out.lora = std::move(*lora);
  return out;
}

void TrainerPolicyService::Reset(const Settings& settings) {
  ServiceLock lock(&mu_);
  SyncPolicyEngine::Options sync = options_.sync;
  sync.directive_ids = &directive_ids_;
  sync_ = std::make_unique<SyncPolicyEngine>(options_.clock, std::move(sync));
  LoraPolicyEngine::Options lora = options_.lora;
  lora.directive_ids = &directive_ids_;
  lora_ = std::make_unique<LoraPolicyEngine>(options_.clock, std::move(lora));
  // A stored setting the engine refuses (validated again: an older
  // controller's limits, a full job table) is logged and left out.
  for (const auto& [job, s] : settings.sync) {
    if (absl::StatusOr<v1::SyncSettings> r = sync_->SetSettings(job, s);
        !r.ok()) {
      Logger("controller.sync")
          ->error("job {}: stored sync policy not loaded: {}", job,
                  r.status().ToString());
    }
  }
  for (const auto& [job, s] : settings.lora) {
    if (absl::StatusOr<v1::LoraSettings> r = lora_->SetSettings(job, s);
        !r.ok()) {
      Logger("controller.lora")
          ->error("job {}: stored lora policy not loaded: {}", job,
                  r.status().ToString());
    }
  }
}

absl::Status TrainerPolicyService::OnReports(const std::string& host,
                                             const v1::ConnectRequest& batch) {
  if (batch.trainer_reports_size() == 0) return absl::OkStatus();
  absl::Status first;
  auto note = [&first](absl::Status s, int i) {
    if (s.ok() || !first.ok()) return;
    // Keeps RESOURCE_EXHAUSTED (a full table is not the agent's bad
    // input); FAILED_PRECONDITION is reserved for a superseded session.
    const absl::StatusCode code = absl::IsFailedPrecondition(s)
                                      ? absl::StatusCode::kInvalidArgument
                                      : s.code();
    first = absl::Status(
        code, absl::StrCat("trainer_reports[", i, "]: ", s.message()));
  };
  ServiceLock lock(&mu_);
  for (int i = 0; i < batch.trainer_reports_size(); ++i) {
    note(sync_->AddReport(host, batch.trainer_reports(i)), i);
    note(lora_->AddReport(host, batch.trainer_reports(i)), i);
  }
  return first;
}

bool TrainerPolicyService::Active() {
  ServiceLock lock(&mu_);
  return !sync_->empty() || !lora_->empty();
}

void TrainerPolicyService::RunCycle(const std::vector<v1::Fault>& open) {
  std::vector<OutgoingDirective> sync, lora;
  {
    ServiceLock lock(&mu_);
    if (!sync_->empty()) sync = sync_->Evaluate(open);
    if (!lora_->empty()) lora = lora_->Evaluate(open);
  }
  // Sent without the lock: the agents' streams are another service's.
  for (const OutgoingDirective& o : sync) {
    Send(o, "directive");
    Count(o.directive.mode() == v1::SYNC_MODE_SYNC ? PolicyAction::kSyncToSync
          : o.directive.mode() == v1::SYNC_MODE_TIMED
              ? PolicyAction::kSyncToTimed
              : PolicyAction::kSyncToLocalSgd);
  }
  for (const OutgoingDirective& o : lora) {
    Send(o, "placement directive");
    Count(PolicyAction::kLoraReschedule);
  }
}

void TrainerPolicyService::Count(PolicyAction a) {
  if (options_.policy_actions != nullptr) options_.policy_actions->Took(a);
}

void TrainerPolicyService::Send(const OutgoingDirective& o, const char* what) {
  for (const std::string& host : o.hosts) {
    if (!options_.sender->SendTrainerDirective(host, o.directive)) {
      Logger("controller.sync")
          ->warn("job {}: {} {} not delivered to {}: agent not connected",
                 o.job_id, what, o.directive.directive_id(), host);
    }
  }
}

absl::StatusOr<v1::JobSync> TrainerPolicyService::JobSync(
    const std::string& job_id) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id: required");
  ServiceLock lock(&mu_);
  return sync_->State(job_id);
}

absl::StatusOr<v1::SyncSettings> TrainerPolicyService::SetSyncPolicy(
    const std::string& job_id, const v1::SyncSettings& settings) {
  if (absl::Status s = CheckLeader(options_.leadership); !s.ok()) return s;
  if (absl::Status s = SyncPolicyEngine::CheckSettings(job_id, settings);
      !s.ok()) {
    return s;
  }
  // Durable first (a deposed leader's write is refused by etcd and changes
  // nothing), without mu_: agent batches are not held by the disk sync or
  // the etcd round trip. write_mu_ keeps the order of writes.
  ServiceLock writes(&write_mu_);
  if (absl::Status s = options_.store->SaveSyncPolicy(job_id, settings);
      !s.ok()) {
    return s;
  }
  ServiceLock lock(&mu_);
  absl::StatusOr<v1::SyncSettings> r = sync_->SetSettings(job_id, settings);
  if (r.ok()) {
    Logger("controller.sync")
        ->info("job {}: sync policy {} (slow_persist_s {}, healthy_s {})",
               job_id, v1::SyncPolicy_Name(r->policy()), r->slow_persist_s(),
               r->healthy_s());
  }
  return r;
}

absl::StatusOr<v1::JobLora> TrainerPolicyService::JobLora(
    const std::string& job_id) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id: required");
  ServiceLock lock(&mu_);
  return lora_->State(job_id);
}

absl::StatusOr<v1::LoraSettings> TrainerPolicyService::SetLoraPolicy(
    const std::string& job_id, const v1::LoraSettings& settings) {
  if (absl::Status s = CheckLeader(options_.leadership); !s.ok()) return s;
  if (absl::Status s = LoraPolicyEngine::CheckSettings(job_id, settings);
      !s.ok()) {
    return s;
  }
  // Durable first, off mu_ (SetSyncPolicy says why).
  ServiceLock writes(&write_mu_);
  if (absl::Status s = options_.store->SaveLoraPolicy(job_id, settings);
      !s.ok()) {
    return s;
  }
  ServiceLock lock(&mu_);
  absl::StatusOr<v1::LoraSettings> r = lora_->SetSettings(job_id, settings);
  if (r.ok()) {
    Logger("controller.lora")
        ->info("job {}: lora policy {} (slow_persist_s {}, horizon_s {})",
               job_id, v1::LoraPolicy_Name(r->policy()), r->slow_persist_s(),
               r->horizon_s());
  }
  return r;
}

void TrainerPolicyService::FillJobs(std::vector<v1::Job>* jobs,
                                    std::set<std::string>* added) {
  ServiceLock lock(&mu_);
  AddLoraJobs(jobs, added);
  AddSyncJobs(jobs, added);
}

void TrainerPolicyService::AddLoraJobs(std::vector<v1::Job>* jobs,
                                       std::set<std::string>* added) {
  for (const auto& [id, hosts] : lora_->JobHosts()) {
    // A lambda may not capture a structured binding before C++20's P1091
    // (clang < 16, which clang-tidy uses here): name it.
    const std::string& job_id = id;
    auto it = std::find_if(
        jobs->begin(), jobs->end(),
        [&job_id](const v1::Job& j) { return j.job_id() == job_id; });
    if (it != jobs->end()) continue;
    v1::Job j;
    j.set_job_id(id);
    for (const auto& h : hosts) j.add_hosts(h);
    added->insert(id);
    jobs->push_back(std::move(j));
  }
  for (v1::Job& j : *jobs) {
    absl::StatusOr<v1::JobLora> s = lora_->State(j.job_id());
    if (s.ok()) {
      if (j.n_ranks() == 0) j.set_n_ranks(s->trainers());
      *j.mutable_lora() = std::move(*s);
    }
  }
}

void TrainerPolicyService::AddSyncJobs(std::vector<v1::Job>* jobs,
                                       std::set<std::string>* added) {
  for (const auto& [id, info] : sync_->Jobs()) {
    const std::string& job_id = id;  // see AddLoraJobs
    auto it = std::find_if(
        jobs->begin(), jobs->end(),
        [&job_id](const v1::Job& j) { return j.job_id() == job_id; });
    if (it == jobs->end()) {
      v1::Job j;
      j.set_job_id(id);
      j.set_n_ranks(info.world_size);
      for (const auto& h : info.hosts) j.add_hosts(h);
      added->insert(id);
      jobs->push_back(std::move(j));
    }
  }
  for (v1::Job& j : *jobs) {
    absl::StatusOr<v1::JobSync> s = sync_->State(j.job_id());
    if (s.ok()) {
      *j.mutable_sync() = std::move(*s);
    } else {
      *j.mutable_sync()->mutable_settings() = sync_->Settings(j.job_id());
    }
  }
  std::sort(jobs->begin(), jobs->end(), [](const v1::Job& a, const v1::Job& b) {
    return a.job_id() < b.job_id();
  });
}

}  // namespace pitstop::controller
