// A minimal RAII wrapper over a prepared SQLite statement.
#ifndef PITSTOP_CONTROLLER_STORE_SQLITE_STMT_H_
#define PITSTOP_CONTROLLER_STORE_SQLITE_STMT_H_

#include <sqlite3.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace pitstop::controller {

// Not thread-safe; used under the store's mutex.
class SqliteStmt {
 public:
  SqliteStmt(sqlite3* db, const char* sql) : db_(db) {
    status_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~SqliteStmt() { sqlite3_finalize(stmt_); }
  SqliteStmt(const SqliteStmt&) = delete;
  SqliteStmt& operator=(const SqliteStmt&) = delete;

  void Bind(int i, absl::string_view text) {
    sqlite3_bind_text(stmt_, i, text.data(), static_cast<int>(text.size()),
                      SQLITE_TRANSIENT);
  }
  void BindBlob(int i, const std::string& blob) {
    sqlite3_bind_blob(stmt_, i, blob.data(), static_cast<int>(blob.size()),
                      SQLITE_TRANSIENT);
  }
  void Bind(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }

  // SQLITE_ROW, SQLITE_DONE or an error code.
  int Step() { return status_ == SQLITE_OK ? sqlite3_step(stmt_) : status_; }
  // Runs to completion; Internal with SQLite's message on error.
  absl::Status Run() {
    const int rc = Step();
    if (rc == SQLITE_DONE || rc == SQLITE_ROW) return absl::OkStatus();
    return Error(rc);
  }
  absl::Status Error(int rc) const {
    return absl::InternalError(absl::StrCat("sqlite: ", sqlite3_errstr(rc),
                                            ": ", sqlite3_errmsg(db_)));
  }

  int64_t Int(int col) { return sqlite3_column_int64(stmt_, col); }
  std::string Text(int col) {
    const unsigned char* t = sqlite3_column_text(stmt_, col);
    return t ? std::string(reinterpret_cast<const char*>(t)) : std::string();
  }
  std::string Blob(int col) {
    const void* p = sqlite3_column_blob(stmt_, col);
    return p ? std::string(static_cast<const char*>(p),
                           sqlite3_column_bytes(stmt_, col))
             : std::string();
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int status_;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_STORE_SQLITE_STMT_H_
