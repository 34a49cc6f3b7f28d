// Child processes for the controller's process-level tests.
#ifndef PITSTOP_TESTS_CONTROLLER_SUBPROCESS_H_
#define PITSTOP_TESTS_CONTROLLER_SUBPROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace pitstop::controller::testing {

// Starts argv[0] with argv (PATH not searched) and the current environment
// plus `env` ("K=V" entries); stdout and stderr go to `out_path`. Returns
// the pid, or -1.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& out_path,
            const std::vector<std::string>& env = {});

// Runs argv to completion; returns its exit code (-1 if it did not exit
// normally) and fills *out with what it printed.
int RunProcess(const std::vector<std::string>& argv,
               const std::string& out_path, std::string* out);

// Reads a whole file; empty if it cannot be read.
std::string ReadFile(const std::string& path);

}  // namespace pitstop::controller::testing

#endif  // PITSTOP_TESTS_CONTROLLER_SUBPROCESS_H_
