// deploy/pitstop-agent.service as shipped: systemd-analyze verify accepts
// it (with ExecStart pointed at the built binary), and it keeps the settings
// the agent relies on.
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/agent/process_util.h"
#include "tests/agent/test_util.h"

namespace pitstop::agent {
namespace {

using ::testing::HasSubstr;

std::string UnitPath() {
  const char* src = std::getenv("PITSTOP_SOURCE_DIR");
  return std::string(src != nullptr ? src : ".") +
         "/deploy/pitstop-agent.service";
}

TEST(UnitFileTest, HasTheSettingsTheAgentNeeds) {
  const std::string unit = testing::ReadFile(UnitPath());
  ASSERT_FALSE(unit.empty()) << UnitPath();
  EXPECT_THAT(unit, HasSubstr("\nType=notify\n"));  // main.cc sends READY=1
  EXPECT_THAT(unit, HasSubstr("\nRestart=on-failure\n"));
  EXPECT_THAT(unit, HasSubstr("\nRuntimeDirectory=pitstop\n"));
  // The socket comes from the default or the config file: a flag on the
  // command line would override ingest.socket of --config.
  EXPECT_THAT(unit, HasSubstr("\nExecStart=/usr/local/bin/pitstop-agent "
                              "$PITSTOP_AGENT_OPTS\n"));
  EXPECT_THAT(unit, ::testing::Not(HasSubstr("--ingest-socket")));
  EXPECT_THAT(unit, HasSubstr("\nKillSignal=SIGTERM\n"));
}

// Issue #11: the agent ran as root. It runs as `pitstop` with one
// capability, CAP_SYS_PTRACE (issue #33: to read ranks' environ, the
// evidence of their job); systemd rates the unit "OK" (exposure below 3.0
// of 10; 2.2 with the capability, 1.9 without).
TEST(UnitFileTest, RunsUnprivileged) {
  const std::string unit = testing::ReadFile(UnitPath());
  EXPECT_THAT(unit, HasSubstr("\nUser=pitstop\n"));
  EXPECT_THAT(unit, HasSubstr("\nGroup=pitstop\n"));
  EXPECT_THAT(unit, HasSubstr("\nCapabilityBoundingSet=CAP_SYS_PTRACE\n"));
  EXPECT_THAT(unit, HasSubstr("\nAmbientCapabilities=CAP_SYS_PTRACE\n"));
  EXPECT_THAT(unit, HasSubstr("\nNoNewPrivileges=yes\n"));
  EXPECT_THAT(unit, ::testing::Not(HasSubstr("0.0.0.0")));
  if (std::system("command -v systemd-analyze >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "SKIPPED: systemd-analyze absent; exposure not rated";
  }
  testing::TempDir dir;
  const std::string copy = dir.file("pitstop-agent.service");
  std::ofstream(copy) << absl::StrReplaceAll(
      unit, {{"/usr/local/bin/pitstop-agent",
              testing::BinaryPath("src/agent/pitstop-agent")}});
  testing::Process security({"/usr/bin/env", "systemd-analyze", "security",
                             "--offline=yes", "--threshold=30", copy},
                            {}, dir.file("out"), dir.file("err"));
  const int st = security.Wait();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
      << testing::ReadFile(dir.file("out"))
      << testing::ReadFile(dir.file("err"));
}

TEST(UnitFileTest, MetricsDefaultToLoopback) {
  testing::TempDir dir;
  testing::Process help(
      {testing::BinaryPath("src/agent/pitstop-agent"), "--help"}, {},
      dir.file("out"), dir.file("err"));
  ASSERT_NE(help.Wait(), -1);
  const std::string out = testing::ReadFile(dir.file("out"));
  EXPECT_THAT(out, HasSubstr("127.0.0.1:9471"));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("0.0.0.0")));
}

TEST(UnitFileTest, SystemdAnalyzeVerifyAcceptsIt) {
  if (std::system("command -v systemd-analyze >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "systemd-analyze absent; unit not verified";
  }
  testing::TempDir dir;
  const std::string copy = dir.file("pitstop-agent.service");
  std::ofstream(copy) << absl::StrReplaceAll(
      testing::ReadFile(UnitPath()),
      {{"/usr/local/bin/pitstop-agent",
        testing::BinaryPath("src/agent/pitstop-agent")}});
  testing::Process verify({"/usr/bin/env", "systemd-analyze", "verify", copy},
                          {}, dir.file("out"), dir.file("err"));
  const int st = verify.Wait();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
      << testing::ReadFile(dir.file("err"));
  // Warnings about the unit itself (not about the environment) fail too.
  EXPECT_THAT(testing::ReadFile(dir.file("err")),
              ::testing::Not(HasSubstr("pitstop-agent.service:")));
}

}  // namespace
}  // namespace pitstop::agent
