// ControllerCore: the multi-LoRA rescheduling policy glue: policy cycle,
// placement directives to agents, Job.lora and the GetJobLora /
// SetLoraPolicy calls.
#include <algorithm>

#include "pitstop/logging.h"
#include "src/controller/controller_core.h"

namespace pitstop::controller {

void ControllerCore::RunLoraPolicy(const std::vector<v1::Fault>& open) {
  if (lora_->empty()) return;
  for (const LoraPolicyEngine::Outgoing& o : lora_->Evaluate(open)) {
    SendTrainerDirective(o.job_id, o.hosts, o.directive, "placement directive");
  }
}

void ControllerCore::AddLoraJobs(std::vector<v1::Job>* jobs) {
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
    absl::StatusOr<std::vector<v1::Fault>> open = store_->List(id, false, 0);
    j.set_open_faults(open.ok() ? open->size() : 0);
    *j.mutable_policy() = engine_->GetJobPolicy(id);
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

absl::StatusOr<v1::JobLora> ControllerCore::JobLora(const std::string& job_id) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id: required");
  CoreLock lock(this);
  return lora_->State(job_id);
}

absl::StatusOr<v1::LoraSettings> ControllerCore::SetLoraPolicy(
    const std::string& job_id, const v1::LoraSettings& settings) {
  if (absl::Status s = CheckLeader(); !s.ok()) return s;
  if (absl::Status s = LoraPolicyEngine::CheckSettings(job_id, settings);
      !s.ok()) {
    return s;
  }
  // Durable first, off the core's lock (SetSyncPolicy says why).
  MutexLock writes(&write_mu_);
  if (absl::Status s = store_->SaveLoraPolicy(job_id, settings); !s.ok()) {
    return s;
  }
  CoreLock lock(this);
  absl::StatusOr<v1::LoraSettings> r = lora_->SetSettings(job_id, settings);
  if (r.ok()) {
    Logger("controller.lora")
        ->info("job {}: lora policy {} (slow_persist_s {}, horizon_s {})",
               job_id, v1::LoraPolicy_Name(r->policy()), r->slow_persist_s(),
               r->horizon_s());
  }
  return r;
}

}  // namespace pitstop::controller
