// Durable controller state: fault records with their lifecycle, node
// drains, per-job policies and the hosts a scheduler named per job. Two
// implementations: SqliteFaultStore (one controller, the default) and
// EtcdFaultStore (several controllers on etcd, src/controller/ha/), whose
// writes are fenced by the leader's lease. Every change is durable before a
// method returns, so a `kill -9` of the controller loses nothing that a caller
// was told about.
#ifndef PITSTOP_CONTROLLER_STORE_FAULT_STORE_H_
#define PITSTOP_CONTROLLER_STORE_FAULT_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "pitstop/v1/controller.pb.h"

namespace pitstop::controller {

// A job's C4P flow plan as stored: the plan's epoch and its encoding
// (src/c4p/plan_codec.h; the store does not look inside).
struct StoredPlan {
  std::string job_id;
  uint64_t epoch = 0;
  std::string data;
};

// Implementations are thread-safe: every method may be called from any
// thread. A write refused because this controller no longer leads (etcd
// fencing) returns Unavailable; callers treat it like any store failure.
class FaultStore {
 public:
  // Opens or creates the SQLite database at `path` (":memory:" works for
  // tests); see SqliteFaultStore::Open.
  static absl::StatusOr<std::unique_ptr<FaultStore>> Open(
      const std::string& path);
  virtual ~FaultStore() = default;

  // Records the detection engine's view of a fault, keeping what operators
  // did: an ACKNOWLEDGED fault stays acknowledged while the engine still
  // reports it SUSPECTED/CONFIRMED; a RESOLVED one is never reopened (the
  // stored record is returned unchanged; `*ignored` is set then).
  virtual absl::StatusOr<v1::Fault> Upsert(const v1::Fault& fault,
                                           bool* ignored) = 0;

  // NotFound("fault F12 not found") for an unknown id.
  virtual absl::StatusOr<v1::Fault> Get(absl::string_view fault_id) const = 0;
  // Newest first. job_id empty = all; limit 0 = no limit.
  virtual absl::StatusOr<std::vector<v1::Fault>> List(absl::string_view job_id,
                                                      bool include_resolved,
                                                      uint32_t limit) const = 0;
  // SUSPECTED/CONFIRMED -> ACKNOWLEDGED (idempotent when acknowledged);
  // FailedPrecondition from MITIGATING or RESOLVED.
  virtual absl::StatusOr<v1::Fault> Acknowledge(absl::string_view fault_id,
                                                absl::string_view who,
                                                absl::string_view note,
                                                uint64_t now_unix_ns) = 0;
  // Any open state -> RESOLVED (idempotent when resolved).
  virtual absl::StatusOr<v1::Fault> Resolve(absl::string_view fault_id,
                                            absl::string_view who,
                                            absl::string_view note,
                                            uint64_t now_unix_ns) = 0;
  // 1 + the largest numeric suffix of stored fault ids.
  virtual uint64_t NextFaultNumber() const = 0;
  virtual uint32_t OpenCount() const = 0;

  virtual absl::Status SetDrain(absl::string_view host,
                                absl::string_view reason) = 0;
  virtual absl::Status ClearDrain(absl::string_view host) = 0;
  virtual std::map<std::string, std::string> Drains() const = 0;

  virtual absl::Status SavePolicy(absl::string_view job_id,
                                  const v1::JobPolicy& p) = 0;
  virtual std::map<std::string, v1::JobPolicy> Policies() const = 0;

  // The trainer policies' per-job settings as an operator set them (zero
  // fields = the controller's default), so a restart or a failover keeps
  // them: the local-SGD switch (SetSyncPolicy, src/controller/trainers/) and
  // multi-LoRA rescheduling (SetLoraPolicy, src/controller/trainers/lora/).
  // Save* replaces the job's; InvalidArgument for an empty job id. The readers
  // return every job's, by job id (an error, unlike Policies(), so a new
  // leader does not start from defaults because etcd did not answer).
  virtual absl::Status SaveSyncPolicy(absl::string_view job_id,
                                      const v1::SyncSettings& s) = 0;
  virtual absl::StatusOr<std::map<std::string, v1::SyncSettings>> SyncPolicies()
      const = 0;
  virtual absl::Status SaveLoraPolicy(absl::string_view job_id,
                                      const v1::LoraSettings& s) = 0;
  virtual absl::StatusOr<std::map<std::string, v1::LoraSettings>> LoraPolicies()
      const = 0;

