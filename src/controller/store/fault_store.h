// Durable controller state in SQLite (WAL, synchronous=FULL): fault records
// with their lifecycle, node drains and per-job policies. Every change is one
// committed transaction, so a `kill -9` of the controller loses nothing that
// a caller was told about.
#ifndef PITSTOP_CONTROLLER_STORE_FAULT_STORE_H_
#define PITSTOP_CONTROLLER_STORE_FAULT_STORE_H_

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

struct sqlite3;

namespace pitstop::controller {

// Thread-safe: every method may be called from any thread (one mutex).
class FaultStore {
 public:
  // Opens or creates the database at `path` (":memory:" works for tests).
  // Holds an exclusive flock on `path` + ".lock" while the store lives, so
  // one process at a time uses a database. FailedPrecondition when the
  // directory is missing or another process holds the lock; Internal with
  // the SQLite message (naming the path) on other failures.
  static absl::StatusOr<std::unique_ptr<FaultStore>> Open(
      const std::string& path);
  ~FaultStore();

  // Records the detection engine's view of a fault, keeping what operators
  // did: an ACKNOWLEDGED fault stays acknowledged while the engine still
  // reports it SUSPECTED/CONFIRMED; a RESOLVED one is never reopened (the
  // stored record is returned unchanged; `*ignored` is set then).
  absl::StatusOr<v1::Fault> Upsert(const v1::Fault& fault, bool* ignored);

  // NotFound("fault F12 not found") for an unknown id.
  absl::StatusOr<v1::Fault> Get(absl::string_view fault_id) const;
  // Newest first. job_id empty = all; limit 0 = no limit.
  absl::StatusOr<std::vector<v1::Fault>> List(absl::string_view job_id,
                                              bool include_resolved,
                                              uint32_t limit) const;
  // SUSPECTED/CONFIRMED -> ACKNOWLEDGED (idempotent when acknowledged);
  // FailedPrecondition from MITIGATING or RESOLVED.
  absl::StatusOr<v1::Fault> Acknowledge(absl::string_view fault_id,
                                        absl::string_view who,
                                        absl::string_view note,
                                        uint64_t now_unix_ns);
  // Any open state -> RESOLVED (idempotent when resolved).
  absl::StatusOr<v1::Fault> Resolve(absl::string_view fault_id,
                                    absl::string_view who,
                                    absl::string_view note,
                                    uint64_t now_unix_ns);
  // 1 + the largest numeric suffix of stored fault ids.
  uint64_t NextFaultNumber() const;
  uint32_t OpenCount() const;

  absl::Status SetDrain(absl::string_view host, absl::string_view reason);
  absl::Status ClearDrain(absl::string_view host);
  std::map<std::string, std::string> Drains() const;

  absl::Status SavePolicy(absl::string_view job_id, const v1::JobPolicy& p);
  std::map<std::string, v1::JobPolicy> Policies() const;

  const std::string& path() const { return path_; }

 private:
  FaultStore(sqlite3* db, std::string path, int lock_fd);
  absl::Status Exec(const char* sql) const;
  absl::StatusOr<v1::Fault> GetLocked(absl::string_view id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PutLocked(const v1::Fault& f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_);
  const std::string path_;
  const int lock_fd_;  // flock(LOCK_EX) on path_ + ".lock"; -1 for :memory:
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_STORE_FAULT_STORE_H_
