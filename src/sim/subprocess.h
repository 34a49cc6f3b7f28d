// A child process started with fork + exec, for the simulator and tests that
// run real pitstop daemons.
//
// The child gets an empty signal mask, stdout/stderr redirected to a log file
// (or inherited), the parent's environment plus `env`, and dies with SIGKILL
// when the thread that started it exits (PR_SET_PDEATHSIG), so a crashed
// simulator leaves no daemons behind.
//
// Thread-compatible: one owner thread calls the methods.
#ifndef PITSTOP_SRC_SIM_SUBPROCESS_H_
#define PITSTOP_SRC_SIM_SUBPROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pitstop::sim {

struct SubprocessOptions {
  // argv[0] is the path of the executable (not searched in PATH).
  std::vector<std::string> argv;
  // Added to (and overriding) the parent's environment.
  std::vector<std::pair<std::string, std::string>> env;
  // stdout+stderr go here (appended); empty = inherit the parent's.
  std::string log_path;
};

class Subprocess {
 public:
  // Starts the child. InvalidArgument if argv is empty, NotFound if argv[0]
  // is not an executable file, Internal if fork fails.
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(
      const SubprocessOptions& options);

  // Kills (SIGKILL) and reaps the child if it is still running.
  ~Subprocess();

  pid_t pid() const { return pid_; }
  const std::string& name() const { return name_; }

  // True while the child has not been reaped (reaps it if it just exited).
  bool Running();
  // Sends `signal`; OK if the child already exited.
  void Signal(int signal);
  // Waits up to `timeout` for the child to exit; true if it did.
  bool Wait(absl::Duration timeout);
  // SIGTERM, wait up to `grace`, then SIGKILL and reap. Returns the wait
  // status (as waitpid reports it).
  int Stop(absl::Duration grace);
  // Like Stop() without the SIGTERM (already sent): wait up to `grace`, then
  // SIGKILL. Daemons may die of a second SIGTERM once they restored their
  // signal mask, so callers that signal many children first use this.
  int WaitOrKill(absl::Duration grace);
  // Wait status once exited (valid only after Running() returned false).
  int wait_status() const { return wait_status_; }
  // "exit 0", "signal 9 (Killed)", ... for messages.
  std::string DescribeExit() const;

 private:
  Subprocess(pid_t pid, std::string name) : pid_(pid), name_(std::move(name)) {}
  bool Reap(bool block);

  pid_t pid_;
  std::string name_;
  bool exited_ = false;
  int wait_status_ = 0;
};

}  // namespace pitstop::sim

#endif  // PITSTOP_SRC_SIM_SUBPROCESS_H_
