// The locks of the controller's services, and the rule they check at run
// time (docs/architecture.md, "Locks"):
//
//  - a service lock (Kind::kService) is taken only while the thread holds
//    no lock of another service and no leaf lock: services never nest each
//    other's locks. Locks of one service may nest, in the order its header
//    states (e.g. FaultService: write_mu_, then mu_);
//  - a leaf lock (Kind::kLeaf) may be taken under any service lock (a
//    watcher called with the publishing service's lock held takes its own
//    leaf lock), and nothing is taken under it.
//
// A violation aborts at once, naming both locks: it is a deadlock waiting
// for the right interleaving, found on the first run of any test that
// reaches it instead. The check costs a thread-local array walk of the
// (at most a few) locks the thread holds.
//
// Thread-safe as a mutex is. Condition variables are not supported: the
// controller's loop waits on a plain pitstop::Mutex.
#ifndef PITSTOP_CONTROLLER_COMMON_SERVICE_LOCK_H_
#define PITSTOP_CONTROLLER_COMMON_SERVICE_LOCK_H_

#include "pitstop/sync.h"

namespace pitstop::controller {

class ABSL_LOCKABLE ServiceMutex {
 public:
  enum class Kind { kService, kLeaf };
  // `service` and `name` must be string literals (kept by pointer).
  ServiceMutex(const char* service, const char* name,
               Kind kind = Kind::kService)
      : service_(service), name_(name), kind_(kind) {}
  ServiceMutex(const ServiceMutex&) = delete;
  ServiceMutex& operator=(const ServiceMutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION();
  void Unlock() ABSL_UNLOCK_FUNCTION();
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true);
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

  const char* service() const { return service_; }
  const char* name() const { return name_; }
  // Service locks the calling thread holds now (tests, assertions).
  static int HeldByThisThread();

 private:
  // Aborts when taking this lock now breaks the rule above.
  void CheckOrder() const;
  void NoteLocked();
  void NoteUnlocked();

  const char* const service_;
  const char* const name_;
  const Kind kind_;
  Mutex mu_;
};

class ABSL_SCOPED_LOCKABLE ServiceLock {
 public:
  explicit ServiceLock(ServiceMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu)
      : mu_(mu) {
    mu_->Lock();
  }
  ServiceLock(const ServiceLock&) = delete;
  ServiceLock& operator=(const ServiceLock&) = delete;
  ~ServiceLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }

 private:
  ServiceMutex* const mu_;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_COMMON_SERVICE_LOCK_H_
