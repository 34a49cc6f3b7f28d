// ControllerCore: the Controller API queries and operator actions.
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "src/controller/controller_core.h"

namespace pitstop::controller {
namespace {

absl::Status Required(const std::string& value, absl::string_view field) {
  if (value.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": required"));
  }
  return absl::OkStatus();
}

}  // namespace

v1::ControllerStatus ControllerCore::Status() {
  const uint32_t open_faults = faults_->OpenCount();  // before the lock
  CoreLock lock(this);
  v1::ControllerStatus s;
  s.set_version(options_.version);
  s.set_start_unix_ns(start_unix_ns_);
  const auto [ready, total] = nodes_->ReadyAndTotal();
  s.set_nodes_ready(ready);
  s.set_nodes_total(total);
  s.set_jobs(engine_->Jobs().size());
  const EngineStats st = engine_->stats();
  s.set_communicators(st.communicators);
  s.set_collectives_joined(st.collectives_joined);
  s.set_open_faults(open_faults);
  s.set_last_detection_cycle_ms(last_cycle_ms_);
  s.set_database_path(store_->path());
  if (options_.leadership != nullptr) {
    options_.leadership->FillStatus(&s);
  } else {
    s.set_role(v1::CONTROLLER_ROLE_SINGLE);
  }
  return s;
}

std::vector<v1::Job> ControllerCore::Jobs() {
  // The store is read before the lock (a disk read in SQLite, a round trip
  // in etcd must not hold agent batches up): open faults per job.
  std::map<std::string, uint32_t> open_per_job;
  if (absl::StatusOr<std::vector<v1::Fault>> open = store_->List("", false, 0);
      open.ok()) {
    for (const v1::Fault& f : *open) ++open_per_job[f.job_id()];
  }
  CoreLock lock(this);
  std::vector<v1::Job> jobs = engine_->Jobs();
  for (v1::Job& j : jobs) {
    auto n = open_per_job.find(j.job_id());
    j.set_open_faults(n == open_per_job.end() ? 0 : n->second);
  }
  std::set<std::string> added;  // jobs only trainers report
  trainers_->FillJobs(&jobs, &added);
  for (v1::Job& j : jobs) {
    if (!added.count(j.job_id())) continue;
    auto n = open_per_job.find(j.job_id());
    j.set_open_faults(n == open_per_job.end() ? 0 : n->second);
    *j.mutable_policy() = engine_->GetJobPolicy(j.job_id());
  }
  return jobs;
}

absl::StatusOr<v1::Job> ControllerCore::Job(const std::string& job_id) {
  if (absl::Status s = Required(job_id, "job_id"); !s.ok()) return s;
  for (v1::Job& j : Jobs()) {
    if (j.job_id() == job_id) return j;
  }
  return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
}

std::vector<v1::Communicator> ControllerCore::Communicators(
    const std::string& job_id) {
  CoreLock lock(this);
  std::vector<v1::Communicator> out;
  for (v1::Communicator& c : engine_->Communicators()) {
    if (job_id.empty() || c.job_id() == job_id) out.push_back(std::move(c));
  }
  return out;
}

absl::StatusOr<v1::Communicator> ControllerCore::Communicator(
    uint64_t comm_hash) {
  if (comm_hash == 0) {
    return absl::InvalidArgumentError("comm_hash: required (non-zero)");
  }
  CoreLock lock(this);
  v1::Communicator c;
  if (engine_->GetCommunicator(comm_hash, &c)) return c;
  return absl::NotFoundError(
      absl::StrCat("communicator ", absl::Hex(comm_hash), " not found"));
}

absl::StatusOr<v1::JobPolicy> ControllerCore::GetPolicy(
    const std::string& job_id) {
  if (absl::Status s = Required(job_id, "job_id"); !s.ok()) return s;
  CoreLock lock(this);
  return engine_->GetJobPolicy(job_id);
}

absl::StatusOr<v1::JobPolicy> ControllerCore::SetPolicy(
    const std::string& job_id, const v1::JobPolicy& policy) {
  if (absl::Status s = Required(job_id, "job_id"); !s.ok()) return s;
  if (absl::Status s = CheckLeader(); !s.ok()) return s;
  // Checked and stored first, then set: a write the store refuses (a
  // deposed leader's) changes nothing here either.
  const v1::JobPolicy& defaults = options_.engine.default_policy;
  if (absl::Status s = ValidatePolicy(policy, defaults); !s.ok()) return s;
  MutexLock writes(&write_mu_);
  if (absl::Status s =
          store_->SavePolicy(job_id, ResolvePolicy(policy, defaults));
      !s.ok()) {
    return s;
  }
  CoreLock lock(this);
  return engine_->SetJobPolicy(job_id, policy);
}

}  // namespace pitstop::controller
