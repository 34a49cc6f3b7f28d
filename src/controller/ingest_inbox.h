// Agent batches that arrived while the controller's lock was busy (a
// detection cycle, a SQLite write, a query). The stream that brought one
// goes on reading at once; the next holder of the lock joins the queued
// batches, in arrival order, before doing anything else (docs/reliability.md,
// "Ingest off the lock").
#ifndef PITSTOP_CONTROLLER_INGEST_INBOX_H_
#define PITSTOP_CONTROLLER_INGEST_INBOX_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "pitstop/sync.h"
#include "pitstop/v1/agent.pb.h"

namespace pitstop::controller {

// Thread-safe: Push() from gRPC threads, TakeAll() by the lock holder.
class IngestInbox {
 public:
  struct Entry {
    uint64_t session = 0;
    v1::ConnectRequest batch;
  };
  struct Stats {
    uint64_t queued = 0;   // batches that did not wait for the lock
    uint64_t full = 0;     // pushes refused: over max_bytes (they waited)
    size_t max_depth = 0;  // most batches queued at once
  };

  // At most `max_bytes` of serialized batches queued; beyond, Push()
  // refuses and the caller waits for the lock instead (backpressure).
  explicit IngestInbox(size_t max_bytes) : max_bytes_(max_bytes) {}

  // Copies `batch` in; false when full.
  bool Push(uint64_t session, const v1::ConnectRequest& batch);
  // Everything queued, oldest first.
  std::vector<Entry> TakeAll();
  bool empty() const { return size_.load(std::memory_order_acquire) == 0; }
  Stats stats() const;

 private:
  const size_t max_bytes_;
  mutable Mutex mu_;
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::atomic<size_t> size_{0};
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_INGEST_INBOX_H_
