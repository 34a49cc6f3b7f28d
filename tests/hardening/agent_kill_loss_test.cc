// Issue #11, "lost without a count": a real pitstop-agent killed with
// SIGKILL while an emulated rank (the real libnccl-profiler-pitstop.so
// driven by the NCCL emulator) streams through it; a new agent takes over
// the socket and the rank reconnects. The controller (real process) counts
// what the killed agent had read and never delivered, from the rank's own
// counters in its hello to the new agent (docs/reliability.md).
//
// Asserted, once the rank has finished and everything it sent has been
// read: lost_in_agent == sent_by_ranks - received, exactly, where
// sent_by_ranks is the rank's own produced - dropped (its goodbye),
// received what the agents' batches said they had read; and the loss is not
// zero (the kill lands between two batches of a 2 s period). A rank that
// restarts (counters from zero) is not counted as a loss.
#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "pitstop/v1/controller.grpc.pb.h"
#include "tests/agent/process_util.h"
#include "tests/agent/test_util.h"
#include "tests/controller/test_agent.h"

namespace pitstop {
namespace {

using agent::testing::BinaryPath;
using agent::testing::Eventually;
using agent::testing::Process;
using agent::testing::ReadFile;
using agent::testing::TempDir;

constexpr char kHost[] = "loss-node";

class AgentKillLossTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string port_file = dir_.file("port");
    controller_ = std::make_unique<Process>(
        std::vector<std::string>{
            BinaryPath("src/controller/pitstop-controller"), "--listen",
            "127.0.0.1:0", "--port-file", port_file, "--db", dir_.file("c.db"),
            "--metrics-address", ""},
        std::vector<std::string>{}, dir_.file("c.out"), dir_.file("c.err"));
    std::string port;
    ASSERT_TRUE(Eventually([&] {
      std::ifstream in(port_file);
      return static_cast<bool>(std::getline(in, port)) && !port.empty();
    })) << ReadFile(dir_.file("c.err"));
    target_ = absl::StrCat("127.0.0.1:", port);
    stub_ = v1::Controller::NewStub(controller::testing::TestChannel(target_));
  }
  void TearDown() override {
    if (agent_) {
      agent_->Signal(SIGTERM);
      agent_->Wait();
    }
    controller_->Signal(SIGTERM);
    controller_->Wait();
  }

  void StartAgent(const std::string& batch_ms) {
    const std::string n = std::to_string(agents_++);
    agent_ = std::make_unique<Process>(
        std::vector<std::string>{BinaryPath("src/agent/pitstop-agent"),
                                 "--ingest-socket", sock_, "--controller",
                                 target_, "--host", kHost, "--batch-ms",
                                 batch_ms, "--metrics-address", ""},
        std::vector<std::string>{}, dir_.file("agent" + n + ".out"),
        dir_.file("agent" + n + ".err"));
    ASSERT_GE(agent::testing::WaitAgentReady(dir_.file("agent" + n + ".out"),
                                             agent_.get()),
              0)
        << ReadFile(dir_.file("agent" + n + ".err"));
  }

  std::unique_ptr<Process> StartRank(const std::string& name, int colls,
                                     int rate) {
    return std::make_unique<Process>(
        std::vector<std::string>{BinaryPath("tests/agent/pitstop_emu_rank"),
                                 "0", "1", std::to_string(colls),
                                 std::to_string(rate), "finalize"},
        std::vector<std::string>{
            "PITSTOP_AGENT_SOCKET=" + shm_sock_, "RANK=0",
            std::string("PITSTOP_HOST=") + kHost, "PITSTOP_JOB_ID=loss",
            "PITSTOP_RECONNECT_MAX_MS=50", "PITSTOP_FINALIZE_TIMEOUT_MS=30000"},
        dir_.file(name + ".out"), dir_.file(name + ".err"));
  }

  // Runs pitstopctl against the controller; its stdout.
  std::string Ctl(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {BinaryPath("tools/pitstopctl/pitstopctl"),
                                     "--controller", target_};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string out = dir_.file(absl::StrCat("ctl", ctl_runs_++));
    Process ctl(argv, {}, out, out + ".err");
    ctl.Wait();
    return ReadFile(out);
  }

  v1::Node GetNode() {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    v1::GetNodeRequest req;
    req.set_host(kHost);
    v1::GetNodeResponse resp;
    if (!stub_->GetNode(&ctx, req, &resp).ok()) return v1::Node();
    return resp.node();
  }

