// The pitstop-agent binary as systemd runs it: real processes, real sockets.
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/agent/process_util.h"
#include "tests/agent/test_receiver.h"
#include "tests/agent/test_util.h"

namespace pitstop::agent {
namespace {

using testing::CountLifecycle;
using testing::CountSummaries;
using testing::Eventually;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::Process;
using testing::ReadFile;
using testing::TempDir;
using testing::TestReceiver;
using Reqs = std::vector<v1::ConnectRequest>;

std::string AgentBin() {
  return testing::BinaryPath("src/agent/pitstop-agent");
}
std::string RankBin() {
  return testing::BinaryPath("tests/agent/pitstop_fake_rank");
}

// Starts pitstop-agent and waits for its readiness line.
class AgentProcess {
 public:
  AgentProcess(const TempDir& dir, const std::string& name,
               std::vector<std::string> args, std::vector<std::string> env = {})
      : out_(dir.file(name + ".out")), err_(dir.file(name + ".err")) {
    args.insert(args.begin(), AgentBin());
    proc_ = std::make_unique<Process>(args, env, out_, err_);
  }
  // Metrics port from the readiness line; -1 if the agent never got ready.
  int WaitReady() { return testing::WaitAgentReady(out_, proc_.get()); }
  Process& proc() { return *proc_; }
  std::string err() const { return ReadFile(err_); }

