// Agent batches that arrived while the controller's lock was busy (a
// detection cycle, a SQLite write, a query). The stream that brought one is
// not blocked: its gRPC thread returns at once, and the next holder of the
// lock joins the queued batches, in arrival order, before it releases the
// lock. Each batch carries a completion that receives the batch's status
// (what a batch joined at once returns); the stream reads its next message
// only from there, so a stream has at most one batch queued, its order
// holds, and an error (an invalid record, a refused budget, a session that
// ended) reaches it as if the batch had been joined at once
// (docs/reliability.md, "Ingest off the lock").
#ifndef PITSTOP_CONTROLLER_INGEST_INGEST_INBOX_H_
#define PITSTOP_CONTROLLER_INGEST_INGEST_INBOX_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "pitstop/sync.h"
#include "pitstop/v1/agent.pb.h"

namespace pitstop::controller {

// Receives one agent batch's status. Called exactly once, never with the
// controller's lock held.
using BatchDone = std::function<void(absl::Status)>;

// Thread-safe: Push() from gRPC threads, TakeAll() by the lock holder.
class IngestInbox {
 public:
  struct Entry {
    uint64_t session = 0;
    // Not owned: the sender keeps it alive and unchanged until `done` runs.
    const v1::ConnectRequest* batch = nullptr;
    BatchDone done;
  };
  struct Stats {
    uint64_t queued = 0;   // batches that did not wait for the lock
    uint64_t full = 0;     // pushes refused: over max_bytes (they waited)
    size_t max_depth = 0;  // most batches queued at once
  };

  // At most `max_bytes` of serialized batches queued (work the next holder
  // of the lock must do); beyond, Push() refuses and the caller waits for
  // the lock instead (backpressure).
  explicit IngestInbox(size_t max_bytes) : max_bytes_(max_bytes) {}

  // Takes `e` (moved from) and returns true, or returns false when full
  // and leaves `e` alone.
  bool Push(Entry& e);
  // Everything queued, oldest first.
  std::vector<Entry> TakeAll();
  bool empty() const { return size_.load(std::memory_order_seq_cst) == 0; }
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

#endif  // PITSTOP_CONTROLLER_INGEST_INGEST_INBOX_H_
