// The plain joiner launcher and the operator's joiners file: what a joiner
// is started with (user, environment, arguments), and each way a start
// fails with a reason a migration can be aborted with: root refused, an
// unknown user, a missing command, a joiner that exits at once; bad files
// named by file and line.
#include "src/agent/joiner_launcher.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "pitstop/clock.h"
#include "src/agent/joiner_config.h"
#include "tests/agent/test_util.h"

namespace pitstop::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A user the launcher may start joiners as: this one, or nobody when the
// tests run as root (a joiner never runs as root).
std::string JoinerUser() {
  if (geteuid() == 0) return "nobody";
  struct passwd* pw = getpwuid(geteuid());
  return pw != nullptr ? pw->pw_name : std::to_string(geteuid());
}

JoinerSpec Spec(int rank = 3) {
  JoinerSpec s;
  s.job_id = "torch-job";
  s.migration_id = "M7";
  s.host = "spare0";
  s.leaver_host = "node1";
  s.global_rank = rank;
  s.local_rank = 1;
  s.agent_socket = "/run/pitstop/agent-shm.sock";
  return s;
}

JoinerLaunchConfig Config(std::vector<std::string> command) {
  JoinerLaunchConfig c;
  c.job_id = "torch-job";
  c.user = JoinerUser();
  c.command = std::move(command);
  return c;
}

std::unique_ptr<JoinerLauncher> Make(JoinerLaunchConfig c,
                                     Clock* clock = Clock::Real()) {
  auto l = JoinerLauncher::Create(std::move(c), clock);
  EXPECT_TRUE(l.ok()) << l.status();
  return l.ok() ? std::move(*l) : nullptr;
}

TEST(JoinerLauncherTest, CreateRefusesRootRelativeCommandsAndUnknownKinds) {
  for (const char* root : {"root", "0"}) {
    JoinerLaunchConfig c = Config({"/bin/true"});
    c.user = root;
    auto l = JoinerLauncher::Create(c, Clock::Real());
    EXPECT_EQ(l.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(l.status().message(), HasSubstr("never started as root"));
  }
  auto rel =
      JoinerLauncher::Create(Config({"python3", "train.py"}), Clock::Real());
  EXPECT_EQ(rel.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rel.status().message(), HasSubstr("absolute path"));
  JoinerLaunchConfig slurm = Config({"/bin/true"});
  slurm.launcher = "slurm";
  auto s = JoinerLauncher::Create(slurm, Clock::Real());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("'slurm' is not built"));
  JoinerLaunchConfig nouser = Config({"/bin/true"});
  nouser.user = "";
  EXPECT_EQ(JoinerLauncher::Create(nouser, Clock::Real()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(JoinerLauncherTest, UnknownUserFailsTheLaunchNamingIt) {
  JoinerLaunchConfig c = Config({"/bin/true"});
  c.user = "no-such-user-pitstop";
  auto l = Make(c);
  absl::Status s = l->Launch(Spec());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("user 'no-such-user-pitstop' is unknown"));
  EXPECT_THAT(s.message(), HasSubstr("joiner of rank 3"));
}

TEST(JoinerLauncherTest, NumericUidZeroIsRefusedWhenResolved) {
  // "00" passes Create's literal check and resolves to uid 0.
  JoinerLaunchConfig c = Config({"/bin/true"});
  c.user = "00";
  auto l = Make(c);
  absl::Status s = l->Launch(Spec());
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("uid 0: a joiner is never started"));
}

TEST(JoinerLauncherTest, MissingCommandFailsWithExecsError) {
  auto l = Make(Config({"/nonexistent/pitstop-joiner", "--rank", "{rank}"}));
  absl::Status s = l->Launch(Spec());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("/nonexistent/pitstop-joiner"));
  EXPECT_THAT(s.message(), HasSubstr("execve: No such file or directory"));
}

TEST(JoinerLauncherTest, JoinerThatExitsAtOnceFailsWithItsStatusAndLog) {
  testing::TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0777), 0);
  JoinerLaunchConfig c =
      Config({"/bin/sh", "-c",
              "echo \"rank {rank}: no module named torch\" >&2; "
              "exit 3"});
  c.log_dir = dir.path();
  // The grace bounds how long a start is watched; the launch returns as
  // soon as the joiner ended.
  c.start_grace = absl::Minutes(5);
  auto l = Make(c);
  absl::Status s = l->Launch(Spec());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("exited with status 3"));
  EXPECT_THAT(s.message(), HasSubstr("rank 3: no module named torch"));
  EXPECT_THAT(s.message(), HasSubstr(dir.file("torch-job-M7-rank3.log")));
}

