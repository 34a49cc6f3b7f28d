// What a scheduler may name as a job's hosts (DetectionEngine::SetJobHosts;
// docs/reliability.md, "Trust model", "Round 22", "Round 23"): the limits,
// and the one check the engine and IngestService (before its store write)
// both apply.
#ifndef PITSTOP_CONTROLLER_DETECT_SCHEDULED_HOSTS_H_
#define PITSTOP_CONTROLLER_DETECT_SCHEDULED_HOSTS_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pitstop::controller {

// Jobs whose hosts are named at once.
inline constexpr size_t kMaxScheduledJobs = 65536;
// Hosts of one job, and their names' bytes added up: one job's naming is
// one etcd value, and etcd refuses requests above 1.5 MiB by default.
inline constexpr size_t kMaxScheduledHosts = 65536;
inline constexpr size_t kMaxScheduledJobBytes = size_t{1} << 20;
// (job, host) pairs of all named jobs together: what the naming costs the
// leader's memory (and its store) is bounded whatever the scheduler sends.
inline constexpr size_t kMaxScheduledNames = size_t{1} << 20;
// A job id as the trainer policies take it; a host as an agent may register
// it (registration.host: printable ASCII, no space, at most 253 bytes), so
// a name no agent could report under is refused, not kept.
inline constexpr size_t kMaxScheduledJobIdBytes = 256;
inline constexpr size_t kMaxScheduledHostBytes = 253;
// The scheduler's name kept with the naming (`who`).
inline constexpr size_t kMaxSchedulerNameBytes = 256;

// What is named now: jobs, (job, host) pairs of all jobs, and the hosts of
// the job being named (0 when it is not).
struct ScheduledCounts {
  size_t jobs = 0;
  size_t names = 0;
  size_t of_job = 0;
};

// `hosts` sorted with duplicates dropped when naming them for `job_id` fits
// `now`. InvalidArgument naming the field and offset ("hosts[3]: byte 10 at
// offset 2 (printable ASCII only)") for an empty, over-long or control-byte
// job id, an empty, over-long or non-printable host, more than
// kMaxScheduledHosts hosts or kMaxScheduledJobBytes of names;
// ResourceExhausted when a job not named yet would pass kMaxScheduledJobs,
// or all names kMaxScheduledNames. An empty list (forgetting) always fits.
absl::StatusOr<std::vector<std::string>> CheckJobHosts(
    absl::string_view job_id, const std::vector<std::string>& hosts,
    const ScheduledCounts& now);

// InvalidArgument ("who: ...") for a scheduler name longer than
// kMaxSchedulerNameBytes or with control bytes.
absl::Status CheckSchedulerName(absl::string_view who);

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_DETECT_SCHEDULED_HOSTS_H_
