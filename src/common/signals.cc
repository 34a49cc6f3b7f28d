#include "pitstop/signals.h"

#include <pthread.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pitstop {
namespace {

sigset_t ShutdownSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  return set;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShutdownSignals>> ShutdownSignals::Create() {
  const sigset_t set = ShutdownSet();
  sigset_t old;
  const int rc = pthread_sigmask(SIG_BLOCK, &set, &old);
  if (rc != 0) {
    return absl::InternalError(
        absl::StrCat("pthread_sigmask: ", std::strerror(rc)));
  }
  return std::unique_ptr<ShutdownSignals>(new ShutdownSignals(old));
}

ShutdownSignals::ShutdownSignals(const sigset_t& old_mask)
    : old_mask_(old_mask) {}

ShutdownSignals::~ShutdownSignals() {
  pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

int ShutdownSignals::Wait(absl::Duration timeout) {
  const sigset_t set = ShutdownSet();
  timespec ts = absl::ToTimespec(timeout);
  for (;;) {
    const int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig > 0) return sig;
    if (errno == EINTR) continue;
    return 0;  // EAGAIN: timed out
  }
}

}  // namespace pitstop
