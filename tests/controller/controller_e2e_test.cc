// End to end through real processes: 4 emulated NCCL ranks drive the real
// profiler plugin, which streams to a real pitstop-agent, which sends
// summaries, progress and lifecycle to a real pitstop-controller. Rank 3
// crashes (no finalize): the controller must have joined the collectives
// and must blame exactly that process.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "pitstop/v1/controller.grpc.pb.h"
#include "tests/controller/subprocess.h"
#include "tests/controller/test_agent.h"

namespace pitstop::controller::testing {
namespace {

class ControllerE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pse2e-XXXXXX";  // short: it holds a Unix socket
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (HasFailure()) {
      std::cerr << "controller log:\n"
                << ReadFile(dir_ + "/controller.log") << "agent log:\n"
                << ReadFile(dir_ + "/agent.log");
    }
    for (pid_t pid : pids_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    std::filesystem::remove_all(dir_);
  }
  pid_t Start(const std::vector<std::string>& argv, const std::string& log,
              const std::vector<std::string>& env = {}) {
    const pid_t pid = Spawn(argv, dir_ + "/" + log, env);
    EXPECT_GT(pid, 0) << argv[0];
    if (pid > 0) pids_.push_back(pid);
    return pid;
  }

  std::string dir_;
  std::vector<pid_t> pids_;
};

TEST_F(ControllerE2eTest, CrashedRankIsBlamedAndCollectivesAreJoined) {
  Start({PITSTOP_CONTROLLER_BIN, "--listen", "127.0.0.1:0", "--port-file",
         dir_ + "/port", "--db", dir_ + "/c.db", "--metrics-address", "",
         "--detection-cycle-ms", "100"},
        "controller.log");
  std::string port;
  ASSERT_TRUE(WaitUntil([&] {
    std::ifstream in(dir_ + "/port");
    return static_cast<bool>(std::getline(in, port)) && !port.empty();
  }));
  const std::string target = absl::StrCat("127.0.0.1:", port);
  const std::string socket = dir_ + "/a.sock";
  Start({PITSTOP_AGENT_BIN, "--ingest-socket", socket, "--controller", target,
         "--host", "e2enode", "--metrics-address", ""},
        "agent.log");
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(socket); }));

  std::vector<pid_t> ranks;
  for (int r = 0; r < 4; ++r) {
    ranks.push_back(
        Start({PITSTOP_EMULATED_RANK_BIN, "--ops", "30", "--comm-hash", "0xabc",
               "--rank", absl::StrCat(r), "--nranks", "4", "--end",
               r == 3 ? "crash" : "finalize", "--linger-ms", "1500"},
              absl::StrCat("rank", r, ".log"),
              {"PITSTOP_AGENT_SOCKET=" + dir_ + "/a-shm.sock",
               absl::StrCat("RANK=", r), "PITSTOP_HOST=e2enode",
               "PITSTOP_JOB_ID=e2ejob",
               std::string("NCCL_PROFILER_PLUGIN=") + PITSTOP_PLUGIN_SO}));
  }
  for (pid_t pid : ranks) waitpid(pid, nullptr, 0);

  auto stub = v1::Controller::NewStub(TestChannel(target));
  v1::ControllerStatus status;
  std::vector<v1::Fault> faults;
  ASSERT_TRUE(WaitUntil(
      [&] {
        grpc::ClientContext c1, c2;
        v1::GetStatusResponse s;
        v1::ListFaultsResponse f;
        if (!stub->GetStatus(&c1, {}, &s).ok() ||
            !stub->ListFaults(&c2, {}, &f).ok()) {
          return false;
        }
        status = s.status();
        faults.assign(f.faults().begin(), f.faults().end());
        return status.collectives_joined() >= 30 && !faults.empty();
      },
      absl::Seconds(20)))
      << "joined " << status.collectives_joined() << ", faults "
      << faults.size();
  ASSERT_EQ(faults.size(), 1u) << faults[0].DebugString();
  const v1::Fault& f = faults[0];
  EXPECT_EQ(f.fault_class(), v1::FAULT_CLASS_PROCESS_DIED);
  EXPECT_EQ(f.job_id(), "e2ejob");
  ASSERT_EQ(f.suspects_size(), 1);
  EXPECT_EQ(f.suspects(0).global_rank(), 3);
  EXPECT_EQ(f.suspects(0).host(), "e2enode");
  EXPECT_EQ(f.suspects(0).pid(), static_cast<uint32_t>(ranks[3]));
  for (const v1::Suspect& v : f.victims()) EXPECT_NE(v.global_rank(), 3);
}

}  // namespace
}  // namespace pitstop::controller::testing
