// Issue #33, round 23: `pitstopctl job-hosts` against the real
// pitstop-controller with mutual TLS, as a Slurm PrologSlurmctld would run
// it: its help, its text and `-o json` output, a refused call's message
// and exit code, the usage errors, bad input (text that is not UTF-8, a
// host list over the limit), and the naming surviving a `kill -9` of the
// daemon (it was kept in memory only before).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/controller/subprocess.h"
#include "tests/controller/test_agent.h"

namespace pitstop::controller::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class JobHostsCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pitstop-job-hosts-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::string out;
    ASSERT_EQ(RunProcess({PITSTOP_GEN_CERTS, dir_ + "/pki", "--hosts", "n1"},
                         dir_ + "/gen.out", &out),
              0)
        << out;
    { std::ofstream(dir_ + "/tokens") << "# none\n"; }
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << "controller log:\n" << Log();
    Kill();
    std::filesystem::remove_all(dir_);
  }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // Starts (or restarts, on the same database) the daemon with mutual TLS;
  // returns "127.0.0.1:PORT".
  std::string Start() {
    const std::string port_file = dir_ + "/port";
    std::filesystem::remove(port_file);
    const std::string pki = dir_ + "/pki";
    pid_ =
        Spawn({PITSTOP_CONTROLLER_BIN, "--listen", "127.0.0.1:0", "--port-file",
               port_file, "--db", dir_ + "/controller.db", "--metrics-address",
               "", "--tls-ca", pki + "/ca.pem", "--tls-cert",
               pki + "/controller.pem", "--tls-key", pki + "/controller.key",
               "--auth-tokens-file", dir_ + "/tokens"},
              dir_ + "/controller.log");
    EXPECT_GT(pid_, 0);
    std::string port;
    EXPECT_TRUE(WaitUntil([&] {
      std::ifstream in(port_file);
      return static_cast<bool>(std::getline(in, port)) && !port.empty();
    })) << Log();
    return absl::StrCat("127.0.0.1:", port);
  }
  std::string Log() { return ReadFile(dir_ + "/controller.log"); }
  // pitstopctl as `role` (its certificate) with `args`.
  int Ctl(const std::string& target, const std::string& role,
          const std::vector<std::string>& args, std::string* out) {
    const std::string pki = dir_ + "/pki";
    std::vector<std::string> argv = {PITSTOP_PITSTOPCTL_BIN,
                                     "--controller",
                                     target,
                                     "--ca",
                                     pki + "/ca.pem",
                                     "--cert",
                                     pki + "/" + role + ".pem",
                                     "--key",
                                     pki + "/" + role + ".key"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProcess(argv, dir_ + "/ctl.out", out);
  }

  std::string dir_;
  pid_t pid_ = -1;
};

TEST_F(JobHostsCliTest, HelpOutputRefusalsAndARestartOfTheDaemon) {
  std::string out;
  ASSERT_EQ(RunProcess({PITSTOP_PITSTOPCTL_BIN, "job-hosts", "--help"},
                       dir_ + "/help.out", &out),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr("scheduler role"));
  EXPECT_THAT(out, HasSubstr("--clear"));
  EXPECT_THAT(out, HasSubstr("restarted or new leader keeps it"));

  std::string target = Start();
  EXPECT_EQ(
      Ctl(target, "scheduler",
          {"job-hosts", "good", "n2", "n1", "n1", "--who", "slurm"}, &out),
      0)
      << out;
  EXPECT_EQ(out, "job good: 2 hosts named: n1,n2\n");
  EXPECT_EQ(Ctl(target, "scheduler",
                {"-o", "json", "job-hosts", "good", "n1", "n2"}, &out),
            0)
      << out;
  EXPECT_EQ(out, "{\"job_id\":\"good\",\"hosts\":[\"n1\",\"n2\"]}\n");

  // Refused: another role, a host no agent could register as, and the
  // usage errors (a prolog whose host list came out empty must not forget
  // a running job's naming).
  EXPECT_EQ(Ctl(target, "operator", {"job-hosts", "good", "n3"}, &out), 5)
      << out;
  EXPECT_THAT(out, HasSubstr("needs role scheduler"));
  EXPECT_EQ(Ctl(target, "scheduler", {"job-hosts", "good", "n 3"}, &out), 5)
      << out;
  EXPECT_THAT(out,
              HasSubstr("hosts[0]: byte 32 at offset 1 (printable ASCII only"));
  EXPECT_EQ(Ctl(target, "scheduler", {"job-hosts", "good"}, &out), 2) << out;
  EXPECT_THAT(out, HasSubstr("name at least one HOST, or --clear"));
  EXPECT_EQ(
      Ctl(target, "scheduler", {"job-hosts", "good", "n1", "--clear"}, &out), 2)
      << out;
  EXPECT_THAT(out, HasSubstr("--clear takes no HOST"));

  // An attacker's hour (scheduler credential): arguments that are not
  // UTF-8 are refused naming the field before they are sent (they went out
  // and failed with an empty message, exit 6); UTF-8 job ids are taken;
  // 65,537 hosts are refused by the controller with the limit.
  EXPECT_EQ(
      Ctl(target, "scheduler", {"job-hosts", "good", "n1", "n\xff"}, &out), 2)
      << out;
  EXPECT_THAT(out, HasSubstr("hosts[1]: byte 255 at offset 1 is not UTF-8"));
  EXPECT_EQ(Ctl(target, "scheduler",
                {"job-hosts", "j\xc3(", "n1", "--who", "s\xed\xa0\x80"}, &out),
            2)
      << out;
  EXPECT_THAT(out, HasSubstr("job_id: byte 195 at offset 1 is not UTF-8"));
  EXPECT_EQ(Ctl(target, "scheduler", {"job-hosts", "j\xc3\xa9", "n1"}, &out), 0)
      << out;
  std::vector<std::string> many = {"job-hosts", "big"};
  for (int i = 0; i <= 65536; ++i) many.push_back(absl::StrCat("h", i));
  EXPECT_EQ(Ctl(target, "scheduler", many, &out), 5) << out.substr(0, 300);
  EXPECT_THAT(out, HasSubstr("hosts: 65537 named, at most 65536"));

  // kill -9 and restart on the same database: the naming is loaded.
  Kill();
  target = Start();
  EXPECT_TRUE(WaitUntil([&] {
    return Log().find("the hosts of 2 jobs named by the scheduler loaded") !=
           std::string::npos;
  })) << Log();
  EXPECT_EQ(Ctl(target, "scheduler", {"job-hosts", "good", "--clear"}, &out), 0)
      << out;
  EXPECT_EQ(out, "job good: naming forgotten\n");
  EXPECT_EQ(
      Ctl(target, "scheduler", {"job-hosts", "j\xc3\xa9", "--clear"}, &out), 0)
      << out;
  // Forgotten, it stays forgotten.
  Kill();
  std::filesystem::remove(dir_ + "/controller.log");
  target = Start();
  EXPECT_EQ(Ctl(target, "viewer", {"status"}, &out), 0) << out;
  EXPECT_THAT(Log(), Not(HasSubstr("named by the scheduler loaded")));
}

}  // namespace
}  // namespace pitstop::controller::testing
