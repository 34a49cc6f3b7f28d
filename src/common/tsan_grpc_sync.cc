// ThreadSanitizer builds only (PITSTOP_SANITIZE=thread): lets TSan see how
// Debian's Abseil and gRPC synchronise (docs/testing.md, "How TSan sees
// gRPC").
//
// Debian builds libabsl and libgrpc without TSan. TSan sees none of their
// synchronisation: every hand-off from a gRPC thread to another -- a
// request to its handler, a reaction to the next, a reactor to its OnDone,
// a server to Shutdown() returning -- looks unordered, and the state our
// handlers touch on both sides reads as racy. Suppressing those reports
// (race:^grpc::, race:libabsl_) also hid every real race in pitstop's
// handlers.
//
// So every executable of the TSan build defines the functions through which
// gRPC synchronises, exported from the executable: the dynamic linker looks
// there first, so libgrpc's, libgpr's and libgrpc++'s calls through their
// PLT land here. Each tells TSan what the call means, then calls Debian's
// function (found with dlsym(RTLD_NEXT); a missing one aborts, naming it):
//  - absl::Mutex and absl::CondVar (gRPC's grpc_core::Mutex, gpr_mu,
//    gpr_cv): lock = acquire, unlock = release, a wait releases and
//    re-acquires its mutex.
//  - A batch started on a call with a tag (grpc_call_start_batch) is
//    ordered before its completion (grpc_cq_end_op) and before the consumer
//    that gets the tag from a completion queue (grpc_completion_queue_next
//    or _pluck: the sync API, and the callback queue's thread, which is fed
//    by a lock-free queue).
//  - A callback call's reactions each drop a reference
//    (ServerCallbackCall::callbacks_outstanding_, an atomic in gRPC's
//    headers); the thread that drops the last one schedules OnDone and the
//    call's destruction. Dropped in our code (the headers are compiled into
//    it) TSan sees the release; dropped inside libgrpc++ it sees neither
//    that nor the acquire. ScheduleOnDone acquires the count's address;
//    OnCancel, whose reference libgrpc++ drops right after it returns, is
//    wrapped to release it.
//  - grpc::Server counts its callback requests (each lives until its
//    call's OnDone has returned) in an atomic inside libgrpc++, and
//    Shutdown() returns once none is left: each unref releases, the final
//    wait acquires.
//
// Only ordering gRPC provides is modelled; other lock-free hand-offs inside
// libgrpc stay invisible.
//
// Thread-safe: each function is called where gRPC calls Debian's.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpc/grpc.h"
#include "grpcpp/server.h"
#include "grpcpp/support/server_callback.h"

namespace {

// Debian's definition of `mangled` (the next one after this executable).
template <typename Fn>
Fn Next(const char* mangled) {
  void* fn = dlsym(RTLD_NEXT, mangled);
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: %s not found: %s\n", mangled,
                 dlerror());
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

using MutexFn = void (*)(absl::Mutex*);
using TryFn = bool (*)(absl::Mutex*);

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static const MutexFn next = Next<MutexFn>("_ZN4absl7debian35Mutex4LockEv");
  next(this);
  __tsan_acquire(this);
}

