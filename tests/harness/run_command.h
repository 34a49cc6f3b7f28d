// Runs a command line for tests that drive pitstop's binaries.
#ifndef PITSTOP_TESTS_HARNESS_RUN_COMMAND_H_
#define PITSTOP_TESTS_HARNESS_RUN_COMMAND_H_

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace pitstop::harness {

// Runs `cmd` through the shell and sets `*out` to what it printed (stdout
// and stderr together). Returns its exit code, or -1 when it did not exit
// normally (a crash: tests that refuse bad input must see an exit, not a
// signal).
inline int RunCommand(const std::string& cmd, std::string* out) {
  out->clear();
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out->append(buf, n);
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace pitstop::harness

#endif  // PITSTOP_TESTS_HARNESS_RUN_COMMAND_H_
