// Mutex, lock and condition variable of the in-process library: std::mutex
// underneath, so the library needs no Abseil (it must load in any training
// container; docs/plugin.md, "What the library links"). The thread-safety
// annotations are Clang's (no-ops under GCC), spelled with our own macros.
//
// Thread-safe like std::mutex.
#ifndef PITSTOP_PLUGIN_PLUGIN_SYNC_H_
#define PITSTOP_PLUGIN_PLUGIN_SYNC_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#if defined(__clang__)
#define PLUGIN_TSA(x) __attribute__((x))
#else
#define PLUGIN_TSA(x)
#endif
#define PLUGIN_LOCKABLE PLUGIN_TSA(capability("mutex"))
#define PLUGIN_SCOPED_LOCKABLE PLUGIN_TSA(scoped_lockable)
#define PLUGIN_GUARDED_BY(x) PLUGIN_TSA(guarded_by(x))
#define PLUGIN_REQUIRES(...) PLUGIN_TSA(requires_capability(__VA_ARGS__))
#define PLUGIN_ACQUIRED_BEFORE(...) PLUGIN_TSA(acquired_before(__VA_ARGS__))
#define PLUGIN_ACQUIRE(...) PLUGIN_TSA(acquire_capability(__VA_ARGS__))
#define PLUGIN_RELEASE(...) PLUGIN_TSA(release_capability(__VA_ARGS__))
// For lock hand-offs the analysis cannot follow (fork handlers take locks in
// one function and release them in another).
#define PLUGIN_NO_TSA PLUGIN_TSA(no_thread_safety_analysis)

namespace pitstop::plugin {

class PLUGIN_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;
  void Lock() PLUGIN_ACQUIRE() { mu_.lock(); }
  void Unlock() PLUGIN_RELEASE() { mu_.unlock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

class PLUGIN_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) PLUGIN_ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;
  ~MutexLock() PLUGIN_RELEASE() { mu_->Unlock(); }

 private:
  Mutex* const mu_;
};

class CondVar {
 public:
  // Waits for a signal or `timeout_ns`; true on timeout. REQUIRES: mu held.
  bool WaitForNs(Mutex* mu, uint64_t timeout_ns) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool timed_out =
        cv_.wait_for(lock, std::chrono::nanoseconds(timeout_ns)) ==
        std::cv_status::timeout;
    lock.release();
    return timed_out;
  }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace pitstop::plugin

#endif  // PITSTOP_PLUGIN_PLUGIN_SYNC_H_
