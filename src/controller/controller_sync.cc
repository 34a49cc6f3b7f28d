// ControllerCore: the sync policy (local-SGD switch) glue: policy cycle,
// directives to agents (shared with the multi-LoRA policy), Job.sync and
// the GetJobSync / SetSyncPolicy calls.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "pitstop/logging.h"
#include "src/controller/controller_core.h"

namespace pitstop::controller {

void ControllerCore::RunTrainerPolicies(
    const absl::StatusOr<std::vector<v1::Fault>>& open) {
  if (sync_->empty() && lora_->empty()) return;
  if (!open.ok()) {
    Logger("controller.sync")
        ->error("trainer policies: reading open faults: {}",
                open.status().ToString());
    return;
  }
  RunSyncPolicy(*open);
  RunLoraPolicy(*open);
}

void ControllerCore::SendTrainerDirective(const std::string& job_id,
                                          const std::vector<std::string>& hosts,
                                          const v1::TrainerDirective& directive,
                                          const char* what) {
  for (const std::string& host : hosts) {
    auto it = nodes_.find(host);
    if (it == nodes_.end() || it->second.sink == nullptr) {
      Logger("controller.sync")
          ->warn("job {}: {} {} not delivered to {}: agent not connected",
                 job_id, what, directive.directive_id(), host);
      continue;
    }
    v1::ConnectResponse resp;
    v1::AgentCommand* cmd = resp.add_commands();
    cmd->set_command_id(next_command_id_++);
    *cmd->mutable_trainer_directive() = directive;
    it->second.sink->Send(resp);
  }
}

void ControllerCore::RunTrainerProfiles(const std::vector<v1::Fault>& open) {
  TrainerProfileService::CycleOut out = profiles_->RunCycle(open);
  if (out.requests.empty() && out.profiles.empty()) return;
  MutexLock writes(&write_mu_);  // in order with the cycle's fault writes
  std::vector<v1::Fault> stored;
  for (const TrainerProfileService::Attach& a : out.profiles) {
    absl::StatusOr<v1::Fault> f =
        StoreTrainerProfile(store_.get(), a.fault_id, a.profile);
    const bool took =
        f.ok() && f->trainer_profile().state() == a.profile.state();
    if (took) stored.push_back(std::move(*f));
    if (!took) {
      Logger("controller.profiling")
          ->warn("fault {}: profile not stored ({}): {}", a.fault_id,
                 f.ok() ? "fault resolved" : f.status().ToString(),
                 a.profile.text());
    }
  }
  CoreLock lock(this);
  for (const TrainerProfileService::Request& r : out.requests) {
    v1::AgentCommand cmd;
    cmd.set_command_id(next_command_id_++);
    *cmd.mutable_trainer_profile() = r.request;
    SendToAgent(r.host, cmd);  // not connected: the deadline says so
  }
  for (const v1::Fault& f : stored) {
    Notify(v1::WatchFaultsResponse::CHANGE_UPDATED, f);
  }
}

void ControllerCore::RunSyncPolicy(const std::vector<v1::Fault>& open) {
  if (sync_->empty()) return;
  for (const SyncPolicyEngine::Outgoing& o : sync_->Evaluate(open)) {
    SendTrainerDirective(o.job_id, o.hosts, o.directive, "directive");
  }
}

void ControllerCore::AddSyncJobs(std::vector<v1::Job>* jobs) {
  for (const auto& [id, info] : sync_->Jobs()) {
    // A lambda may not capture a structured binding before C++20's P1091
    // (clang < 16, which clang-tidy uses here): name it.
    const std::string& job_id = id;
    auto it = std::find_if(
        jobs->begin(), jobs->end(),
        [&job_id](const v1::Job& j) { return j.job_id() == job_id; });
    if (it == jobs->end()) {
      v1::Job j;
      j.set_job_id(id);
      j.set_n_ranks(info.world_size);
      for (const auto& h : info.hosts) j.add_hosts(h);
      absl::StatusOr<std::vector<v1::Fault>> open = store_->List(id, false, 0);
      j.set_open_faults(open.ok() ? open->size() : 0);
      *j.mutable_policy() = engine_->GetJobPolicy(id);
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

absl::StatusOr<v1::JobSync> ControllerCore::JobSync(const std::string& job_id) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id: required");
  CoreLock lock(this);
  return sync_->State(job_id);
}

absl::StatusOr<v1::SyncSettings> ControllerCore::SetSyncPolicy(
    const std::string& job_id, const v1::SyncSettings& settings) {
  if (absl::Status s = CheckLeader(); !s.ok()) return s;
  if (absl::Status s = SyncPolicyEngine::CheckSettings(job_id, settings);
      !s.ok()) {
    return s;
  }
  // Durable first (a deposed leader's write is refused by etcd and changes
  // nothing), without the core's lock: agent batches are not held by the
  // disk sync or the etcd round trip. write_mu_ keeps the order of writes.
  MutexLock writes(&write_mu_);
  if (absl::Status s = store_->SaveSyncPolicy(job_id, settings); !s.ok()) {
    return s;
  }
  CoreLock lock(this);
  absl::StatusOr<v1::SyncSettings> r = sync_->SetSettings(job_id, settings);
  if (r.ok()) {
    Logger("controller.sync")
        ->info("job {}: sync policy {} (slow_persist_s {}, healthy_s {})",
               job_id, v1::SyncPolicy_Name(r->policy()), r->slow_persist_s(),
               r->healthy_s());
  }
  return r;
}

absl::StatusOr<ControllerCore::TrainerSettings>
ControllerCore::ReadTrainerSettings() const {
  TrainerSettings out;
  absl::StatusOr<std::map<std::string, v1::SyncSettings>> sync =
      store_->SyncPolicies();
  if (!sync.ok()) return sync.status();
  absl::StatusOr<std::map<std::string, v1::LoraSettings>> lora =
      store_->LoraPolicies();
  if (!lora.ok()) return lora.status();
  out.sync = std::move(*sync);
  out.lora = std::move(*lora);
  return out;
}

void ControllerCore::ApplyTrainerSettings(const TrainerSettings& t,
                                          SyncPolicyEngine* sync,
                                          LoraPolicyEngine* lora) {
  // A stored setting the engine refuses (validated again: an older
  // controller's limits, a full job table) is logged and left out.
  for (const auto& [job, s] : t.sync) {
    if (absl::StatusOr<v1::SyncSettings> r = sync->SetSettings(job, s);
        !r.ok()) {
      Logger("controller.sync")
          ->error("job {}: stored sync policy not loaded: {}", job,
                  r.status().ToString());
    }
  }
  for (const auto& [job, s] : t.lora) {
    if (absl::StatusOr<v1::LoraSettings> r = lora->SetSettings(job, s);
        !r.ok()) {
      Logger("controller.lora")
          ->error("job {}: stored lora policy not loaded: {}", job,
                  r.status().ToString());
    }
  }
}

}  // namespace pitstop::controller
