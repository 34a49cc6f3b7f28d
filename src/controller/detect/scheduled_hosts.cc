// The hosts a scheduler named for a job (DetectionEngine::SetJobHosts,
// scheduled_hosts.h; docs/reliability.md, "Trust model", issue #33 R21-4
// and R21-6): only they may add members to the job's communicators, and the
// job's units there are sheltered from the host's share (tenant_budget.h).
#include "src/controller/detect/scheduled_hosts.h"

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

namespace {

// The first byte of `s` that `bad` refuses, as an error naming `field`.
template <typename Bad>
absl::Status Bytes(absl::string_view field, absl::string_view s, Bad bad,
                   const char* what) {
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (bad(c)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": byte ", static_cast<int>(c), " at offset ", i,
                       " (", what, ")"));
    }
  }
  return absl::OkStatus();
}

// No control bytes (UTF-8 and anything else above 0x7f pass).
absl::Status NoControlBytes(absl::string_view field, absl::string_view s) {
  return Bytes(
      field, s, [](unsigned char c) { return c < 0x20 || c == 0x7f; },
      "no control bytes");
}

absl::Status CheckHost(size_t i, absl::string_view host) {
  const std::string field = absl::StrCat("hosts[", i, "]");
  if (host.empty()) return absl::InvalidArgumentError(field + ": empty");
  if (host.size() > kMaxScheduledHostBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": ", host.size(), " bytes, at most ", kMaxScheduledHostBytes));
  }
  return Bytes(
      field, host, [](unsigned char c) { return c <= 0x20 || c >= 0x7f; },
      "printable ASCII only, no space");
}

}  // namespace

absl::StatusOr<std::vector<std::string>> CheckJobHosts(
    absl::string_view job_id, const std::vector<std::string>& hosts,
    const ScheduledCounts& now) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id: required");
  if (job_id.size() > kMaxScheduledJobIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("job_id: ", job_id.size(),
                                                   " bytes, at most ",
                                                   kMaxScheduledJobIdBytes));
  }
  if (absl::Status s = NoControlBytes("job_id", job_id); !s.ok()) return s;
  if (hosts.size() > kMaxScheduledHosts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hosts: ", hosts.size(), " named, at most ", kMaxScheduledHosts));
  }
  size_t bytes = 0;
  for (size_t i = 0; i < hosts.size(); ++i) {
    if (absl::Status s = CheckHost(i, hosts[i]); !s.ok()) return s;
    bytes += hosts[i].size();
  }
  if (bytes > kMaxScheduledJobBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("hosts: ", bytes, " bytes of names, at most ",
                     kMaxScheduledJobBytes, " per job"));
  }
  std::vector<std::string> named(hosts.begin(), hosts.end());
  std::sort(named.begin(), named.end());
  named.erase(std::unique(named.begin(), named.end()), named.end());
  if (named.empty()) return named;
  if (now.of_job == 0 && now.jobs >= kMaxScheduledJobs) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "job_id: the hosts of ", now.jobs, " jobs are named already, at most ",
        kMaxScheduledJobs, "; forget an ended job's (job-hosts JOB --clear)"));
  }
  const size_t names = now.names - now.of_job + named.size();
  if (names > kMaxScheduledNames) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "hosts: naming ", named.size(), " makes ", names,
        " (job, host) pairs of all jobs, at most ", kMaxScheduledNames,
        "; forget an ended job's (job-hosts JOB --clear)"));
  }
  return named;
}

absl::Status CheckSchedulerName(absl::string_view who) {
  if (who.size() > kMaxSchedulerNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "who: ", who.size(), " bytes, at most ", kMaxSchedulerNameBytes));
  }
  return NoControlBytes("who", who);
}

absl::Status EngineImpl::SetJobHosts(absl::string_view job_id,
                                     const std::vector<std::string>& hosts) {
  auto it = scheduled_hosts_.find(job_id);
  const size_t of_job = it == scheduled_hosts_.end() ? 0 : it->second.size();
  absl::StatusOr<std::vector<std::string>> checked =
      CheckJobHosts(job_id, hosts,
                    {scheduled_hosts_.size(),
                     static_cast<size_t>(stats_.scheduled_names), of_job});
  if (!checked.ok()) return checked.status();
  std::set<std::string, std::less<>> named(
      std::make_move_iterator(checked->begin()),
      std::make_move_iterator(checked->end()));
  absl::flat_hash_set<uint32_t> ids;
  for (const std::string& h : named) ids.insert(host_ids_.Id(h));
  member_budget_.Shelter(job_id, ids);
  comm_budget_.Shelter(job_id, ids);
  join_budget_.Shelter(job_id, std::move(ids));
  stats_.scheduled_names += named.size();
  stats_.scheduled_names -= of_job;
  if (named.empty()) {
    if (it != scheduled_hosts_.end()) scheduled_hosts_.erase(it);
  } else {
    scheduled_hosts_[std::string(job_id)] = std::move(named);
  }
  stats_.scheduled_jobs = scheduled_hosts_.size();
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
