// End to end: emulated rank processes (NCCL emulator harness + the real
// libnccl-profiler-pitstop.so) -> real pitstop-agent process -> in-test
// AgentLink receiver.
#include <signal.h>
#include <sys/wait.h>

#include <map>
#include <set>

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
using testing::Process;
using testing::ReadFile;
using testing::TempDir;
using testing::TestReceiver;
using Reqs = std::vector<v1::ConnectRequest>;

constexpr uint64_t kComm = 0xE2E1;

class E2eTest : public ::testing::Test {
 protected:
  // Starts (or restarts) the agent; returns its metrics port.
  int StartAgent(const std::vector<std::string>& extra = {}) {
    agent_.reset();
    const std::string n = std::to_string(agent_starts_++);
    std::vector<std::string> argv = {
        testing::BinaryPath("src/agent/pitstop-agent"),
        "--ingest-socket",
        sock_,
        "--controller",
        receiver_.address(),
        "--host",
        "emu-node-0",
        "--batch-ms",
        "200",
        "--metrics-address",
        "127.0.0.1:0",
        "--log-level",
        "debug"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    agent_ = std::make_unique<Process>(argv, std::vector<std::string>{},
                                       dir_.file("agent" + n + ".out"),
                                       dir_.file("agent" + n + ".err"));
    const int port =
        testing::WaitAgentReady(dir_.file("agent" + n + ".out"), agent_.get());
    return port;
  }
  std::unique_ptr<Process> StartRank(int rank, int n_ranks, int colls, int rate,
                                     const std::string& mode) {
    const std::string r = std::to_string(rank);
    return std::make_unique<Process>(
        std::vector<std::string>{
            testing::BinaryPath("tests/agent/pitstop_emu_rank"), r,
            std::to_string(n_ranks), std::to_string(colls),
            std::to_string(rate), mode},
        std::vector<std::string>{"PITSTOP_AGENT_SOCKET=" + shm_sock_,
                                 "RANK=" + r, "PITSTOP_HOST=emu-node-0",
                                 "PITSTOP_JOB_ID=e2e",
                                 "PITSTOP_RECONNECT_MAX_MS=50",
                                 // Slow sanitizer builds on 2 cores: let
                                 // finalize wait for the last flush.
                                 "PITSTOP_FINALIZE_TIMEOUT_MS=30000"},
        dir_.file("rank" + r + ".out"), dir_.file("rank" + r + ".err"));
  }
  void TearDown() override {
    if (agent_) {
      agent_->Signal(SIGTERM);
      agent_->Wait();
    }
  }

  // What arrived per rank, and what the agent and ranks said: enough to tell
  // records dropped in the process from records lost on the way.
  std::string Diagnose(int n_ranks) {
    const Reqs reqs = receiver_.requests();
    std::map<int, int> per_rank;
    std::map<int, std::set<uint64_t>> seqs;
    std::string events;
    for (const auto& q : reqs) {
      for (const auto& s : q.summaries()) {
        ++per_rank[s.rank()];
        seqs[s.rank()].insert(s.seq_number());
      }
      for (const auto& l : q.lifecycle()) {
        absl::StrAppend(&events, "lifecycle rank ", l.global_rank(), " kind ",
                        l.kind(), "\n");
      }
      for (const auto& a : q.aggregates()) {
        absl::StrAppend(&events, "aggregate ops ", a.ops(), "\n");
      }
      if (q.has_counters()) {
        absl::StrAppend(&events, "counters ", q.counters().ShortDebugString(),
                        "\n");
      }
    }
    for (const auto& [rank, s] : seqs) {
      absl::StrAppend(&events, "rank ", rank, " seqs:");
      for (uint64_t v : s) absl::StrAppend(&events, " ", v);
      absl::StrAppend(&events, "\n");
    }
    std::string out = absl::StrCat(
        "summaries=", CountSummaries(reqs), " clean_exits=",
        CountLifecycle(reqs, v1::RankLifecycle::KIND_CLEAN_EXIT), "\n");
    for (const auto& [rank, n] : per_rank) {
      absl::StrAppend(&out, "rank ", rank, ": ", n, "\n");
    }
    absl::StrAppend(&out, events);
    for (int r = 0; r < n_ranks; ++r) {
      absl::StrAppend(&out, "rank", r, ".err: ",
                      ReadFile(dir_.file(absl::StrCat("rank", r, ".err"))));
    }
    for (int n = 0; n < agent_starts_; ++n) {
      absl::StrAppend(
          &out, "agent", n,
          ".err: ", ReadFile(dir_.file(absl::StrCat("agent", n, ".err"))),
          "agent", n,
          ".out: ", ReadFile(dir_.file(absl::StrCat("agent", n, ".out"))));
    }
    return out;
  }

  TempDir dir_;
  std::string sock_ = dir_.file("agent.sock");
  // The library's transport: ingest.shm_socket derived from ingest.socket.
  std::string shm_sock_ = dir_.file("agent-shm.sock");
  TestReceiver receiver_;
  std::unique_ptr<Process> agent_;
  int agent_starts_ = 0;
};

TEST_F(E2eTest, EightRanksThroughThePluginReachTheReceiver) {
  // The operator asked for per-communicator series (metrics.*, issue #33
  // N7: off by default).
  const int port = StartAgent({"--metrics-communicator-labels=true"});
  ASSERT_GT(port, 0);
  constexpr int kRanks = 8, kColls = 40;
  std::vector<std::unique_ptr<Process>> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.push_back(StartRank(r, kRanks, kColls, 0, "finalize"));
  }
  for (int r = 0; r < kRanks; ++r) {
    const int st = ranks[r]->Wait();
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
        << ReadFile(dir_.file("rank" + std::to_string(r) + ".err"));
  }
  ASSERT_TRUE(receiver_.WaitUntil([](const Reqs& r) {
    return CountSummaries(r) == kRanks * kColls &&
           CountLifecycle(r, v1::RankLifecycle::KIND_CLEAN_EXIT) == kRanks;
  })) << Diagnose(kRanks);
  std::map<int, std::set<uint64_t>> seqs;
  for (const auto& q : receiver_.requests()) {
    for (const auto& s : q.summaries()) {
      ASSERT_EQ(s.comm_hash(), kComm);
      ASSERT_EQ(s.state(), v1::OP_STATE_COMPLETED);
      ASSERT_EQ(s.global_rank(), s.rank());  // RANK env == comm rank here
      // max over channels of GPU stop - start, as the emulator scripted it.
      ASSERT_EQ(s.kernel_duration_ns(), 40'000u + 1'000u * s.rank());
      // Converted to the node clock with the fitted offset: near the real
      // time the kernel ran, not 7000 s away.
      ASSERT_NE(s.kernel_start_cpu_ns(), 0u);
      ASSERT_LE(s.kernel_start_cpu_ns(), s.completion_cpu_ns());
      ASSERT_LT(s.completion_cpu_ns() - s.kernel_start_cpu_ns(),
                1'000'000'000u);
      ASSERT_EQ(s.func(), v1::COLL_FUNC_ALL_REDUCE);
      ASSERT_GE(s.connections_size(), 2);  // send + recv per channel
      ASSERT_GT(s.bus_bandwidth_bps(), 0) << s.DebugString();
      seqs[s.rank()].insert(s.seq_number());
    }
  }
  ASSERT_EQ(seqs.size(), static_cast<size_t>(kRanks));
  for (const auto& [rank, s] : seqs) EXPECT_EQ(s.size(), kColls) << rank;
  // The registration and communicators name the (emulated) host.
  const Reqs reqs = receiver_.requests();
  EXPECT_EQ(reqs[0].registration().host(), "emu-node-0");
  std::set<int> comm_ranks;
  for (const auto& q : reqs) {
    for (const auto& c : q.communicators()) {
      if (c.comm_hash() == kComm && c.host() == "emu-node-0") {
        comm_ranks.insert(c.rank());
      }
    }
  }
  EXPECT_EQ(comm_ranks.size(), static_cast<size_t>(kRanks));
  std::string metrics;
  ASSERT_TRUE(Eventually([&] {
    metrics = testing::HttpGet(port, "/metrics");
    return metrics.find(
               "pitstop_agent_ops_total{comm=\"0xe2e1\","
               "func=\"COLL_FUNC_ALL_REDUCE\"} 320") != std::string::npos;
  })) << metrics;
  EXPECT_THAT(metrics, HasSubstr("pitstop_agent_plugin_dropped 0"));
}

TEST_F(E2eTest, SigkilledRankIsReportedDied) {
  ASSERT_GT(StartAgent(), 0);
  auto ok_rank = StartRank(0, 2, 10, 0, "finalize");
  auto doomed = StartRank(1, 2, 10, 0, "hold");
  EXPECT_EQ(ok_rank->Wait(), 0);
  ASSERT_TRUE(Eventually(
      [&] { return ReadFile(dir_.file("rank1.out")).find("ran 10") == 0; }));
  ASSERT_TRUE(receiver_.WaitUntil([](const Reqs& r) {
    return CountSummaries(r) == 20 &&
           CountLifecycle(r, v1::RankLifecycle::KIND_STREAM_OPENED) == 2;
  }));
  doomed->Signal(SIGKILL);
  doomed->Wait();
  ASSERT_TRUE(receiver_.WaitUntil([](const Reqs& r) {
    return CountLifecycle(r, v1::RankLifecycle::KIND_DIED) == 1 &&
           CountLifecycle(r, v1::RankLifecycle::KIND_CLEAN_EXIT) == 1;
  }));
  for (const auto& q : receiver_.requests()) {
    for (const auto& l : q.lifecycle()) {
      if (l.kind() != v1::RankLifecycle::KIND_DIED) continue;
      EXPECT_EQ(l.pid(), static_cast<uint32_t>(doomed->pid()));
      EXPECT_EQ(l.global_rank(), 1);
      EXPECT_EQ(l.job_id(), "e2e");
    }
  }
}

// The agent restarts (SIGTERM, then a new process on the same socket) while
// ranks stream: every collective reaches the receiver unless the plugin
// counted it as dropped.
TEST_F(E2eTest, AgentRestartUnderLoadLosesOnlyWhatThePluginDropped) {
  ASSERT_GT(StartAgent(), 0);
  // Ranks run ~5 s so they are still streaming when the new agent is up.
  constexpr int kRanks = 2, kColls = 1500, kRate = 300;
  std::vector<std::unique_ptr<Process>> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.push_back(StartRank(r, kRanks, kColls, kRate, "finalize"));
  }
  // Both ranks stream to the first agent before it stops (under load a
  // rank can start after the other's first 100 collectives; it would then
  // open one stream, not two).
  ASSERT_TRUE(receiver_.WaitUntil([](const Reqs& r) {
    return CountSummaries(r) >= 100 &&
           CountLifecycle(r, v1::RankLifecycle::KIND_STREAM_OPENED) >= kRanks;
  }));
  agent_->Signal(SIGTERM);
  ASSERT_EQ(agent_->Wait(), 0);
  ASSERT_GT(StartAgent(), 0);
  // Both ranks reconnect to the new agent.
  ASSERT_TRUE(receiver_.WaitUntil(
      [](const Reqs& r) {
        return CountLifecycle(r, v1::RankLifecycle::KIND_STREAM_OPENED) >=
               2 * kRanks;
      },
      absl::Seconds(60)))
      << "streams opened "
      << CountLifecycle(receiver_.requests(),
                        v1::RankLifecycle::KIND_STREAM_OPENED)
      << "; rank 0: " << ReadFile(dir_.file("rank0.err"))
      << "; agent: " << ReadFile(dir_.file("agent1.err"));
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(ranks[r]->Wait(absl::Seconds(60)), 0)
        << ReadFile(dir_.file("rank" + std::to_string(r) + ".err"));
  }
  ASSERT_TRUE(receiver_.WaitUntil(
      [](const Reqs& r) {
        return CountLifecycle(r, v1::RankLifecycle::KIND_CLEAN_EXIT) == kRanks;
      },
      absl::Seconds(60)));
  // The second agent registered and carried part of the load.
  int registrations = 0, after_restart = 0;
  for (const auto& q : receiver_.requests()) {
    registrations += q.has_registration();
    if (registrations == 2) after_restart += q.summaries_size();
  }
  ASSERT_EQ(registrations, 2) << ReadFile(dir_.file("agent1.err"));
  EXPECT_GT(after_restart, 0);
  std::map<int, std::set<uint64_t>> seqs;
  uint64_t plugin_dropped = 0;
  for (const auto& q : receiver_.requests()) {
    for (const auto& s : q.summaries()) seqs[s.rank()].insert(s.seq_number());
    plugin_dropped = std::max(plugin_dropped, q.counters().plugin_dropped());
  }
  int missing = 0;
  for (int r = 0; r < kRanks; ++r) missing += kColls - seqs[r].size();
  // Each collective lost needs at least its OpRecord dropped by the plugin.
  EXPECT_LE(static_cast<uint64_t>(missing), plugin_dropped)
      << "missing " << missing << " dropped " << plugin_dropped;
}

}  // namespace
}  // namespace pitstop::agent
