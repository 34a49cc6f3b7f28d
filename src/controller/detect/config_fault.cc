#include "src/controller/detect/config_fault.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace pitstop::controller {
namespace {

constexpr int kRanksNamed = 8;

}  // namespace

std::string NcclResultName(int32_t result) {
  switch (result) {
    case 1:
      return "ncclUnhandledCudaError";
    case 2:
      return "ncclSystemError";
    case 3:
      return "ncclInternalError";
    case 4:
      return "ncclInvalidArgument";
    case 5:
      return "ncclInvalidUsage";
    case 6:
      return "ncclRemoteError";
    default:
      return absl::StrCat("ncclResult ", result);
  }
}

absl::Status ConfigFaults::Refuse(std::string why) {
  ++refused_;
  return absl::ResourceExhaustedError(std::move(why));
}

absl::Status ConfigFaults::Add(absl::string_view host,
                               const v1::RankLifecycle& l, int64_t now_ns) {
  const std::string job_id = l.job_id();
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    if (jobs_.size() >= kMaxConfigJobs) {
      return Refuse(absl::StrCat("init_failure: ", kMaxConfigJobs,
                                 " jobs with failed communicator creations "
                                 "are tracked (the cluster's ceiling)"));
    }
    size_t& mine = jobs_per_host_[std::string(host)];
    if (mine >= kMaxConfigJobsPerHost) {
      return Refuse(
          absl::StrCat("init_failure: host ", host.substr(0, 64),
                       " reported failed "
                       "communicator creations of ",
                       mine, " jobs (its share: ", kMaxConfigJobsPerHost, ")"));
    }
    ++mine;
    it = jobs_.emplace(job_id, Job()).first;
    it->second.creator = std::string(host);
  }
  Job& job = it->second;
  const std::pair<std::string, uint32_t> who{std::string(host), l.pid()};
  auto f = job.failures.find(who);
  if (f == job.failures.end()) {
    size_t& here = job.per_host[who.first];
    if (job.failures.size() >= kMaxFailuresPerJob ||
        here >= kMaxFailuresPerHostJob) {
      return Refuse(absl::StrCat(
          "init_failure: job '", job_id.substr(0, 64), "' has ",
          job.failures.size(), " failed processes, ", here, " of host ",
          host.substr(0, 64), " (shares: ", kMaxFailuresPerJob, " per job, ",
          kMaxFailuresPerHostJob, " per host)"));
    }
    ++here;
    f = job.failures.emplace(who, Failure()).first;
    f->second.global_rank = l.global_rank();
    f->second.what = l.init_failure();
    f->second.what.DiscardUnknownFields();
    owner_[who] = job_id;
    job.changed = true;
    job.last_change_ns = now_ns;
  } else if (f->second.recovered) {
    // Failed again after a success: it counts again.
    f->second.recovered = false;
    f->second.what = l.init_failure();
    job.changed = true;
    job.last_change_ns = now_ns;
  }
  return absl::OkStatus();
}

void ConfigFaults::Expire(int64_t now_ns) {
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    const Job& job = it->second;
    if (job.changed || now_ns - job.last_change_ns < kConfigJobExpiryNs) {
      ++it;
      continue;
    }
    for (const auto& [who, failure] : job.failures) {
      auto o = owner_.find(who);
      if (o != owner_.end() && o->second == it->first) owner_.erase(o);
    }
    auto c = jobs_per_host_.find(job.creator);
    if (c != jobs_per_host_.end() && --c->second == 0) jobs_per_host_.erase(c);
    it = jobs_.erase(it);
  }
}

void ConfigFaults::Created(absl::string_view host, uint32_t pid) {
  auto o = owner_.find({std::string(host), pid});
  if (o == owner_.end()) return;
  Job& job = jobs_[o->second];
  Failure& f = job.failures[o->first];
  if (!f.recovered) {
    f.recovered = true;
    job.changed = true;
  }
}

bool ConfigFaults::Failed(absl::string_view host, uint32_t pid) const {
  return owner_.count({std::string(host), pid}) > 0;
}

