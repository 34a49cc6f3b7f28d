// FaultStore in SQLite (WAL, synchronous=FULL): every change is one
// committed transaction. The default store of a single controller.
#ifndef PITSTOP_CONTROLLER_STORE_SQLITE_FAULT_STORE_H_
#define PITSTOP_CONTROLLER_STORE_SQLITE_FAULT_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pitstop/sync.h"
#include "pitstop/v1/controller.pb.h"
#include "src/controller/store/fault_store.h"

struct sqlite3;

namespace pitstop::controller {

// Thread-safe: every method may be called from any thread (one mutex).
class SqliteFaultStore final : public FaultStore {
 public:
  // Opens or creates the database at `path` (":memory:" works for tests).
  // Holds an exclusive flock on `path` + ".lock" while the store lives, so
  // one process at a time uses a database. FailedPrecondition when the
  // directory is missing or another process holds the lock; Internal with
  // the SQLite message (naming the path) on other failures.
  static absl::StatusOr<std::unique_ptr<SqliteFaultStore>> Open(
      const std::string& path);
  ~SqliteFaultStore() override;

  // Records the detection engine's view of a fault, keeping what operators
  // did: an ACKNOWLEDGED fault stays acknowledged while the engine still
  // reports it SUSPECTED/CONFIRMED; a RESOLVED one is never reopened (the
  // stored record is returned unchanged; `*ignored` is set then).
  absl::StatusOr<v1::Fault> Upsert(const v1::Fault& fault,
                                   bool* ignored) override;

  // NotFound("fault F12 not found") for an unknown id.
  absl::StatusOr<v1::Fault> Get(absl::string_view fault_id) const override;
  // Newest first. job_id empty = all; limit 0 = no limit.
  absl::StatusOr<std::vector<v1::Fault>> List(absl::string_view job_id,
                                              bool include_resolved,
                                              uint32_t limit) const override;
  // SUSPECTED/CONFIRMED -> ACKNOWLEDGED (idempotent when acknowledged);
  // FailedPrecondition from MITIGATING or RESOLVED.
  absl::StatusOr<v1::Fault> Acknowledge(absl::string_view fault_id,
                                        absl::string_view who,
                                        absl::string_view note,
                                        uint64_t now_unix_ns) override;
  // Any open state -> RESOLVED (idempotent when resolved).
  absl::StatusOr<v1::Fault> Resolve(absl::string_view fault_id,
                                    absl::string_view who,
                                    absl::string_view note,
                                    uint64_t now_unix_ns) override;
  // 1 + the largest numeric suffix of stored fault ids.
  uint64_t NextFaultNumber() const override;
  uint32_t OpenCount() const override;

  absl::Status SetDrain(absl::string_view host,
                        absl::string_view reason) override;
  absl::Status ClearDrain(absl::string_view host) override;
  std::map<std::string, std::string> Drains() const override;

  absl::Status SavePolicy(absl::string_view job_id,
                          const v1::JobPolicy& p) override;
  std::map<std::string, v1::JobPolicy> Policies() const override;
  absl::Status SaveSyncPolicy(absl::string_view job_id,
                              const v1::SyncSettings& s) override;
  absl::StatusOr<std::map<std::string, v1::SyncSettings>> SyncPolicies()
      const override;
  absl::Status SaveLoraPolicy(absl::string_view job_id,
                              const v1::LoraSettings& s) override;
  absl::StatusOr<std::map<std::string, v1::LoraSettings>> LoraPolicies()
      const override;
  absl::Status SaveJobHosts(const v1::SetJobHostsRequest& naming) override;
  absl::StatusOr<std::map<std::string, v1::SetJobHostsRequest>> ScheduledHosts()
      const override;
  absl::Status SaveMigration(const v1::Migration& m) override;
  absl::StatusOr<std::vector<v1::Migration>> Migrations() const override;
  absl::Status SavePlan(const StoredPlan& plan) override;
  absl::StatusOr<std::vector<StoredPlan>> Plans() const override;

  const std::string& path() const override { return path_; }

 private:
  SqliteFaultStore(sqlite3* db, std::string path, int lock_fd);
  absl::Status Exec(const char* sql) const;
  absl::StatusOr<v1::Fault> GetLocked(absl::string_view id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PutLocked(const v1::Fault& f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One row of a (job_id, data) table: the sync / LoRA settings.
  absl::Status PutJobRow(const char* table, absl::string_view job_id,
                         const std::string& data);
  absl::StatusOr<std::map<std::string, std::string>> JobRows(
      const char* table) const;

  mutable Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_);
  const std::string path_;
  const int lock_fd_;  // flock(LOCK_EX) on path_ + ".lock"; -1 for :memory:
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_STORE_SQLITE_FAULT_STORE_H_
