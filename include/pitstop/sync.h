// Mutex and condition variable used across pitstop.
//
// pitstop::Mutex is absl::Mutex, except in ThreadSanitizer builds: Debian's
// libabsl is compiled without TSan annotations, so TSan cannot see its
// happens-before edges and reports every ABSL_GUARDED_BY field as racy. Under
// PITSTOP_TSAN the same interface is backed by std::mutex, which TSan
// understands. Thread-safety annotations work the same in both builds.
#ifndef PITSTOP_SYNC_H_
#define PITSTOP_SYNC_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#ifdef PITSTOP_TSAN
#include <chrono>
#include <condition_variable>
#include <mutex>
#endif

namespace pitstop {

#ifndef PITSTOP_TSAN

using Mutex = absl::Mutex;
using MutexLock = absl::MutexLock;
using CondVar = absl::CondVar;

#else

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    return mu_.try_lock();
  }
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }

 private:
  Mutex* const mu_;
};

class CondVar {
 public:
  void Wait(Mutex* mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // Returns true on timeout, like absl::CondVar.
  bool WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool timed_out =
        cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout)) ==
        std::cv_status::timeout;
    lock.release();
    return timed_out;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

#endif  // PITSTOP_TSAN

}  // namespace pitstop

#endif  // PITSTOP_SYNC_H_
