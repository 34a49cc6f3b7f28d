// Running real processes in agent tests: spawn with stdout/stderr to files,
// signal, wait.
#ifndef PITSTOP_TESTS_AGENT_PROCESS_UTIL_H_
#define PITSTOP_TESTS_AGENT_PROCESS_UTIL_H_

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace pitstop::agent::testing {

class Process {
 public:
  // Starts `argv[0]` with `argv`, extra environment `env` ("K=V"), stdout and
  // stderr redirected to `out_path` / `err_path`.
  Process(const std::vector<std::string>& argv,
          const std::vector<std::string>& env, const std::string& out_path,
          const std::string& err_path);
  ~Process();  // SIGKILL + reap if still running

  int pid() const { return pid_; }
  void Signal(int sig);
  // Waits for exit; returns the wait status, or -1 on timeout.
  int Wait(absl::Duration timeout = absl::Seconds(30));
  bool running();

 private:
  int pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
};

std::string ReadFile(const std::string& path);
// Waits for pitstop-agent's readiness line in `out_path` ("... ready ...
// metrics_port=N"); returns N (0 = metrics off), or -1 if `agent` exited or
// 30 s passed first.
int WaitAgentReady(const std::string& out_path, Process* agent);
// Path of a built binary: $PITSTOP_BINARY_DIR/<relative>.
std::string BinaryPath(const std::string& relative);
// GET http://127.0.0.1:port/path; body ("" on failure).
std::string HttpGet(int port, const std::string& path);

}  // namespace pitstop::agent::testing

#endif  // PITSTOP_TESTS_AGENT_PROCESS_UTIL_H_
