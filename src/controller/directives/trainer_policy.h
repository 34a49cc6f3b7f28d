// What the two trainer policies (the local-SGD switch in sync/ and
// multi-LoRA rescheduling in lora/) share: limits and validation of a
// trainer report, the median of a window, and the directive they hand
// ControllerCore to send to a job's agents.
//
// Pure functions and plain structs; thread-compatible.
#ifndef PITSTOP_CONTROLLER_DIRECTIVES_TRAINER_POLICY_H_
#define PITSTOP_CONTROLLER_DIRECTIVES_TRAINER_POLICY_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
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

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_DIRECTIVES_TRAINER_POLICY_H_
