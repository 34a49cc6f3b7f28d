// Runs one external command for the controller's actions (hooks, scontrol):
// input on stdin, output captured, a timeout, the exit status returned.
#ifndef PITSTOP_CONTROLLER_ACTIONS_COMMAND_RUNNER_H_
#define PITSTOP_CONTROLLER_ACTIONS_COMMAND_RUNNER_H_

#include <atomic>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pitstop::controller {

struct CommandSpec {
  // argv[0] is looked up in PATH. Use {"/bin/sh", "-c", "..."} for a shell
  // command line.
  std::vector<std::string> argv;
  // Written to the command's stdin, which is then closed. A command that
  // does not read it is not waited for: the rest is discarded.
  std::string stdin_data;
  // Added to (or replacing in) the controller's environment, "NAME=value".
  std::vector<std::string> env;
  // After this the command's process group gets SIGTERM, 2 s later SIGKILL.
  absl::Duration timeout = absl::Seconds(30);
};

struct CommandResult {
  // Exit status when the command exited; -1 when it was killed by a signal.
  int exit_code = -1;
  int term_signal = 0;  // the signal that ended it, 0 when it exited
  bool timed_out = false;
  absl::Duration duration;
  // The last 4 KiB of stdout and stderr together.
  std::string output;

  bool ok() const { return exit_code == 0 && !timed_out; }
  // "exit 0", "exit 3", "killed by signal 9 after timeout 30s", ...
  std::string Describe() const;
};

// Starts the command in its own process group and waits for it. Returns an
// error only when it could not be started (e.g. argv[0] not found: the
// message names it); a command that fails is an OK result with its status.
// `cancel` (optional) set to true ends a running command like a timeout.
// Thread-compatible: may be called from any thread, concurrently.
absl::StatusOr<CommandResult> RunCommand(
    const CommandSpec& spec, const std::atomic<bool>* cancel = nullptr);

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_ACTIONS_COMMAND_RUNNER_H_
