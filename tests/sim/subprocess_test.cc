#include "src/sim/subprocess.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace pitstop::sim {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(SubprocessTest, ReportsExitCodeAndPassesEnvironment) {
  char tmpl[] = "/tmp/pitstop-subproc-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string log = std::string(tmpl) + "/out.log";
  SubprocessOptions opts;
  opts.argv = {"/bin/sh", "-c", "echo value=$PITSTOP_TEST_VAR; exit 3"};
  opts.env = {{"PITSTOP_TEST_VAR", "hello"}};
  opts.log_path = log;
  auto p = Subprocess::Start(opts);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE((*p)->Wait(absl::Seconds(10)));
  EXPECT_FALSE((*p)->Running());
  EXPECT_TRUE(WIFEXITED((*p)->wait_status()));
  EXPECT_EQ(WEXITSTATUS((*p)->wait_status()), 3);
  EXPECT_EQ((*p)->DescribeExit(), "exit 3");
  EXPECT_EQ(ReadFile(log), "value=hello\n");
  unlink(log.c_str());
  rmdir(tmpl);
}

TEST(SubprocessTest, StopEscalatesToKill) {
  char tmpl[] = "/tmp/pitstop-subproc-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string log = std::string(tmpl) + "/out.log";
  SubprocessOptions opts;
  // Ignores SIGTERM, so Stop must fall back to SIGKILL. It says when the
  // trap is set: a SIGTERM sent before that (a loaded machine can take
  // longer than any fixed sleep to start the shell) would end it at once.
  opts.argv = {"/bin/sh", "-c",
               "trap '' TERM; echo trapped; while true; do sleep 0.05; done"};
  opts.log_path = log;
  auto p = Subprocess::Start(opts);
  ASSERT_TRUE(p.ok()) << p.status();
  for (int i = 0; i < 3000 && ReadFile(log) != "trapped\n"; ++i) {
    usleep(10000);  // up to 30 s
  }
  ASSERT_EQ(ReadFile(log), "trapped\n");
  EXPECT_TRUE((*p)->Running());
  const int status = (*p)->Stop(absl::Milliseconds(200));
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  EXPECT_FALSE((*p)->Running());
  unlink(log.c_str());
  rmdir(tmpl);
}

TEST(SubprocessTest, MissingExecutableIsNotFound) {
  SubprocessOptions opts;
  opts.argv = {"/nonexistent/pitstop-nothing"};
  auto p = Subprocess::Start(opts);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(p.status().message().find("/nonexistent/pitstop-nothing"),
            std::string::npos);
}

}  // namespace
}  // namespace pitstop::sim
