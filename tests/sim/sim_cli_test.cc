// The `pitstop sim` command line, run as the installed tool is.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pitstop::sim {
namespace {

using ::testing::HasSubstr;

// Runs `cmd` through the shell; returns the exit code (-1 when it did not
// exit normally, e.g. a crash) and what it printed (stdout + stderr).
int RunCommand(const std::string& cmd, std::string* out) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out->append(buf, n);
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// `--print` was bound to a local of the function that registers the
// command; the callback wrote through a dangling reference (segfault).
TEST(SimCliTest, PrintShowsEveryScenarioAndExitsZero) {
  const char* bin_dir = std::getenv("PITSTOP_BINARY_DIR");
  if (bin_dir == nullptr) {
    GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set (run through ctest)";
  }
  const std::string pitstop = std::string(bin_dir) + "/tools/pitstop/pitstop";
  for (const char* scenario : {"nic-degraded", "comm-hang"}) {
    std::string out;
    EXPECT_EQ(RunCommand(pitstop + " sim --print -s " + scenario, &out), 0)
        << scenario << ": " << out;
    EXPECT_THAT(out, HasSubstr("name: ")) << scenario;
  }
  std::string out;
  EXPECT_EQ(RunCommand(pitstop + " sim --print -s no-such-scenario", &out), 2)
      << out;
}

}  // namespace
}  // namespace pitstop::sim