// The joiner runs as the job's user with the operator's environment plus
// the migration's, never the agent's; its arguments are expanded.
TEST(JoinerLauncherTest, StartsTheJoinerAsTheUserWithTheMigrationsEnvironment) {
  testing::TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0777), 0);
  const std::string fifo = dir.file("ready");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0666), 0);
  ASSERT_EQ(chmod(fifo.c_str(), 0666), 0);  // past the umask: the joiner's
  setenv("PITSTOP_TEST_AGENT_SECRET", "s3cret", 1);
  JoinerLaunchConfig c =
      Config({"/bin/sh", "-c",
              absl::StrCat(
                  "env > ", dir.path(), "/env-{rank}.txt; echo \"arg0=$0\" >> ",
                  dir.path(), "/env-{rank}.txt; id -u >> ", dir.path(),
                  "/env-{rank}.txt; echo x > ", fifo, "; exec sleep 600"),
              "{job}-{migration}"});
  c.env = {{"MASTER_ADDR", "node0"},
           {"WORLD_SIZE", "4"},
           {"RANK", "99"},
           {"PITSTOP_LOG", "{leaver_host}"}};
  c.log_dir = dir.path();
  FakeClock clock;  // the start grace passes without waiting
  auto l = Make(c, &clock);
  ASSERT_TRUE(l->Launch(Spec()).ok());
  // The joiner wrote its environment once it writes to the FIFO (a
  // joiner that cannot fails the test instead of hanging it).
  const int ready = open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(ready, 0);
  pollfd p{ready, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 120'000), 1) << "the joiner never wrote to " << fifo;
  char x = 0;
  EXPECT_EQ(read(ready, &x, 1), 1);
  EXPECT_EQ(x, 'x');
  close(ready);
  std::ifstream in(dir.file("env-3.txt"));
  std::stringstream env;
  env << in.rdbuf();
  const std::string e = env.str();
  EXPECT_THAT(e, HasSubstr("\nMASTER_ADDR=node0\n"));
  EXPECT_THAT(e, HasSubstr("\nWORLD_SIZE=4\n"));
  EXPECT_THAT(e, HasSubstr("\nRANK=3\n"));  // the migration's, not 99
  EXPECT_THAT(e, HasSubstr("\nLOCAL_RANK=1\n"));
  EXPECT_THAT(e, HasSubstr("\nPITSTOP_JOB_ID=torch-job\n"));
  EXPECT_THAT(e, HasSubstr("\nPITSTOP_HOST=spare0\n"));
  EXPECT_THAT(e, HasSubstr("\nPITSTOP_MIGRATION_ROLE=joiner\n"));
  EXPECT_THAT(e, HasSubstr("\nPITSTOP_MIGRATION_ID=M7\n"));
  EXPECT_THAT(e, HasSubstr("\nPITSTOP_LOG=node1\n"));
  EXPECT_THAT(
      e, HasSubstr("\nPITSTOP_AGENT_SOCKET=/run/pitstop/agent-shm.sock\n"));
  EXPECT_THAT(e, Not(HasSubstr("PITSTOP_TEST_AGENT_SECRET")));
  EXPECT_THAT(e, HasSubstr("\narg0=torch-job-M7\n"));  // expanded argument
  struct passwd* pw = getpwnam(JoinerUser().c_str());
  ASSERT_NE(pw, nullptr);
  EXPECT_THAT(e, HasSubstr(absl::StrCat("\n", pw->pw_uid, "\n")));
  EXPECT_NE(pw->pw_uid, 0u);
  const std::vector<pid_t> children =
      static_cast<PlainJoinerLauncher*>(l.get())->children();
  ASSERT_EQ(children.size(), 1u);
  // A later rank's failed launch ends the migration's joiners.
  l->Stop("M6");  // another migration's: nothing
  EXPECT_EQ(waitpid(children[0], nullptr, WNOHANG), 0);
  l->Stop("M7");
  int status = 0;
  ASSERT_EQ(waitpid(children[0], &status, 0), children[0]);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

TEST(JoinerConfigTest, ParsesJobsIntoLaunchers) {
  auto ls = ParseJoinerLaunchers(absl::StrCat(R"(jobs:
  torch-job:
    launcher: plain
    user: )",
                                              JoinerUser(), R"(
    command: [/usr/bin/python3, /opt/job/train.py, --rank, "{rank}"]
    env: {MASTER_ADDR: node0, WORLD_SIZE: "4"}
    start_grace_ms: 200
  other:
    user: alice
    command: [/bin/true]
)"),
                                 "joiners.yaml", Clock::Real());
  ASSERT_TRUE(ls.ok()) << ls.status();
  EXPECT_EQ(ls->size(), 2u);
  EXPECT_EQ(ls->at("torch-job")->name(), "plain");
  auto empty = ParseJoinerLaunchers("", "joiners.yaml", Clock::Real());
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());
}

TEST(JoinerConfigTest, BadEntriesAreNamedByFileAndLine) {
  struct Case {
    const char* yaml;
    const char* want;
  } cases[] = {
      {"jobs:\n  j:\n    user: root\n    command: [/bin/true]\n",
       "joiners.yaml:2:3: joiner of job 'j': user 'root' refused"},
      {"jobs:\n  j:\n    user: a\n    command: [/bin/true]\n    shell: y\n",
       "joiners.yaml:5:5: unknown key 'jobs.j.shell'"},
      {"jobs:\n  j:\n    user: a\n    command: /bin/true\n",
       "joiners.yaml:4:14: key 'jobs.j.command': expected a list"},
      {"jobs:\n  j:\n    user: a\n    command: [/bin/true]\n"
       "    start_grace_ms: soon\n",
       "joiners.yaml:5:21: key 'jobs.j.start_grace_ms': expected milliseconds"},
      {"job:\n  j: {}\n", "joiners.yaml:1:1: unknown key 'job'"},
      {"jobs: [\n", "joiners.yaml:"},
  };
  for (const Case& c : cases) {
    auto ls = ParseJoinerLaunchers(c.yaml, "joiners.yaml", Clock::Real());
    EXPECT_EQ(ls.status().code(), absl::StatusCode::kInvalidArgument) << c.yaml;
    EXPECT_THAT(ls.status().message(), HasSubstr(c.want)) << c.yaml;
  }
  auto missing =
      LoadJoinerLaunchers("/nonexistent/joiners.yaml", Clock::Real());
  EXPECT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(),
              HasSubstr("--migration-joiners-file"));
}

}  // namespace
}  // namespace pitstop::agent
