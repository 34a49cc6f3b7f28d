#include "src/controller/ingest/ingest_inbox.h"

#include <algorithm>
#include <utility>

namespace pitstop::controller {

bool IngestInbox::Push(Entry& e) {
  const size_t bytes = e.batch->ByteSizeLong();
  MutexLock lock(&mu_);
  if (!entries_.empty() && bytes_ + bytes > max_bytes_) {
    ++stats_.full;
    return false;
  }
  entries_.push_back(std::move(e));
  bytes_ += bytes;
  ++stats_.queued;
  stats_.max_depth = std::max(stats_.max_depth, entries_.size());
  size_.store(entries_.size(), std::memory_order_seq_cst);
  return true;
}

std::vector<IngestInbox::Entry> IngestInbox::TakeAll() {
  std::vector<Entry> out;
  MutexLock lock(&mu_);
  out.swap(entries_);
  bytes_ = 0;
  size_.store(0, std::memory_order_seq_cst);
  return out;
}

IngestInbox::Stats IngestInbox::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

}  // namespace pitstop::controller