  // Waits until the node's record counts stop moving for 1.5 s (several
  // batches of the 200 ms agent) with no rank connected.
  v1::Node Settled() {
    v1::Node last;
    int same = 0;
    for (int i = 0; i < 300 && same < 6; ++i) {
      absl::SleepFor(absl::Milliseconds(250));
      v1::Node n = GetNode();
      const bool equal =
          n.connected_ranks() == 0 &&
          n.records_sent_by_ranks() == last.records_sent_by_ranks() &&
          n.records_received() == last.records_received() &&
          n.records_lost_in_agent() == last.records_lost_in_agent();
      same = equal ? same + 1 : 0;
      last = n;
    }
    return last;
  }

  TempDir dir_;
  std::string sock_ = dir_.file("agent.sock");
  // The library's transport: ingest.shm_socket derived from ingest.socket.
  std::string shm_sock_ = dir_.file("agent-shm.sock");
  std::unique_ptr<Process> controller_;
  std::string target_;
  std::unique_ptr<v1::Controller::Stub> stub_;
  std::unique_ptr<Process> agent_;
  int agents_ = 0;
  int ctl_runs_ = 0;
};

TEST_F(AgentKillLossTest, KilledAgentLossEqualsSentMinusReceived) {
  // A 2 s batch period: the kill below lands well inside one.
  StartAgent("2000");
  // 12 s of collectives at 500/s; the rank outlives the first agent.
  std::unique_ptr<Process> rank = StartRank("rank", 6000, 500);
  // Kill right after a batch reached the controller: what the agent reads
  // in the next ~0.5 s has not been delivered yet.
  uint64_t received = 0;
  ASSERT_TRUE(
      Eventually([&] { return (received = GetNode().records_received()) > 0; },
                 absl::Seconds(30)))
      << ReadFile(dir_.file("agent0.err"));
  ASSERT_TRUE(
      Eventually([&] { return GetNode().records_received() != received; },
                 absl::Seconds(30)));
  absl::SleepFor(absl::Milliseconds(500));
  agent_->Signal(SIGKILL);
  agent_->Wait();
  const v1::Node at_kill = GetNode();

  StartAgent("200");
  const int st = rank->Wait(absl::Seconds(90));
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
      << st << ReadFile(dir_.file("rank.err"));
  const v1::Node n = Settled();
  std::cout << "killed agent: controller had received "
            << at_kill.records_received() << " records at the kill; at the end "
            << "sent by ranks " << n.records_sent_by_ranks() << ", received "
            << n.records_received() << ", lost in agent "
            << n.records_lost_in_agent() << "\n";
  EXPECT_GT(n.records_lost_in_agent(), 0u) << ReadFile(dir_.file("c.err"));
  EXPECT_EQ(n.records_lost_in_agent(),
            n.records_sent_by_ranks() - n.records_received());
  // The rank really sent more than the controller got before the kill.
  EXPECT_GT(n.records_sent_by_ranks(), at_kill.records_received());
  // Said where operators look: the controller's log, `pitstopctl nodes`
  // (LOST), `pitstopctl nodes HOST` and -o json.
  EXPECT_NE(ReadFile(dir_.file("c.err")).find("never delivered"),
            std::string::npos);
  const std::string lost = absl::StrCat(n.records_lost_in_agent());
  const std::string detail = Ctl({"nodes", kHost});
  const size_t row = detail.find("records lost in agent (killed)");
  ASSERT_NE(row, std::string::npos) << detail;
  const std::string line = detail.substr(row, detail.find('\n', row) - row);
  EXPECT_EQ(line.substr(line.find_last_of(' ') + 1), lost) << detail;
  EXPECT_NE(Ctl({"-o", "json", "nodes", kHost})
                .find(absl::StrCat("\"records_lost_in_agent\":\"", lost, "\"")),
            std::string::npos)
      << Ctl({"-o", "json", "nodes", kHost});
  const std::string table = Ctl({"nodes"});
  EXPECT_NE(table.find("LOST"), std::string::npos) << table;
  EXPECT_NE(table.find(absl::StrCat(" ", lost, " ")), std::string::npos)
      << table;
}

TEST_F(AgentKillLossTest, RestartedRankAndCleanRunCountNoLoss) {
  StartAgent("200");
  // One rank, then the "same" rank restarted: counters from zero.
  for (const char* name : {"first", "restarted"}) {
    std::unique_ptr<Process> rank = StartRank(name, 400, 400);
    const int st = rank->Wait(absl::Seconds(60));
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
        << st << ReadFile(dir_.file(std::string(name) + ".err"));
  }
  const v1::Node n = Settled();
  std::cout << "clean: sent by ranks " << n.records_sent_by_ranks()
            << ", received " << n.records_received() << ", lost in agent "
            << n.records_lost_in_agent() << "\n";
  EXPECT_GT(n.records_received(), 800u);  // at least one record per coll
  EXPECT_EQ(n.records_lost_in_agent(), 0u);
  EXPECT_EQ(n.records_sent_by_ranks(), n.records_received());
}

}  // namespace
}  // namespace pitstop
