// `pitstop sim` running a migration scenario, as a user runs it: the lines
// it prints after the report, and Ctrl-C mid-run. Real processes (a small
// standby-migration: 2 nodes x 1 rank + the standby).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pitstop::sim {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string PitstopBinary() {
  const char* bin_dir = std::getenv("PITSTOP_BINARY_DIR");
  return bin_dir == nullptr ? ""
                            : std::string(bin_dir) + "/tools/pitstop/pitstop";
}

// A small standby-migration that runs for a long time: the interrupt
// comes long before it could end.
const std::vector<std::string> kLongRun = {"sim",
                                           "-s",
                                           "standby-migration",
                                           "--nodes",
                                           "2",
                                           "--ranks-per-node",
                                           "1",
                                           "--steps",
                                           "20000",
                                           "--migrate-after-step",
                                           "15000"};

// Starts `pitstop args`, reads its output (stdout + stderr) until it holds
// `marker`, sends `sig` to the tool alone or, like Ctrl-C in a terminal,
// to its whole process group, and waits. Returns the wait status.
int InterruptAfter(const std::vector<std::string>& args,
                   const std::string& marker, bool whole_group,
                   std::string* out, int sig = SIGINT) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const std::string bin = PitstopBinary();
  std::vector<char*> argv = {const_cast<char*>(bin.c_str())};
  for (const std::string& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    signal(SIGINT, SIG_DFL);  // as in a terminal, for every process started
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  char buf[4096];
  ssize_t n;
  bool sent = false;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) {
    out->append(buf, n);
    if (!sent && out->find(marker) != std::string::npos) {
      whole_group ? killpg(pid, sig) : kill(pid, sig);
      sent = true;
    }
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

// After the report: the hint lists finished migrations (without --all
// pitstopctl shows none) and the rerun line keeps the flags given.
TEST(SimCliRunTest, MigrationHintsShowFinishedMigrationsAndRerunKeepsFlags) {
  const std::string pitstop = PitstopBinary();
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  std::string out;
  // --compute-ms: with no emulated GPU time a step of 2 ranks over the CPU
  // NCCL backend's ring takes about 1 ms, and the 300 steps after the
  // request ended the job before PREPARE reached the agents.
  FILE* p =
      popen((pitstop + " sim -s standby-migration --nodes 2 --ranks-per-node 1 "
                       "--steps 400 --migrate-after-step 100 --compute-ms 5 "
                       "-q 2>&1")
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
                        "100 --compute-ms 5\n"));
}

TEST(SimCliRunTest, SigintToTheToolStopsTheRun) {
  if (PitstopBinary().empty()) {
    GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  }
  std::string out;
  const int status =
      InterruptAfter(kLongRun, "[sim] reference run", false, &out);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 130) << out;
  EXPECT_THAT(out, HasSubstr("interrupted (SIGINT): the cluster was stopped"));
  EXPECT_THAT(out, Not(HasSubstr("FAIL")));
}

// `kill PID` or a batch scheduler's stop: the same clean stop, with the
// shell's code for SIGTERM.
TEST(SimCliRunTest, SigtermToTheToolStopsTheRun) {
  if (PitstopBinary().empty()) {
    GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  }
  std::string out;
  const int status =
      InterruptAfter(kLongRun, "[sim] reference run", false, &out, SIGTERM);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 143) << out;
  EXPECT_THAT(out, HasSubstr("interrupted (SIGTERM): the cluster was stopped"));
  EXPECT_THAT(out, Not(HasSubstr("FAIL")));
}

// Ctrl-C in a terminal: the trainers and daemons get SIGINT too. Once the
// job runs with pitstop loaded.
TEST(SimCliRunTest, CtrlCToTheGroupReportsTheInterruptNotAFailure) {
  if (PitstopBinary().empty()) {
    GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  }
  std::vector<std::string> args = kLongRun;
  args[8] = "2000";  // --steps: the training phase comes soon
  args[10] = "1500";
  std::string out;
  const int status = InterruptAfter(args, "[sim] training", true, &out);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 130) << out;
  EXPECT_THAT(out, HasSubstr("interrupted (SIGINT): the cluster was stopped"));
  EXPECT_THAT(out, Not(HasSubstr("FAIL")));
}

}  // namespace
}  // namespace pitstop::sim
