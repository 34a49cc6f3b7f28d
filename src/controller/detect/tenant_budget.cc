#include "src/controller/detect/tenant_budget.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pitstop::controller {
namespace {

// Subtracts without wrapping; drops the entry at zero (tenants that left
// cost nothing).
template <typename Map, typename Key>
void Take(Map* m, const Key& key, uint64_t n) {
  auto it = m->find(key);
  if (it == m->end()) return;
  it->second -= std::min(it->second, n);
  if (it->second == 0) m->erase(it);
}

}  // namespace

uint32_t HostIds::Id(absl::string_view host) {
  auto [it, fresh] =
      ids_.try_emplace(host, static_cast<uint32_t>(names_.size()));
  if (fresh) names_.emplace_back(host);
  return it->second;
}

TenantBudget::TenantBudget(std::string option, Limits limits,
                           const HostIds* hosts)
    : option_(std::move(option)), limits_(limits), hosts_(hosts) {}

uint64_t TenantBudget::host_used(uint32_t host) const {
  auto it = by_host_.find(host);
  return it == by_host_.end() ? 0 : it->second;
}

uint64_t TenantBudget::job_used(absl::string_view job) const {
  auto it = by_job_.find(job);
  return it == by_job_.end() ? 0 : it->second;
}

uint64_t TenantBudget::host_job_used(uint32_t host,
                                     absl::string_view job) const {
  auto it = by_host_job_.find(std::make_pair(host, std::string(job)));
  return it == by_host_job_.end() ? 0 : it->second;
}

absl::Status TenantBudget::Charge(uint32_t host, absl::string_view job,
                                  uint64_t n) {
  const uint64_t h = host_used(host);
  const uint64_t hj = host_job_used(host, job);
  const uint64_t j = job_used(job);
  const absl::string_view name =
      absl::string_view(hosts_->Name(host)).substr(0, 64);
  auto shelter = sheltered_.find(job);
  const bool sheltered =
      shelter != sheltered_.end() && shelter->second.contains(host);
  if (!sheltered && h + n > limits_.per_host) {
    ++refusals_.host;
    return absl::ResourceExhaustedError(absl::StrCat(
        "host ", name, " holds ", h, " of ", limits_.per_host, " (its share, ",
        option_, "_per_host); ", n, " more refused"));
  }
  if (hj + n > limits_.per_host_job) {
    ++refusals_.host_job;
    return absl::ResourceExhaustedError(absl::StrCat(
        "host ", name, " holds ", hj, " of job '", job.substr(0, 64), "' of ",
        limits_.per_host_job, " (its share of one job, ", option_,
        "_per_host_job); ", n, " more refused"));
  }
  if (!job.empty() && j + n > limits_.per_job) {
    ++refusals_.job;
    return absl::ResourceExhaustedError(absl::StrCat(
        "job '", job.substr(0, 64), "' holds ", j, " of ", limits_.per_job,
        " (its share, ", option_, "_per_job); ", n, " more refused"));
  }
  if (used_ + n > limits_.total) {
    ++refusals_.total;
    return absl::ResourceExhaustedError(
        absl::StrCat("the controller holds ", used_, " of ", limits_.total,
                     " (budget ", option_, "); ", n, " more refused"));
  }
  used_ += n;
  by_host_[host] += n;
  by_host_job_[std::make_pair(host, std::string(job))] += n;
  if (!job.empty()) by_job_[job] += n;
  return absl::OkStatus();
}

void TenantBudget::Shelter(absl::string_view job,
                           absl::flat_hash_set<uint32_t> hosts) {
  if (hosts.empty()) {
    sheltered_.erase(job);
  } else {
    sheltered_[job] = std::move(hosts);
  }
}

void TenantBudget::Release(uint32_t host, absl::string_view job, uint64_t n) {
  used_ -= std::min(used_, n);
  Take(&by_host_, host, n);
  Take(&by_host_job_, std::make_pair(host, std::string(job)), n);
  if (!job.empty()) Take(&by_job_, std::string(job), n);
}

void TenantBudget::MoveJob(uint32_t host, absl::string_view from,
                           absl::string_view to, uint64_t n) {
  if (n == 0 || from == to) return;
  Take(&by_host_job_, std::make_pair(host, std::string(from)), n);
  by_host_job_[std::make_pair(host, std::string(to))] += n;
  if (!from.empty()) Take(&by_job_, std::string(from), n);
  if (!to.empty()) by_job_[to] += n;
}

}  // namespace pitstop::controller
