// Shutdown signal handling for daemons.
//
// Create() blocks SIGTERM, SIGINT and SIGHUP in the calling thread; threads
// created afterwards inherit the mask, so the signals are only ever consumed
// by Wait(). Create it in main() before starting any thread.
#ifndef PITSTOP_SIGNALS_H_
#define PITSTOP_SIGNALS_H_

#include <csignal>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pitstop {

// Call from the main thread only.
class ShutdownSignals {
 public:
  // Internal on failure of sigprocmask.
  static absl::StatusOr<std::unique_ptr<ShutdownSignals>> Create();
  ~ShutdownSignals();

  // Waits up to `timeout` for SIGTERM/SIGINT/SIGHUP; returns the signal
  // number, or 0 on timeout.
  int Wait(absl::Duration timeout);

 private:
  explicit ShutdownSignals(const sigset_t& old_mask);
  sigset_t old_mask_;
};

}  // namespace pitstop

#endif  // PITSTOP_SIGNALS_H_
