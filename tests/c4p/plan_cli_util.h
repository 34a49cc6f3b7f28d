// What the `pitstop plan` CLI tests share: the built binary and a scratch
// directory.
#ifndef PITSTOP_TESTS_C4P_PLAN_CLI_UTIL_H_
#define PITSTOP_TESTS_C4P_PLAN_CLI_UTIL_H_

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace pitstop::c4p {

// The built binary at `path` under the build tree, or "" outside ctest.
inline std::string Binary(const std::string& path) {
  const char* bin_dir = std::getenv("PITSTOP_BINARY_DIR");
  return bin_dir == nullptr ? "" : std::string(bin_dir) + "/" + path;
}

// A directory of this test process's own under the temporary directory.
inline std::string TempDir() {
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("pst-plan-cli-" + std::to_string(::getpid())))
                        .string();
  std::filesystem::create_directories(dir);
  return dir;
}

// The whole file at `path` ("" when it cannot be read).
inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

// Two hosts of 8 GPUs on a rail-optimised leaf/spine: quick to evaluate.
inline constexpr char kSmall[] = "gen:leafspine,gpus=16";

}  // namespace pitstop::c4p

#endif  // PITSTOP_TESTS_C4P_PLAN_CLI_UTIL_H_