bool Mutex::TryLock() {
  static const TryFn next = Next<TryFn>("_ZN4absl7debian35Mutex7TryLockEv");
  const bool locked = next(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

void Mutex::Unlock() {
  static const MutexFn next = Next<MutexFn>("_ZN4absl7debian35Mutex6UnlockEv");
  __tsan_release(this);
  next(this);
}

void Mutex::ReaderLock() {
  static const MutexFn next =
      Next<MutexFn>("_ZN4absl7debian35Mutex10ReaderLockEv");
  next(this);
  __tsan_acquire(this);
}

bool Mutex::ReaderTryLock() {
  static const TryFn next =
      Next<TryFn>("_ZN4absl7debian35Mutex13ReaderTryLockEv");
  const bool locked = next(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

void Mutex::ReaderUnlock() {
  static const MutexFn next =
      Next<MutexFn>("_ZN4absl7debian35Mutex12ReaderUnlockEv");
  __tsan_release(this);  // joins the readers' clocks: a later writer sees all
  next(this);
}

void CondVar::Wait(Mutex* mu) {
  using Fn = void (*)(CondVar*, Mutex*);
  static const Fn next = Next<Fn>("_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  next(this, mu);
  __tsan_acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  using Fn = bool (*)(CondVar*, Mutex*, Duration);
  static const Fn next = Next<Fn>(
      "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_release(mu);
  const bool timed_out = next(this, mu, timeout);
  __tsan_acquire(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  using Fn = bool (*)(CondVar*, Mutex*, Time);
  static const Fn next = Next<Fn>(
      "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  __tsan_release(mu);
  const bool timed_out = next(this, mu, deadline);
  __tsan_acquire(mu);
  return timed_out;
}

ABSL_NAMESPACE_END
}  // namespace absl

// Batches: started -> completed, per tag.
extern "C" grpc_call_error grpc_call_start_batch(grpc_call* call,
                                                 const grpc_op* ops,
                                                 size_t nops, void* tag,
                                                 void* reserved) {
  using Fn =
      grpc_call_error (*)(grpc_call*, const grpc_op*, size_t, void*, void*);
  static const Fn next = Next<Fn>("grpc_call_start_batch");
  __tsan_release(tag);
  return next(call, ops, nops, tag, reserved);
}

extern "C" grpc_event grpc_completion_queue_next(grpc_completion_queue* cq,
                                                 gpr_timespec deadline,
                                                 void* reserved) {
  using Fn = grpc_event (*)(grpc_completion_queue*, gpr_timespec, void*);
  static const Fn next = Next<Fn>("grpc_completion_queue_next");
  const grpc_event ev = next(cq, deadline, reserved);
  if (ev.type == GRPC_OP_COMPLETE) __tsan_acquire(ev.tag);
  return ev;
}

extern "C" grpc_event grpc_completion_queue_pluck(grpc_completion_queue* cq,
                                                  void* tag,
                                                  gpr_timespec deadline,
                                                  void* reserved) {
  using Fn = grpc_event (*)(grpc_completion_queue*, void*, gpr_timespec, void*);
  static const Fn next = Next<Fn>("grpc_completion_queue_pluck");
  const grpc_event ev = next(cq, tag, deadline, reserved);
  if (ev.type == GRPC_OP_COMPLETE) __tsan_acquire(ev.tag);
  return ev;
}

// libgrpc's internal completion (src/core/lib/surface/completion_queue.h):
//   void grpc_cq_end_op(grpc_completion_queue* cq, void* tag,
//                       absl::Status error, void (*done)(...), void* done_arg,
//                       grpc_cq_completion* storage, bool internal);
// The Itanium C++ ABI passes the absl::Status by invisible reference (the
// caller owns the temporary), so this forwards that pointer untouched.
extern "C" void
PitstopTsanCqEndOp(void* cq, void* tag, void* error, void* done, void* done_arg, void* storage, bool internal) __asm__(
    "_Z14grpc_cq_end_opP21grpc_completion_queuePvN4absl7debian36StatusEPFv"
    "S1_P18grpc_cq_completionES1_S6_b");
extern "C" void PitstopTsanCqEndOp(void* cq, void* tag, void* error, void* done,
                                   void* done_arg, void* storage,
                                   bool internal) {
  using Fn = void (*)(void*, void*, void*, void*, void*, void*, bool);
  static const Fn next = Next<Fn>(
      "_Z14grpc_cq_end_opP21grpc_completion_queuePvN4absl7debian36StatusEPFvS1_"
      "P18grpc_cq_completionES1_S6_b");
  __tsan_acquire(tag);
  next(cq, tag, error, done, done_arg, storage, internal);
}

namespace grpc::internal {

// gRPC 1.51's ServerCallbackCall: a vtable pointer, then two atomic ints,
// on_cancel_conditions_remaining_ and callbacks_outstanding_ (private).
static_assert(sizeof(ServerCallbackCall) == 16,
              "gRPC's ServerCallbackCall changed: update the offset below");
constexpr size_t kCallbacksOutstandingOffset = 12;

void ServerCallbackCall::ScheduleOnDone(bool inline_ondone) {
  using Fn = void (*)(ServerCallbackCall*, bool);
  static const Fn next =
      Next<Fn>("_ZN4grpc8internal18ServerCallbackCall14ScheduleOnDoneEb");
  __tsan_acquire(reinterpret_cast<char*>(this) + kCallbacksOutstandingOffset);
  next(this, inline_ondone);
}

namespace {

// Stands in for a reactor in CallOnCancel: runs its OnCancel, then releases
// the call's count, whose reference libgrpc++ drops next. Deletes itself.
class CancelThenRelease final : public ServerReactor {
 public:
  CancelThenRelease(ServerReactor* reactor, void* count)
      : reactor_(reactor), count_(count) {}
  void OnCancel() override {
    reactor_->OnCancel();
    __tsan_release(count_);
    delete this;
  }
  void OnDone() override {}  // gRPC calls only OnCancel on it
  bool InternalInlineable() override { return reactor_->InternalInlineable(); }

 private:
  ServerReactor* const reactor_;
  void* const count_;
};

}  // namespace

void ServerCallbackCall::CallOnCancel(ServerReactor* reactor) {
  using Fn = void (*)(ServerCallbackCall*, ServerReactor*);
  static const Fn next = Next<Fn>(
      "_ZN4grpc8internal18ServerCallbackCall12CallOnCancelEPNS0_"
      "13ServerReactorE");
  next(this, new CancelThenRelease(reactor, reinterpret_cast<char*>(this) +
                                                kCallbacksOutstandingOffset));
}

}  // namespace grpc::internal

namespace grpc {

void Server::UnrefWithPossibleNotify() {
  using Fn = void (*)(Server*);
  static const Fn next = Next<Fn>("_ZN4grpc6Server23UnrefWithPossibleNotifyEv");
  __tsan_release(this);
  next(this);
}

void Server::UnrefAndWaitLocked() {
  using Fn = void (*)(Server*);
  static const Fn next = Next<Fn>("_ZN4grpc6Server18UnrefAndWaitLockedEv");
  next(this);
  __tsan_acquire(this);
}

}  // namespace grpc
