// What the two trainer policies (the local-SGD switch in sync/ and
// multi-LoRA rescheduling in lora/) share: limits and validation of a
// trainer report, the median of a window, and the directive they hand
// TrainerPolicyService to send to a job's agents.
//
// Pure functions and plain structs; thread-compatible.
#ifndef PITSTOP_CONTROLLER_TRAINERS_TRAINER_POLICY_H_
#define PITSTOP_CONTROLLER_TRAINERS_TRAINER_POLICY_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "pitstop/v1/trainer.pb.h"

namespace pitstop::controller {

inline constexpr size_t kMaxJobIdBytes = 256;
inline constexpr int32_t kMaxTrainerRanks = 1 << 20;
inline constexpr int kMaxStepsPerReport = 4096;
inline constexpr uint32_t kMaxPolicySeconds = 7 * 24 * 3600;  // a week

// A directive for every agent (`hosts`) of a job.
struct OutgoingDirective {
  std::string job_id;
  std::vector<std::string> hosts;
  v1::TrainerDirective directive;
};

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// InvalidArgument naming the field of a report's identity or size.
inline absl::Status ValidateTrainerReport(const v1::ReportStepsRequest& r) {
  const v1::TrainerIdentity& t = r.trainer();
  if (t.job_id().empty() || t.job_id().size() > kMaxJobIdBytes) {
    return absl::InvalidArgumentError(
        "trainer.job_id: required, at most 256 bytes");
  }
  if (t.global_rank() < 0 || t.global_rank() >= kMaxTrainerRanks ||
      t.world_size() < 0 || t.world_size() > kMaxTrainerRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat("trainer.global_rank: ", t.global_rank(), " / world_size ",
                     t.world_size(), " out of range"));
  }
  if (r.steps_size() > kMaxStepsPerReport) {
    return absl::InvalidArgumentError(
        absl::StrCat("steps: ", r.steps_size(), " > ", kMaxStepsPerReport));
  }
  return absl::OkStatus();
}

// Finds or adds job `id` in a policy's job table and marks it active at
// `now_ns` (`Job` has an int64_t `last_active_ns` and a std::string
// `first_host`, the reporting `host` that created it). A long-running
// controller sees many short jobs come and go: with the table full, a new job
// replaces the one idle longest if it has been idle at least `idle_expiry`;
// active jobs are never dropped (ResourceExhausted naming `field`). `forgotten`
// (may be null) gets the id of a dropped job.
template <typename Job>
absl::StatusOr<Job*> FindOrAddJob(std::map<std::string, Job>& jobs,
                                  const std::string& id, size_t max_jobs,
                                  absl::Duration idle_expiry, int64_t now_ns,
                                  const char* field,
                                  std::string* forgotten = nullptr,
                                  const std::string& host = "",
                                  size_t max_jobs_per_host = 0) {
  if (auto it = jobs.find(id); it != jobs.end()) {
    it->second.last_active_ns = now_ns;
    return &it->second;
  }
  // A host's share (R18-8): the jobs its reports created. Made-up jobs of
  // one host end at its share and never push out another host's.
  if (!host.empty() && max_jobs_per_host > 0) {
    size_t own = 0;
    for (const auto& [name, job] : jobs) own += job.first_host == host;
    if (own >= max_jobs_per_host) {
      return absl::ResourceExhaustedError(absl::StrCat(
          field, ": host ", host.substr(0, 64), " reported ", max_jobs_per_host,
          " jobs already (its share of ", max_jobs, ")"));
    }
  }
  if (jobs.size() >= max_jobs) {
    auto idlest = std::min_element(
        jobs.begin(), jobs.end(), [](const auto& a, const auto& b) {
          return a.second.last_active_ns < b.second.last_active_ns;
        });
    if (idlest == jobs.end() || now_ns - idlest->second.last_active_ns <
                                    absl::ToInt64Nanoseconds(idle_expiry)) {
      return absl::ResourceExhaustedError(
          absl::StrCat(field, ": more than ", max_jobs, " jobs active within ",
                       absl::FormatDuration(idle_expiry)));
    }
    if (forgotten != nullptr) *forgotten = idlest->first;
    jobs.erase(idlest);
  }
  Job* job = &jobs.emplace(id, Job{}).first->second;
  job->last_active_ns = now_ns;
  job->first_host = host;
  return job;
}

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_TRAINERS_TRAINER_POLICY_H_
