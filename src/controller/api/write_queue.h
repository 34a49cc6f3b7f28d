// The write side of the controller's server streams: messages queued from
// any thread, written one at a time, bounded.
#ifndef PITSTOP_CONTROLLER_API_WRITE_QUEUE_H_
#define PITSTOP_CONTROLLER_API_WRITE_QUEUE_H_

#include <cstddef>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/support/status.h"
#include "pitstop/sync.h"

namespace pitstop::controller {

// Messages a stream may have queued for a peer that does not read them; one
// more ends the stream with RESOURCE_EXHAUSTED (memory stays bounded).
inline constexpr size_t kMaxQueued = 4096;

// Writes queued messages one at a time through `Reactor` (a gRPC server
// reactor, or anything with StartWrite(const Msg*) and Finish(Status)).
// Enqueue() may be called from any thread (the core calls it with its lock
// held, so it must not block). Holds at most `max_queued` unsent messages.
template <typename Reactor, typename Msg>
class WriteQueue {
 public:
  explicit WriteQueue(Reactor* reactor, size_t max_queued = kMaxQueued)
      : reactor_(reactor), max_queued_(max_queued) {}

  void Enqueue(const Msg& m) {
    MutexLock lock(&mu_);
    if (finished_) return;
    if (queue_.size() >= max_queued_) {
      queue_.clear();
      finished_ = true;
      reactor_->Finish(
          grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                       absl::StrCat("the peer did not read ", max_queued_,
                                    " queued messages; stream ended")));
      return;
    }
    queue_.push_back(m);
    if (!writing_) WriteNextLocked();
  }
  // Call from OnWriteDone; returns false when the stream broke.
  bool WriteDone(bool ok) {
    MutexLock lock(&mu_);
    writing_ = false;
    if (!ok || finished_) return ok;
    WriteNextLocked();
    return true;
  }
  // Runs `start` (the reactor's StartRead) unless the RPC was finished:
  // an operation started after Finish can race gRPC's OnDone (the reactor
  // may be gone). False when finished.
  template <typename Fn>
  bool UnlessFinished(Fn start) {
    MutexLock lock(&mu_);
    if (finished_) return false;
    start();
    return true;
  }
  // Finishes the RPC once, whatever called first.
  void Finish(const grpc::Status& s) {
    MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
    reactor_->Finish(s);
  }

 private:
  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (queue_.empty()) return;
    current_ = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    reactor_->StartWrite(&current_);
  }

  Reactor* const reactor_;
  const size_t max_queued_;
  Mutex mu_;
  std::deque<Msg> queue_ ABSL_GUARDED_BY(mu_);
  Msg current_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_API_WRITE_QUEUE_H_