 private:
  std::string out_, err_;
  std::unique_ptr<Process> proc_;
};

int ExitCode(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(AgentProcessTest, HelpListsTheFlags) {
  TempDir dir;
  AgentProcess a(dir, "help", {"--help"});
  EXPECT_EQ(ExitCode(a.proc().Wait()), 0);
  const std::string out = ReadFile(dir.file("help.out"));
  for (const char* flag :
       {"--ingest-socket", "--ingest-socket-group", "--controller", "--host",
        "--batch-ms", "--metrics-address", "--buffer-summaries", "--config",
        "--log-level"}) {
    EXPECT_THAT(out, HasSubstr(flag));
  }
}

TEST(AgentProcessTest, BadConfigNamesFileLineAndKey) {
  TempDir dir;
  const std::string cfg = dir.file("agent.yaml");
  std::ofstream(cfg) << "ingest:\n  socket: /tmp/x.sock\nbatch_ms: soon\n";
  AgentProcess a(dir, "bad", {"--config", cfg});
  EXPECT_EQ(ExitCode(a.proc().Wait()), 2);
  EXPECT_THAT(a.err(), HasSubstr(cfg + ":3:"));
  EXPECT_THAT(a.err(), HasSubstr("batch_ms"));
  std::ofstream(cfg) << "ingest:\n  sockett: /tmp/x.sock\n";
  AgentProcess b(dir, "typo", {"--config", cfg});
  EXPECT_EQ(ExitCode(b.proc().Wait()), 2);
  EXPECT_THAT(b.err(), HasSubstr("ingest.sockett"));
  // Values the schema parses but the agent cannot use: exit 2, key named.
  for (const char* bad : {"batch_ms: 0\n", "buffer:\n  summaries: 0\n",
                          "controller: no-port-here\n"}) {
    std::ofstream(cfg) << "ingest:\n  socket: " << dir.file("v.sock") << "\n"
                       << bad;
    AgentProcess c(dir, "range", {"--config", cfg, "--metrics-address", ""});
    EXPECT_EQ(ExitCode(c.proc().Wait()), 2) << bad << c.err();
    EXPECT_THAT(c.err(), HasSubstr(cfg)) << bad;
    const std::string key = std::string(bad).substr(0, 6);
    EXPECT_THAT(c.err(), HasSubstr(key)) << bad << c.err();
  }
  AgentProcess g(dir, "group",
                 {"--ingest-socket", dir.file("g.sock"), "--controller", "",
                  "--metrics-address", "", "--ingest-socket-group",
                  "no-such-group-pitstop"});
  EXPECT_EQ(ExitCode(g.proc().Wait()), 2) << g.err();
  EXPECT_THAT(g.err(), HasSubstr("ingest.socket_group"));
}

// Ranks as real processes: one ends cleanly, one is SIGKILLed; summaries,
// lifecycle and metrics reach the receiver; SIGTERM stops the agent cleanly.
TEST(AgentProcessTest, KilledRankIsReportedDiedAndMetricsShowTheNumbers) {
  TempDir dir;
  TestReceiver receiver;
  // sd_notify target.
  const std::string notify = dir.file("notify");
  const int nfd = testing::BindUnixSocket(notify, SOCK_DGRAM);
  ASSERT_GE(nfd, 0);
  const std::string sock = dir.file("agent.sock");
  const std::string cfg = dir.file("agent.yaml");
  std::ofstream(cfg) << "ingest:\n  socket: /nonexistent/overridden.sock\n"
                        "batch_ms: 100\nlog:\n  level: warn\n";
  AgentProcess agent(dir, "agent",
                     {"--config", cfg, "--ingest-socket", sock, "--controller",
                      receiver.address(), "--host", "node-k",
                      "--metrics-address", "127.0.0.1:0"},
                     {"NOTIFY_SOCKET=" + notify});
  const int port = agent.WaitReady();
  ASSERT_GT(port, 0) << agent.err();
  char buf[64] = {};
  ASSERT_GT(recv(nfd, buf, sizeof(buf) - 1, 0), 0);
  EXPECT_STREQ(buf, "READY=1");

  Process clean({RankBin(), sock, "0", "2", "300", "50", "goodbye"}, {},
                dir.file("r0.out"), dir.file("r0.err"));
  Process doomed({RankBin(), sock, "1", "2", "200", "50", "hold"}, {},
                 dir.file("r1.out"), dir.file("r1.err"));
  EXPECT_EQ(ExitCode(clean.Wait()), 0)
      << ReadFile(dir.file("r0.err")) << agent.err();
  ASSERT_TRUE(Eventually(
      [&] { return ReadFile(dir.file("r1.out")).find("sent 200") == 0; }));
  ASSERT_TRUE(receiver.WaitUntil([](const Reqs& r) {
    return CountSummaries(r) == 500 &&
           CountLifecycle(r, v1::RankLifecycle::KIND_CLEAN_EXIT) == 1;
  }));
  doomed.Signal(SIGKILL);
  doomed.Wait();
  ASSERT_TRUE(receiver.WaitUntil([](const Reqs& r) {
    return CountLifecycle(r, v1::RankLifecycle::KIND_DIED) == 1;
  }));
  for (const auto& q : receiver.requests()) {
    for (const auto& l : q.lifecycle()) {
      if (l.kind() == v1::RankLifecycle::KIND_DIED) {
        EXPECT_EQ(l.pid(), static_cast<uint32_t>(doomed.pid()));
        EXPECT_EQ(l.global_rank(), 1);
      }
    }
  }
  EXPECT_EQ(receiver.requests()[0].registration().host(), "node-k");

  std::string metrics;
  ASSERT_TRUE(Eventually([&] {
    metrics = testing::HttpGet(port, "/metrics");
    return metrics.find("pitstop_agent_rank_deaths_total 1") !=
           std::string::npos;
  })) << metrics;
  EXPECT_THAT(metrics, HasSubstr("pitstop_agent_ops_total{"
                                 "func=\"COLL_FUNC_ALL_REDUCE\"} 500"));
  // Issue #33 N7: /metrics has no credential; a communicator's hash on it
  // let a local process claim a rank of another job's communicator before
  // the job's own process did. No series names a communicator by default.
  EXPECT_THAT(metrics, Not(HasSubstr("comm=")));
  EXPECT_THAT(metrics, Not(HasSubstr("e2e0")));
  EXPECT_THAT(metrics, HasSubstr("pitstop_agent_upstream_connected 1"));
  EXPECT_THAT(metrics, HasSubstr("pitstop_agent_connected_ranks 0"));
  EXPECT_THAT(metrics, HasSubstr("pitstop_agent_op_duration_seconds_count"));
  EXPECT_THAT(metrics,
              HasSubstr("pitstop_agent_bus_bandwidth_bytes_per_second"));

  agent.proc().Signal(SIGTERM);
  EXPECT_EQ(ExitCode(agent.proc().Wait()), 0) << agent.err();
  EXPECT_FALSE(std::filesystem::exists(sock));
  ASSERT_GT(recv(nfd, buf, sizeof(buf) - 1, MSG_DONTWAIT), 0);
  close(nfd);
}

// Without a controller the metrics still follow what the ranks send.
TEST(AgentProcessTest, MetricsUpdateWithoutController) {
  TempDir dir;
  const std::string sock = dir.file("agent.sock");
  AgentProcess agent(dir, "agent",
                     {"--ingest-socket", sock, "--controller", "", "--batch-ms",
                      "100", "--metrics-address", "127.0.0.1:0"});
  const int port = agent.WaitReady();
  ASSERT_GT(port, 0) << agent.err();
  Process rank({RankBin(), sock, "0", "1", "30", "10", "goodbye"}, {},
               dir.file("r.out"), dir.file("r.err"));
  EXPECT_EQ(ExitCode(rank.Wait()), 0) << ReadFile(dir.file("r.err"));
  std::string metrics;
  EXPECT_TRUE(Eventually([&] {
    metrics = testing::HttpGet(port, "/metrics");
    // The stream's end reaches the agent a little after the rank exits.
    return metrics.find("pitstop_agent_records_ingested_total 0") ==
               std::string::npos &&
           metrics.find("pitstop_agent_records_ingested_total") !=
               std::string::npos &&
           metrics.find("pitstop_agent_connected_ranks 0") != std::string::npos;
  })) << metrics;
  EXPECT_THAT(metrics, HasSubstr("pitstop_agent_upstream_connected 0"));
  agent.proc().Signal(SIGTERM);
  EXPECT_EQ(ExitCode(agent.proc().Wait()), 0) << agent.err();
}

TEST(AgentProcessTest, StaleSocketOfKilledAgentIsReplacedLiveOneIsNot) {
  TempDir dir;
  const std::string sock = dir.file("agent.sock");
  const std::vector<std::string> args = {
      "--ingest-socket", sock, "--controller", "", "--metrics-address", ""};
  AgentProcess first(dir, "first", args);
  ASSERT_EQ(first.WaitReady(), 0) << first.err();
  AgentProcess second(dir, "second", args);
  EXPECT_EQ(ExitCode(second.proc().Wait()), 1);
  EXPECT_THAT(second.err(), HasSubstr("another agent"));
  first.proc().Signal(SIGKILL);
  first.proc().Wait();
  struct stat st;
  ASSERT_EQ(stat(sock.c_str(), &st), 0);  // left behind by the crash
  AgentProcess third(dir, "third", args);
  EXPECT_EQ(third.WaitReady(), 0) << third.err();
  // And it accepts streams.
  Process rank({RankBin(), sock, "0", "1", "10", "10", "goodbye"}, {},
               dir.file("r.out"), dir.file("r.err"));
  EXPECT_EQ(ExitCode(rank.Wait()), 0);
  third.proc().Signal(SIGTERM);
  EXPECT_EQ(ExitCode(third.proc().Wait()), 0);
}

}  // namespace
}  // namespace pitstop::agent
