// Helpers shared by the plugin tests: temp socket paths and child processes.
#ifndef PITSTOP_TESTS_PLUGIN_TEST_UTIL_H_
#define PITSTOP_TESTS_PLUGIN_TEST_UTIL_H_

#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace pitstop::emu {

// A fresh short socket path under /tmp (< 108 bytes), unique per process
// and call.
inline std::string TempSocketPath(const std::string& tag) {
  static int n = 0;
  return absl::StrCat("/tmp/pst-", tag, "-", getpid(), "-", n++, ".sock");
}

// Runs argv[0] with this process's environment plus `env` (value "" with
// key prefixed by '-' removes it). Returns the wait status, -1 if it could
// not start.
inline int RunChild(const std::vector<std::string>& argv,
                    const std::map<std::string, std::string>& env,
                    const std::string& stderr_path = "") {
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr)
      merged[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
  }
  for (const auto& [k, v] : env) {
    if (!k.empty() && k[0] == '-') {
      merged.erase(k.substr(1));
    } else {
      merged[k] = v;
    }
  }
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : merged) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);
  pid_t pid = 0;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (!stderr_path.empty()) {
    posix_spawn_file_actions_addopen(&fa, 2, stderr_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  const int rc =
      posix_spawn(&pid, args[0], &fa, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return status;
}

inline bool ExitedWith(int status, int code) {
  return status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == code;
}

}  // namespace pitstop::emu

#endif  // PITSTOP_TESTS_PLUGIN_TEST_UTIL_H_