void ConfigFaults::NoteDeath(absl::string_view host, uint32_t pid) {
  auto o = owner_.find({std::string(host), pid});
  if (o == owner_.end()) return;
  Job& job = jobs_[o->second];
  Failure& f = job.failures[o->first];
  if (!f.died) {
    f.died = true;
    job.changed = true;
  }
}

void ConfigFaults::Raise(FaultTracker* tracker, int64_t now_ns) {
  Expire(now_ns);
  for (auto& [job_id, job] : jobs_) {
    if (!job.changed) continue;
    job.changed = false;
    const std::string key = absl::StrCat("config/", job_id);
    const bool all_recovered =
        std::all_of(job.failures.begin(), job.failures.end(),
                    [](const auto& f) { return f.second.recovered; });
    if (all_recovered) {
      tracker->Clear(key,
                     "every process that failed to create a communicator "
                     "created one since");
      continue;
    }
    // A returned error code is definitive: confirmed at once.
    tracker->Raise(key, BuildFault(job_id, job), v1::FAULT_STATE_CONFIRMED);
  }
}

v1::Fault ConfigFaults::BuildFault(const std::string& job_id, const Job& job) {
  v1::Fault f;
  f.set_fault_class(v1::FAULT_CLASS_CONFIG);
  f.set_detector("config");
  f.set_job_id(job_id);
  v1::Evidence* e = f.add_evidence();
  auto& values = *e->mutable_values();
  // Errors by (call, result, text), with the ranks that hit each.
  std::map<std::tuple<std::string, int32_t, std::string>, std::vector<int32_t>>
      errors;
  std::vector<std::string> named;
  int failing = 0;
  int died = 0;
  int32_t n_ranks = 0;
  for (const auto& [who, fl] : job.failures) {
    if (fl.recovered) continue;
    ++failing;
    died += fl.died ? 1 : 0;
    n_ranks = std::max(n_ranks, fl.what.n_ranks());
    errors[{fl.what.call(), fl.what.result(), fl.what.error()}].push_back(
        fl.global_rank);
    v1::Suspect* s = f.add_suspects();
    s->set_level(v1::SUSPECT_LEVEL_RANK);
    s->set_host(who.first);
    s->set_pid(who.second);
    s->set_global_rank(fl.global_rank);
    s->set_comm_rank(fl.what.rank());
    s->set_gpu_index(-1);
    s->set_peer_global_rank(-1);
    s->set_peer_comm_rank(-1);
    s->set_confidence(0.9);
    values[absl::StrCat("result/", who.first, "/", who.second)] =
        fl.what.result();
    if (static_cast<int>(named.size()) < kRanksNamed) {
      named.push_back(
          fl.global_rank >= 0
              ? absl::StrFormat("rank %d (%s)", fl.global_rank, who.first)
              : absl::StrFormat("pid %u (%s)", who.second, who.first));
    }
  }
  std::vector<std::string> what;
  for (const auto& [k, ranks] : errors) {
    const auto& [call, result, text] = k;
    what.push_back(absl::StrFormat(
        "%s returned %s (%d)%s on %zu rank(s)",
        call.empty() ? "comm init" : call, NcclResultName(result), result,
        text.empty() ? "" : absl::StrCat(": \"", text, "\""), ranks.size()));
    if (what.size() >= 3) break;
  }
  values["ranks_failed"] = failing;
  values["n_ranks"] = n_ranks;
  values["ranks_then_died"] = died;
  values["distinct_errors"] = static_cast<double>(errors.size());
  const std::string ranks =
      absl::StrCat(absl::StrJoin(named, ", "),
                   failing > kRanksNamed
                       ? absl::StrCat(" and ", failing - kRanksNamed, " more")
                       : "");
  f.set_summary(absl::StrFormat(
      "configuration error: communicator creation failed on %d rank(s) of "
      "job %s%s: %s; ranks: %s. A setting of the job (network interface, "
      "HCA list, firewall, a peer address or a peer that never started), "
      "not a hardware fault: no drain or migration",
      failing, job_id,
      n_ranks > 0 ? absl::StrFormat(" (communicator of %d)", n_ranks) : "",
      absl::StrJoin(what, "; "), ranks));
  e->set_text(f.summary());
  return f;
}

}  // namespace pitstop::controller
