#include "src/controller/common/service_lock.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace pitstop::controller {
namespace {

// Locks this thread holds, in the order taken. Deeper nesting than this is
// itself a violation (no path in the controller takes more than three).
constexpr int kMaxHeld = 8;
thread_local const ServiceMutex* held[kMaxHeld];
thread_local bool held_leaf[kMaxHeld];
thread_local int depth = 0;

[[noreturn]] void Violation(const ServiceMutex& taking,
                            const ServiceMutex& holding, const char* why) {
  std::fprintf(stderr,
               "pitstop-controller: lock order violated: taking %s.%s while "
               "holding %s.%s (%s; docs/architecture.md, \"Locks\")\n",
               taking.service(), taking.name(), holding.service(),
               holding.name(), why);
  std::fflush(stderr);
  std::abort();
}

}  // namespace

void ServiceMutex::CheckOrder() const {
  if (depth >= kMaxHeld) Violation(*this, *held[depth - 1], "nested too deep");
  for (int i = 0; i < depth; ++i) {
    const ServiceMutex& h = *held[i];
    if (&h == this) Violation(*this, h, "taken twice: a self-deadlock");
    if (held_leaf[i]) Violation(*this, h, "nothing may be taken under a leaf");
    if (kind_ == Kind::kService && std::strcmp(h.service(), service_) != 0) {
      Violation(*this, h, "two services' locks nested");
    }
  }
}

void ServiceMutex::NoteLocked() {
  held[depth] = this;
  held_leaf[depth] = kind_ == Kind::kLeaf;
  ++depth;
}

void ServiceMutex::NoteUnlocked() {
  for (int i = depth - 1; i >= 0; --i) {
    if (held[i] != this) continue;
    for (int j = i; j + 1 < depth; ++j) {
      held[j] = held[j + 1];
      held_leaf[j] = held_leaf[j + 1];
    }
    --depth;
    return;
  }
}

void ServiceMutex::Lock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  CheckOrder();
  mu_.Lock();
  NoteLocked();
}

void ServiceMutex::Unlock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  NoteUnlocked();
  mu_.Unlock();
}

bool ServiceMutex::TryLock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  CheckOrder();
  if (!mu_.TryLock()) return false;
  NoteLocked();
  return true;
}

int ServiceMutex::HeldByThisThread() {
  int n = 0;
  for (int i = 0; i < depth; ++i) n += held_leaf[i] ? 0 : 1;
  return n;
}

}  // namespace pitstop::controller
