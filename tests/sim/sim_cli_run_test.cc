// `pitstop sim` running a migration scenario, as a user runs it: the lines
// it prints after the report. Real processes (a small standby-migration:
// 2 nodes x 1 rank + the standby).
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pitstop::sim {
namespace {

using ::testing::HasSubstr;

std::string PitstopBinary() {
  const char* bin_dir = std::getenv("PITSTOP_BINARY_DIR");
  return bin_dir == nullptr ? ""
                            : std::string(bin_dir) + "/tools/pitstop/pitstop";
}

// After the report: the hint lists finished migrations (without --all
// pitstopctl shows none) and the rerun line keeps the flags given.
TEST(SimCliRunTest, MigrationHintsShowFinishedMigrationsAndRerunKeepsFlags) {
  const std::string pitstop = PitstopBinary();
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  std::string out;
  FILE* p =
      popen((pitstop + " sim -s standby-migration --nodes 2 --ranks-per-node 1 "
                       "--steps 400 --migrate-after-step 100 -q 2>&1")
                .c_str(),
            "r");
  ASSERT_NE(p, nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  EXPECT_THAT(out, HasSubstr(" migrations --all\n"));
  EXPECT_THAT(out,
              HasSubstr(" sim --scenario standby-migration --quiet --nodes 2 "
                        "--ranks-per-node 1 --steps 400 --migrate-after-step "
                        "100\n"));
}

}  // namespace
}  // namespace pitstop::sim
