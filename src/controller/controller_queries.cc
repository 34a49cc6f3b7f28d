// Controller: the Controller API's queries that span services (GetStatus,
// ListJobs, GetJob). Each reads one service at a time.
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "src/controller/controller.h"
#include "src/controller/store/fault_store.h"

namespace pitstop::controller {

v1::ControllerStatus Controller::Status() {
  v1::ControllerStatus s;
  s.set_version(options_.version);
  s.set_start_unix_ns(start_unix_ns_);
  const auto [ready, total] = nodes_->ReadyAndTotal();
  s.set_nodes_ready(ready);
  s.set_nodes_total(total);
  s.set_jobs(ingest_->Jobs().size());
  const IngestService::Stats st = ingest_->stats();
  s.set_communicators(st.communicators);
  s.set_collectives_joined(st.collectives_joined);
  s.set_open_faults(faults_->OpenCount());
  s.set_last_detection_cycle_ms(st.last_cycle_ms);
  s.set_database_path(store_->path());
  if (options_.leadership != nullptr) {
    options_.leadership->FillStatus(&s);
  } else {
    s.set_role(v1::CONTROLLER_ROLE_SINGLE);
  }
  return s;
}

std::vector<v1::Job> Controller::Jobs() {
  // Open faults per job, from the store (a disk read in SQLite, a round
  // trip in etcd: no service lock is held meanwhile).
  std::map<std::string, uint32_t> open_per_job;
  if (absl::StatusOr<std::vector<v1::Fault>> open = faults_->OpenFaults();
      open.ok()) {
    for (const v1::Fault& f : *open) ++open_per_job[f.job_id()];
  }
  auto open_faults = [&open_per_job](const std::string& job) {
    auto n = open_per_job.find(job);
    return n == open_per_job.end() ? 0 : n->second;
  };
  std::vector<v1::Job> jobs = ingest_->Jobs();
  for (v1::Job& j : jobs) j.set_open_faults(open_faults(j.job_id()));
  std::set<std::string> added;  // jobs only trainers report
  trainers_->FillJobs(&jobs, &added);
  for (v1::Job& j : jobs) {
    if (!added.count(j.job_id())) continue;
    j.set_open_faults(open_faults(j.job_id()));
    *j.mutable_policy() = ingest_->JobPolicy(j.job_id());
  }
  return jobs;
}

absl::StatusOr<v1::Job> Controller::Job(const std::string& job_id) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id: required");
  for (v1::Job& j : Jobs()) {
    if (j.job_id() == job_id) return j;
  }
  return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
}

}  // namespace pitstop::controller
