// The hosts a scheduler named for a job (DetectionEngine::SetJobHosts;
// docs/reliability.md, "Trust model", issue #33 R21-4 and R21-6): only they
// may add members to the job's communicators, and the job's units there are
// sheltered from the host's share (tenant_budget.h).
#include <algorithm>
#include <functional>
#include <iterator>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/controller/detect/engine_impl.h"

namespace pitstop::controller {

absl::Status EngineImpl::SetJobHosts(absl::string_view job_id,
                                     const std::vector<std::string>& hosts) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id: required");
  if (hosts.size() > kMaxScheduledHosts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hosts: ", hosts.size(), " named, at most ", kMaxScheduledHosts));
  }
  std::set<std::string, std::less<>> named;
  for (const std::string& h : hosts) {
    if (h.empty()) return absl::InvalidArgumentError("hosts: an empty name");
    named.insert(h);
  }
  auto it = scheduled_hosts_.find(job_id);
  if (it == scheduled_hosts_.end() && !named.empty() &&
      scheduled_hosts_.size() >= kMaxScheduledJobs) {
    return absl::ResourceExhaustedError(
        absl::StrCat("job_id: the hosts of ", kMaxScheduledJobs,
                     " jobs are named already (kMaxScheduledJobs); name an "
                     "ended job's hosts empty to forget them"));
  }
  absl::flat_hash_set<uint32_t> ids;
  for (const std::string& h : named) ids.insert(host_ids_.Id(h));
  member_budget_.Shelter(job_id, ids);
  comm_budget_.Shelter(job_id, ids);
  join_budget_.Shelter(job_id, std::move(ids));
  if (named.empty()) {
    if (it != scheduled_hosts_.end()) scheduled_hosts_.erase(it);
  } else {
    scheduled_hosts_[std::string(job_id)] = std::move(named);
  }
  return absl::OkStatus();
}

std::vector<std::string> EngineImpl::JobHosts(absl::string_view job_id) const {
  auto it = scheduled_hosts_.find(job_id);
  if (it == scheduled_hosts_.end()) return {};
  return {it->second.begin(), it->second.end()};
}

absl::Status EngineImpl::ScheduledHost(absl::string_view job,
                                       absl::string_view host) {
  if (job.empty()) return absl::OkStatus();
  auto it = scheduled_hosts_.find(job);
  if (it == scheduled_hosts_.end() || it->second.contains(host)) {
    return absl::OkStatus();
  }
  ++stats_.claims_refused;
  ++stats_.unscheduled_refused;
  const std::set<std::string, std::less<>>& named = it->second;
  return absl::PermissionDeniedError(absl::StrCat(
      "job_id: the scheduler named the hosts of job '", job.substr(0, 64),
      "' (", named.size(), ": ",
      absl::StrJoin(named.begin(),
                    std::next(named.begin(), std::min<size_t>(named.size(), 4)),
                    ", "),
      named.size() > 4 ? ", ..." : "", "); host ", host.substr(0, 64),
      " is not one of them"));
}

}  // namespace pitstop::controller
