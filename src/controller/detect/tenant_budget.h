// Shares of one budget of the detection engine (members, communicators,
// summaries in open joins) between tenants (docs/reliability.md, "Trust
// model"). Every unit is charged to a host and a job; a charge is refused
// when it would take the host past its share, the host past its share of
// that one job, the job past its share, or the cluster past its ceiling. So
// a host (or a job) that floods the controller uses up its own share, and
// the others keep theirs; a job's share takes per_job / per_host_job hosts
// to fill (issue #33: 5 hosts running none of a job's ranks filled its
// share). Units of no job ("") are each host's own: the (host, "") bucket,
// bounded by per_host_job, never one bucket shared by every id-less job.
//
// A job the scheduler placed on a host is sheltered there (Shelter): its
// units on that host are not asked of the host's share (still counted in
// it), so tenants of the host that fill its share (a node's processes
// naming jobs of their own making, issue #33 R21-4) do not starve the job;
// the host's share of the job, the job's share and the ceiling still hold.
//
// Hosts are interned (HostIds): a charge names its host by its id, so a
// member carries 4 bytes of owner instead of a string.
//
// Not thread-safe: the engine's caller serialises it (like the engine).
#ifndef PITSTOP_CONTROLLER_DETECT_TENANT_BUDGET_H_
#define PITSTOP_CONTROLLER_DETECT_TENANT_BUDGET_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pitstop::controller {

// host name <-> small id, for every host the engine charged (ids are never
// reused: at most one per host that ever reported, and hosts are bounded by
// the controller's max_hosts).
class HostIds {
 public:
  uint32_t Id(absl::string_view host);
  const std::string& Name(uint32_t id) const { return names_[id]; }

 private:
  std::vector<std::string> names_;
  absl::flat_hash_map<std::string, uint32_t> ids_;
};

class TenantBudget {
 public:
  struct Limits {
    uint64_t total = 0;     // the cluster's ceiling
    uint64_t per_host = 0;  // one host's share
    uint64_t per_job = 0;   // one job's share (job "": see per_host_job)
    // One host's share of one job; of job "", the host's whole bucket.
    uint64_t per_host_job = 0;
  };
  // Charges each share refused, cumulative.
  struct Refusals {
    uint64_t host = 0;
    uint64_t job = 0;
    uint64_t host_job = 0;
    uint64_t total = 0;
  };

  // `option` ("max_members") names the budget in refusals; its shares are
  // `option`_per_host and `option`_per_job. `hosts` names the ids (not
  // owned, outlives this).
  TenantBudget(std::string option, Limits limits, const HostIds* hosts);

  // Charges `n` units to (host, job) when every share allows it. Otherwise
  // charges nothing, counts the refusal and returns ResourceExhausted naming
  // the share ("host h holds 262144 (its share, max_members_per_host);
  // refused").
  absl::Status Charge(uint32_t host, absl::string_view job, uint64_t n);
  // The hosts on which `job`'s units skip the host's share (the hosts its
  // scheduler named; empty: none). Replaces the job's earlier set.
  void Shelter(absl::string_view job, absl::flat_hash_set<uint32_t> hosts);
  // Gives `n` units of (host, job) back.
  void Release(uint32_t host, absl::string_view job, uint64_t n);
  // Moves `n` units of `host` from a job to another (a communicator learned
  // its job): never refused, the units exist already.
  void MoveJob(uint32_t host, absl::string_view from, absl::string_view to,
               uint64_t n);

  uint64_t used() const { return used_; }
  uint64_t host_used(uint32_t host) const;
  // 0 for job "" (each host's "" units are in host_job_used).
  uint64_t job_used(absl::string_view job) const;
  uint64_t host_job_used(uint32_t host, absl::string_view job) const;
  const Refusals& refusals() const { return refusals_; }
  uint64_t refused() const {
    return refusals_.host + refusals_.job + refusals_.host_job +
           refusals_.total;
  }
  const Limits& limits() const { return limits_; }

 private:
  const std::string option_;
  const Limits limits_;
  const HostIds* const hosts_;
  uint64_t used_ = 0;
  absl::flat_hash_map<uint32_t, uint64_t> by_host_;
  absl::flat_hash_map<std::string, uint64_t> by_job_;  // never ""
  absl::flat_hash_map<std::pair<uint32_t, std::string>, uint64_t> by_host_job_;
  absl::flat_hash_map<std::string, absl::flat_hash_set<uint32_t>> sheltered_;
  Refusals refusals_;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_DETECT_TENANT_BUDGET_H_
