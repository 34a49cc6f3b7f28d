#include "src/controller/store/sqlite_fault_store.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "src/controller/store/sqlite_stmt.h"

namespace pitstop::controller {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS faults (
  fault_id TEXT PRIMARY KEY,
  number INTEGER NOT NULL,
  job_id TEXT NOT NULL,
  state INTEGER NOT NULL,
  first_seen_unix_ns INTEGER NOT NULL,
  data BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS faults_by_job ON faults(job_id, state);
CREATE TABLE IF NOT EXISTS drains (host TEXT PRIMARY KEY, reason TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS policies (job_id TEXT PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS migrations (
  migration_id TEXT PRIMARY KEY,
  number INTEGER NOT NULL,
  data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS sync_policies (
  job_id TEXT PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS lora_policies (
  job_id TEXT PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS job_hosts (
  job_id TEXT PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS plans (
  job_id TEXT PRIMARY KEY,
  epoch INTEGER NOT NULL,
  data BLOB NOT NULL);
)sql";

absl::Status NotFound(absl::string_view id) {
  return absl::NotFoundError(absl::StrCat("fault ", id, " not found"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteFaultStore>> SqliteFaultStore::Open(
    const std::string& path) {
  const bool in_memory = path == ":memory:" || path.empty();
  int lock_fd = -1;
  if (!in_memory) {
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!dir.empty() && !std::filesystem::is_directory(dir, ec)) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot open database ", path, ": directory ",
                       dir.string(), " does not exist"));
    }
    // One controller per database: a second one would hand out the same
    // fault ids. The lock lives as long as the store (and the process).
    const std::string lock_path = path + ".lock";
    lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd < 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot open database lock ", lock_path, ": ", std::strerror(errno)));
    }
    if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(lock_fd);
      return absl::FailedPreconditionError(
          err == EWOULDBLOCK
              ? absl::StrCat("database ", path,
                             " is in use by another pitstop-controller "
                             "(lock ",
                             lock_path, " is held)")
              : absl::StrCat("cannot lock ", lock_path, ": ",
                             std::strerror(err)));
    }
  }
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db,
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
      nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    if (lock_fd >= 0) ::close(lock_fd);
    return absl::InternalError(
        absl::StrCat("cannot open database ", path, ": ", msg));
  }
  sqlite3_busy_timeout(db, 5000);
  auto store = std::unique_ptr<SqliteFaultStore>(
      new SqliteFaultStore(db, path, lock_fd));
  for (const char* sql :
       {"PRAGMA journal_mode=WAL;", "PRAGMA synchronous=FULL;", kSchema}) {
    if (absl::Status s = store->Exec(sql); !s.ok()) {
      return absl::InternalError(absl::StrCat(path, ": ", s.message()));
    }
  }
  return store;
}

SqliteFaultStore::SqliteFaultStore(sqlite3* db, std::string path, int lock_fd)
    : db_(db), path_(std::move(path)), lock_fd_(lock_fd) {}

SqliteFaultStore::~SqliteFaultStore() {
  MutexLock lock(&mu_);
  sqlite3_close(db_);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

absl::Status SqliteFaultStore::Exec(const char* sql) const {
  MutexLock lock(&mu_);
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    absl::Status s = absl::InternalError(absl::StrCat("sqlite: ", err));
    sqlite3_free(err);
    return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Fault> SqliteFaultStore::GetLocked(
    absl::string_view id) const {
  SqliteStmt q(db_, "SELECT data FROM faults WHERE fault_id = ?1");
  q.Bind(1, id);
  const int rc = q.Step();
  if (rc == SQLITE_DONE) return NotFound(id);
  if (rc != SQLITE_ROW) return q.Error(rc);
  v1::Fault f;
  if (!f.ParseFromString(q.Blob(0))) {
    return absl::DataLossError(
        absl::StrCat(path_, ": fault ", id, ": undecodable record"));
  }
  return f;
}

absl::Status SqliteFaultStore::PutLocked(const v1::Fault& f) {
  SqliteStmt q(db_,
               "INSERT OR REPLACE INTO faults(fault_id, number, job_id, state, "
               "first_seen_unix_ns, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  q.Bind(1, f.fault_id());
  q.Bind(2, FaultNumberOf(f.fault_id()));
  q.Bind(3, f.job_id());
  q.Bind(4, static_cast<int64_t>(f.state()));
  q.Bind(5, static_cast<int64_t>(f.first_seen_unix_ns()));
  q.BindBlob(6, f.SerializeAsString());
  return q.Run();
}

absl::StatusOr<v1::Fault> SqliteFaultStore::Upsert(const v1::Fault& fault,
                                                   bool* ignored) {
  if (fault.fault_id().empty()) {
    return absl::InvalidArgumentError("fault.fault_id: empty");
  }
  MutexLock lock(&mu_);
  absl::StatusOr<v1::Fault> old = GetLocked(fault.fault_id());
  if (!old.ok() && !absl::IsNotFound(old.status())) return old.status();
  v1::Fault next = MergeUpsert(old.ok() ? &*old : nullptr, fault, ignored);
  if (*ignored) return next;
  if (absl::Status s = PutLocked(next); !s.ok()) return s;
  return next;
}

absl::StatusOr<v1::Fault> SqliteFaultStore::Get(
    absl::string_view fault_id) const {
  MutexLock lock(&mu_);
  return GetLocked(fault_id);
}

absl::StatusOr<std::vector<v1::Fault>> SqliteFaultStore::List(
    absl::string_view job_id, bool include_resolved, uint32_t limit) const {
  MutexLock lock(&mu_);
  SqliteStmt q(db_,
               "SELECT data FROM faults WHERE (?1 = '' OR job_id = ?1) AND "
               "(?2 OR state != ?3) ORDER BY number DESC LIMIT ?4");
  q.Bind(1, job_id);
  q.Bind(2, static_cast<int64_t>(include_resolved));
  q.Bind(3, static_cast<int64_t>(v1::FAULT_STATE_RESOLVED));
  q.Bind(4, limit == 0 ? int64_t{-1} : static_cast<int64_t>(limit));
  std::vector<v1::Fault> out;
  for (int rc = q.Step();; rc = q.Step()) {
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) return q.Error(rc);
    if (!out.emplace_back().ParseFromString(q.Blob(0))) {
      return absl::DataLossError(absl::StrCat(path_, ": undecodable fault"));
    }
  }
  return out;
}

absl::StatusOr<v1::Fault> SqliteFaultStore::Acknowledge(
    absl::string_view fault_id, absl::string_view who, absl::string_view note,
    uint64_t now_unix_ns) {
  MutexLock lock(&mu_);
  absl::StatusOr<v1::Fault> f = GetLocked(fault_id);
  if (!f.ok()) return f.status();
  absl::StatusOr<bool> changed = ApplyAcknowledge(&*f, who, note, now_unix_ns);
  if (!changed.ok()) return changed.status();
  if (!*changed) return f;
  if (absl::Status s = PutLocked(*f); !s.ok()) return s;
  return f;
}

absl::StatusOr<v1::Fault> SqliteFaultStore::Resolve(absl::string_view fault_id,
                                                    absl::string_view who,
                                                    absl::string_view note,
                                                    uint64_t now_unix_ns) {
  MutexLock lock(&mu_);
  absl::StatusOr<v1::Fault> f = GetLocked(fault_id);
  if (!f.ok()) return f.status();
  if (!ApplyResolve(&*f, who, note, now_unix_ns)) return f;
  if (absl::Status s = PutLocked(*f); !s.ok()) return s;
  return f;
}

uint64_t SqliteFaultStore::NextFaultNumber() const {
  MutexLock lock(&mu_);
  SqliteStmt q(db_, "SELECT COALESCE(MAX(number), 0) FROM faults");
  return q.Step() == SQLITE_ROW ? static_cast<uint64_t>(q.Int(0)) + 1 : 1;
}

uint32_t SqliteFaultStore::OpenCount() const {
  MutexLock lock(&mu_);
  SqliteStmt q(db_, "SELECT COUNT(*) FROM faults WHERE state != ?1");
  q.Bind(1, static_cast<int64_t>(v1::FAULT_STATE_RESOLVED));
  return q.Step() == SQLITE_ROW ? static_cast<uint32_t>(q.Int(0)) : 0;
}

absl::Status SqliteFaultStore::SetDrain(absl::string_view host,
                                        absl::string_view reason) {
  MutexLock lock(&mu_);
  SqliteStmt q(db_,
               "INSERT OR REPLACE INTO drains(host, reason) VALUES (?1, ?2)");
  q.Bind(1, host);
  q.Bind(2, reason);
  return q.Run();
}

absl::Status SqliteFaultStore::ClearDrain(absl::string_view host) {
  MutexLock lock(&mu_);
  SqliteStmt q(db_, "DELETE FROM drains WHERE host = ?1");
  q.Bind(1, host);
  return q.Run();
}

std::map<std::string, std::string> SqliteFaultStore::Drains() const {
  MutexLock lock(&mu_);
  std::map<std::string, std::string> out;
  SqliteStmt q(db_, "SELECT host, reason FROM drains");
  while (q.Step() == SQLITE_ROW) out[q.Text(0)] = q.Text(1);
  return out;
}

absl::Status SqliteFaultStore::SavePolicy(absl::string_view job_id,
                                          const v1::JobPolicy& p) {
  MutexLock lock(&mu_);
  SqliteStmt q(db_,
               "INSERT OR REPLACE INTO policies(job_id, data) VALUES (?1, ?2)");
  q.Bind(1, job_id);
  q.BindBlob(2, p.SerializeAsString());
  return q.Run();
}

std::map<std::string, v1::JobPolicy> SqliteFaultStore::Policies() const {
  MutexLock lock(&mu_);
  std::map<std::string, v1::JobPolicy> out;
  SqliteStmt q(db_, "SELECT job_id, data FROM policies");
  while (q.Step() == SQLITE_ROW) out[q.Text(0)].ParseFromString(q.Blob(1));
  return out;
}

absl::Status SqliteFaultStore::PutJobRow(const char* table,
                                         absl::string_view job_id,
                                         const std::string& data) {
  if (job_id.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(table, ": empty job id"));
  }
  MutexLock lock(&mu_);
  SqliteStmt q(db_, absl::StrCat("INSERT OR REPLACE INTO ", table,
                                 "(job_id, data) VALUES (?1, ?2)")
                        .c_str());
  q.Bind(1, job_id);
  q.BindBlob(2, data);
  return q.Run();
}

absl::StatusOr<std::map<std::string, std::string>> SqliteFaultStore::JobRows(
    const char* table) const {
  MutexLock lock(&mu_);
  SqliteStmt q(db_, absl::StrCat("SELECT job_id, data FROM ", table).c_str());
  std::map<std::string, std::string> out;
  for (int rc = q.Step();; rc = q.Step()) {
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) return q.Error(rc);
    out[q.Text(0)] = q.Blob(1);
  }
  return out;
}

absl::Status SqliteFaultStore::SaveSyncPolicy(absl::string_view job_id,
                                              const v1::SyncSettings& s) {
  return PutJobRow("sync_policies", job_id, s.SerializeAsString());
}

absl::Status SqliteFaultStore::SaveLoraPolicy(absl::string_view job_id,
                                              const v1::LoraSettings& s) {
  return PutJobRow("lora_policies", job_id, s.SerializeAsString());
}

absl::StatusOr<std::map<std::string, v1::SyncSettings>>
SqliteFaultStore::SyncPolicies() const {
  absl::StatusOr<std::map<std::string, std::string>> rows =
      JobRows("sync_policies");
  if (!rows.ok()) return rows.status();
  return DecodeJobRecords<v1::SyncSettings>(path_, "sync policy", *rows);
}

absl::StatusOr<std::map<std::string, v1::LoraSettings>>
SqliteFaultStore::LoraPolicies() const {
  absl::StatusOr<std::map<std::string, std::string>> rows =
      JobRows("lora_policies");
  if (!rows.ok()) return rows.status();
  return DecodeJobRecords<v1::LoraSettings>(path_, "lora policy", *rows);
}

absl::Status SqliteFaultStore::SaveJobHosts(
    const v1::SetJobHostsRequest& naming) {
  if (!naming.hosts().empty()) {
    return PutJobRow("job_hosts", naming.job_id(), naming.SerializeAsString());
  }
  if (naming.job_id().empty()) {
    return absl::InvalidArgumentError("job_hosts: empty job id");
  }
  MutexLock lock(&mu_);
  SqliteStmt q(db_, "DELETE FROM job_hosts WHERE job_id = ?1");
  q.Bind(1, naming.job_id());
  return q.Run();
}

absl::StatusOr<std::map<std::string, v1::SetJobHostsRequest>>
SqliteFaultStore::ScheduledHosts() const {
  absl::StatusOr<std::map<std::string, std::string>> rows =
      JobRows("job_hosts");
  if (!rows.ok()) return rows.status();
  return DecodeJobRecords<v1::SetJobHostsRequest>(path_, "job hosts", *rows);
}

absl::Status SqliteFaultStore::SaveMigration(const v1::Migration& m) {
  if (m.migration_id().empty()) {
    return absl::InvalidArgumentError("migration.migration_id: empty");
  }
  MutexLock lock(&mu_);
  SqliteStmt q(db_,
               "INSERT OR REPLACE INTO migrations(migration_id, number, data) "
               "VALUES (?1, ?2, ?3)");
  q.Bind(1, m.migration_id());
  q.Bind(2, FaultNumberOf(m.migration_id()));
  q.BindBlob(3, m.SerializeAsString());
  return q.Run();
}

absl::StatusOr<std::vector<v1::Migration>> SqliteFaultStore::Migrations()
    const {
  MutexLock lock(&mu_);
  SqliteStmt q(db_, "SELECT data FROM migrations ORDER BY number");
  std::vector<v1::Migration> out;
  for (int rc = q.Step();; rc = q.Step()) {
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) return q.Error(rc);
    if (!out.emplace_back().ParseFromString(q.Blob(0))) {
      return absl::DataLossError(
          absl::StrCat(path_, ": undecodable migration record"));
    }
  }
  return out;
}

absl::Status SqliteFaultStore::SavePlan(const StoredPlan& plan) {
  MutexLock lock(&mu_);
  // One controller per database (the lock file) and one writer (mu_): the
  // read and the write below cannot interleave with another write.
  SqliteStmt read(db_, "SELECT epoch FROM plans WHERE job_id = ?1");
  read.Bind(1, plan.job_id);
  const int rc = read.Step();
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return read.Error(rc);
  const bool has_stored = rc == SQLITE_ROW;
  const uint64_t stored = has_stored ? static_cast<uint64_t>(read.Int(0)) : 0;
  if (absl::Status s = CheckPlanWrite(plan, has_stored, stored); !s.ok()) {
    return s;
  }
  SqliteStmt q(db_,
               "INSERT OR REPLACE INTO plans(job_id, epoch, data) "
               "VALUES (?1, ?2, ?3)");
  q.Bind(1, plan.job_id);
  q.Bind(2, static_cast<int64_t>(plan.epoch));
  q.BindBlob(3, plan.data);
  return q.Run();
}

absl::StatusOr<std::vector<StoredPlan>> SqliteFaultStore::Plans() const {
  MutexLock lock(&mu_);
  SqliteStmt q(db_, "SELECT job_id, epoch, data FROM plans ORDER BY job_id");
  std::vector<StoredPlan> out;
  for (int rc = q.Step();; rc = q.Step()) {
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) return q.Error(rc);
    out.push_back(
        StoredPlan{q.Text(0), static_cast<uint64_t>(q.Int(1)), q.Blob(2)});
  }
  return out;
}

}  // namespace pitstop::controller