  // The hosts a scheduler named for each job (IngestService::SetJobHosts),
  // so a restarted controller or a new leader enforces them: SaveJobHosts
  // replaces the job's naming, and one with no hosts deletes it;
  // InvalidArgument for an empty job id. ScheduledHosts returns every job's,
  // by job id (an error, like SyncPolicies: a new leader must not start
  // with every job open to any host because etcd did not answer).
  virtual absl::Status SaveJobHosts(const v1::SetJobHostsRequest& naming) = 0;
  virtual absl::StatusOr<std::map<std::string, v1::SetJobHostsRequest>>
  ScheduledHosts() const = 0;

  // Migration records (src/controller/migration/), keyed by migration_id:
  // SaveMigration inserts or replaces one; Migrations returns all, oldest
  // (lowest number) first.
  virtual absl::Status SaveMigration(const v1::Migration& m) = 0;
  virtual absl::StatusOr<std::vector<v1::Migration>> Migrations() const = 0;

  // Flow plans (src/c4p/), one per job, the newest epoch:
  // SavePlan replaces the job's plan unless the stored one has a higher
  // epoch (FailedPrecondition naming both: a re-plan that lost a race must
  // not undo a newer one); the same epoch replaces it. InvalidArgument for
  // an empty job id. Plans returns every job's, by job id.
  virtual absl::Status SavePlan(const StoredPlan& plan) = 0;
  virtual absl::StatusOr<std::vector<StoredPlan>> Plans() const = 0;

  // Where the state lives: the database path, or "etcd:ENDPOINTS PREFIX".
  virtual const std::string& path() const = 0;
};

// Shared by the implementations: the numeric suffix of a fault id ("F12"
// -> 12; 0 without one).
int64_t FaultNumberOf(absl::string_view fault_id);
// SavePlan's checks, shared by the stores: InvalidArgument for an empty job
// id; FailedPrecondition when `stored_epoch` (of a stored plan) is newer.
absl::Status CheckPlanWrite(const StoredPlan& plan, bool has_stored,
                            uint64_t stored_epoch);

// Parses each job's serialized record (the sync / LoRA settings);
// DataLoss naming `path`, `what` and the job for one that does not parse.
template <typename Record>
absl::StatusOr<std::map<std::string, Record>> DecodeJobRecords(
    absl::string_view path, absl::string_view what,
    const std::map<std::string, std::string>& rows) {
  std::map<std::string, Record> out;
  for (const auto& [job, data] : rows) {
    if (!out[job].ParseFromString(data)) {
      return absl::DataLossError(absl::StrCat(path, ": ", what, " of job ", job,
                                              ": undecodable record"));
    }
  }
  return out;
}

// The state transitions both stores apply (pure functions over records, so
// SQLite and etcd behave the same). MergeUpsert returns the record to store
// given the stored one (nullptr = none) or sets *ignored for a resolved one.
v1::Fault MergeUpsert(const v1::Fault* old, const v1::Fault& fault,
                      bool* ignored);
// Acknowledge/Resolve applied to `f`; false when nothing changes (already in
// that state). Acknowledge: FailedPrecondition from MITIGATING/RESOLVED.
absl::StatusOr<bool> ApplyAcknowledge(v1::Fault* f, absl::string_view who,
                                      absl::string_view note,
                                      uint64_t now_unix_ns);
bool ApplyResolve(v1::Fault* f, absl::string_view who, absl::string_view note,
                  uint64_t now_unix_ns);

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_STORE_FAULT_STORE_H_
