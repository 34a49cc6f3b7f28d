// Upstream path: the in-process Agent (ingest + upstream client) against a
// real in-test AgentLink receiver over TCP.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/agent/agent.h"
#include "tests/agent/fake_rank.h"
#include "tests/agent/test_receiver.h"
#include "tests/agent/test_util.h"

namespace pitstop::agent {
namespace {

using testing::AddCompleteOps;
using testing::CountLifecycle;
using testing::CountSummaries;
using testing::Eventually;
using testing::FakeRank;
using testing::MakeGoodbye;
using testing::MakeHello;
using testing::TempDir;
using testing::TestReceiver;
using Reqs = std::vector<v1::ConnectRequest>;

constexpr uint64_t kComm = 0x5151;

class UpstreamTest : public ::testing::Test {
 protected:
  void StartAgent(const std::string& controller, uint32_t buffer = 1000) {
    AgentOptions o;
    o.ingest_socket = dir_.file("a.sock");
    o.controller = controller;
    o.host = "emu-node-3";
    o.batch_ms = 50;
    o.metrics_address = "";
    o.buffer_summaries = buffer;
    o.upstream_backoff_max_ms = 200;
    o.sysfs_root = dir_.file("sys");
    // The fake ranks of these tests claim pids (5, 9, 31, ...) that are
    // not this process's.
    o.ingest_verify_pid = false;
    auto a = Agent::Create(o, Clock::Real());
    ASSERT_TRUE(a.ok()) << a.status();
    agent_ = std::move(*a);
  }
  void MakeFakeSysfs() {
    namespace fs = std::filesystem;
    const fs::path ib = dir_.file("sys/class/infiniband/mlx5_0/ports/1");
    fs::create_directories(ib);
    std::ofstream(ib / "state") << "4: ACTIVE\n";
    std::ofstream(ib / "rate") << "200 Gb/sec (4X HDR)\n";
    const fs::path eth = dir_.file("sys/class/net/eth0");
    fs::create_directories(eth);
    std::ofstream(eth / "operstate") << "up\n";
    std::ofstream(eth / "speed") << "25000\n";
    fs::create_directories(dir_.file("sys/class/net/lo"));
  }
  void TearDown() override {
    if (agent_) agent_->Stop();
  }

  TempDir dir_;
  std::unique_ptr<Agent> agent_;
};

TEST_F(UpstreamTest, RegistersThenStreamsSummariesProgressAndLifecycle) {
  MakeFakeSysfs();
  TestReceiver receiver;
  StartAgent(receiver.address());
  ASSERT_TRUE(receiver.WaitUntil([](const Reqs& r) { return !r.empty(); }));
  const v1::ConnectRequest first = receiver.requests()[0];
  ASSERT_TRUE(first.has_registration());
  EXPECT_EQ(first.registration().host(), "emu-node-3");
  EXPECT_FALSE(first.registration().agent_id().empty());
  ASSERT_EQ(first.registration().nics_size(), 2);
  EXPECT_EQ(first.registration().nics(0).name(), "mlx5_0");
  EXPECT_EQ(first.registration().nics(0).kind(), v1::NicInfo::KIND_INFINIBAND);
  EXPECT_EQ(first.registration().nics(0).state(), "ACTIVE");
  EXPECT_EQ(first.registration().nics(0).speed_mbps(), 200'000u);
  EXPECT_EQ(first.registration().nics(1).name(), "eth0");
  EXPECT_EQ(first.registration().nics(1).speed_mbps(), 25'000u);

  FakeRank rank(dir_.file("a.sock"));
  auto hello = MakeHello(31, 7, kComm, 1, 2);
  AddCompleteOps(&hello, kComm, 1, 0, 20);
  ASSERT_TRUE(rank.Send(hello));
  // An op that never completes: the hang detector needs it in progress.
  v1::StreamTelemetryRequest stuck;
  stuck.set_batch_seq(2);
  v1::OpRecord* op = stuck.add_ops();
  op->set_op_id(1000);
  op->set_comm_hash(kComm);
  op->set_rank(1);
  op->set_func(v1::COLL_FUNC_ALL_REDUCE);
  op->set_seq_number(20);
  ASSERT_TRUE(rank.Send(stuck));
  ASSERT_TRUE(receiver.WaitUntil([](const Reqs& r) {
    return CountSummaries(r) == 20 &&
           CountLifecycle(r, v1::RankLifecycle::KIND_STREAM_OPENED) == 1;
  }));
  // Progress is sent in every batch for every local (comm, rank).
  ASSERT_TRUE(receiver.WaitUntil([](const Reqs& r) {
    int with_progress = 0;
    for (const auto& q : r) {
      for (const auto& p : q.progress()) {
        with_progress +=
            p.comm_hash() == kComm && p.oldest_incomplete_seq() == 20;
      }
    }
    return with_progress >= 3;
  }));
  Reqs reqs = receiver.requests();
  const v1::RankProgress* last = nullptr;
  for (const auto& q : reqs) {
    for (const auto& p : q.progress()) last = &p;
  }
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(last->global_rank(), 7);
  EXPECT_EQ(last->last_enqueued_seq(), 20u);
  EXPECT_EQ(last->last_completed_seq(), 19u);
  EXPECT_GT(last->oldest_incomplete_age_ns(), 0u);
  bool comm_seen = false;
  for (const auto& q : reqs) {
    for (const auto& c : q.communicators()) {
      comm_seen |= c.comm_hash() == kComm && c.host() == "emu-node-3" &&
                   c.global_ranks_size() == 2 && c.global_ranks(1) == 7;
    }
  }
  EXPECT_TRUE(comm_seen);
  for (const auto& q : reqs) {
    for (const auto& s : q.summaries()) {
      EXPECT_EQ(s.global_rank(), 7);
      EXPECT_EQ(s.pid(), 31u);
    }
  }
  rank.Cancel();  // dies without goodbye
  ASSERT_TRUE(receiver.WaitUntil([](const Reqs& r) {
    return CountLifecycle(r, v1::RankLifecycle::KIND_DIED) == 1;
  }));
}

TEST_F(UpstreamTest, CommandsReachRanksAndAreAcked) {
  TestReceiver receiver;
  StartAgent(receiver.address());
  FakeRank rank(dir_.file("a.sock"));
  ASSERT_TRUE(rank.Send(MakeHello(5, 0, kComm, 0, 1)));
  ASSERT_TRUE(receiver.WaitUntil([](const Reqs& r) {
    return CountLifecycle(r, v1::RankLifecycle::KIND_STREAM_OPENED) == 1;
  }));
  v1::AgentCommand cmd;
  cmd.set_command_id(91);
  cmd.mutable_set_activation_mask()->set_comm_hash(kComm);
  cmd.mutable_set_activation_mask()->set_rank(-1);
  cmd.mutable_set_activation_mask()->set_event_mask(0x58);
  cmd.mutable_set_activation_mask()->set_duration_ms(10'000);
  ASSERT_TRUE(receiver.SendCommand(cmd));
  v1::AgentCommand ping;
  ping.set_command_id(92);
  ping.set_ping(true);
  ASSERT_TRUE(receiver.SendCommand(ping));
  ASSERT_TRUE(rank.WaitForActivation(absl::Seconds(20)));
  EXPECT_EQ(rank.activations()[0].event_mask(), 0x58u);
  EXPECT_EQ(rank.activations()[0].command_id(), 91u);
  ASSERT_TRUE(receiver.WaitUntil([](const Reqs& r) {
    bool acked = false, pong = false;
    for (const auto& q : r) {
      for (uint64_t id : q.acked_command_ids()) acked |= id == 91;
      pong |= q.pong_command_id() == 92;
    }
    return acked && pong;
  }));
  rank.Send(MakeGoodbye());
  EXPECT_TRUE(rank.Close().ok());
  ASSERT_TRUE(receiver.WaitUntil([](const Reqs& r) {
    return CountLifecycle(r, v1::RankLifecycle::KIND_CLEAN_EXIT) == 1;
  }));
}

TEST_F(UpstreamTest, UnreachableControllerBuffersThenAggregatesThenCatchesUp) {
  // Reserve a port, then start the receiver on it only later.
  int port = 0;
  {
    TestReceiver probe;
    port = probe.port();
  }
  const std::string address = "127.0.0.1:" + std::to_string(port);
  StartAgent(address, /*buffer=*/30);
  FakeRank rank(dir_.file("a.sock"));
  auto hello = MakeHello(8, 0, kComm, 0, 1);
  AddCompleteOps(&hello, kComm, 0, 0, 100);
  ASSERT_TRUE(rank.Send(hello));
  ASSERT_TRUE(Eventually(
      [&] { return agent_->core()->Counters().summaries_aggregated() == 70; }));
  EXPECT_FALSE(agent_->upstream()->connected());
  TestReceiver receiver(address);
  ASSERT_EQ(receiver.port(), port);
  ASSERT_TRUE(receiver.WaitUntil([](const Reqs& r) {
    uint64_t aggregated_ops = 0;
    for (const auto& q : r) {
      for (const auto& a : q.aggregates()) aggregated_ops += a.ops();
    }
    return CountSummaries(r) == 30 && aggregated_ops == 70;
  }));
  Reqs reqs = receiver.requests();
  EXPECT_TRUE(reqs[0].has_registration());
  EXPECT_EQ(reqs.back().counters().summaries_aggregated(), 70u);
  rank.Send(MakeGoodbye());
  EXPECT_TRUE(rank.Close().ok());
}

TEST_F(UpstreamTest, ReconnectsAfterTheControllerRestarts) {
  auto receiver = std::make_unique<TestReceiver>();
  const int port = receiver->port();
  StartAgent(receiver->address());
  FakeRank rank(dir_.file("a.sock"));
  auto hello = MakeHello(9, 0, kComm, 0, 1);
  AddCompleteOps(&hello, kComm, 0, 0, 5);
  ASSERT_TRUE(rank.Send(hello));
  ASSERT_TRUE(receiver->WaitUntil(
      [](const Reqs& r) { return CountSummaries(r) == 5; }));
  receiver.reset();  // controller goes away
  v1::StreamTelemetryRequest more;
  more.set_batch_seq(2);
  AddCompleteOps(&more, kComm, 0, 5, 5);
  ASSERT_TRUE(rank.Send(more));
  ASSERT_TRUE(Eventually([&] {
    return !agent_->upstream()->connected() &&
           agent_->core()->buffer()->counters().queued == 5;
  }));
  receiver =
      std::make_unique<TestReceiver>("127.0.0.1:" + std::to_string(port));
  ASSERT_TRUE(receiver->WaitUntil([](const Reqs& r) {
    return !r.empty() && r[0].has_registration() && CountSummaries(r) == 5;
  }));
  // Re-registration carries the communicators already known.
  EXPECT_EQ(receiver->requests()[0].communicators_size(), 1);
  EXPECT_GE(agent_->upstream()->connects(), 2u);
  rank.Send(MakeGoodbye());
  EXPECT_TRUE(rank.Close().ok());
}

// A peer that accepts TCP but never speaks HTTP/2 (like a black-holed
// address): the agent must not count it as connected.
TEST_F(UpstreamTest, SilentPeerIsNotConnected) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 16), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  StartAgent("127.0.0.1:" + std::to_string(ntohs(addr.sin_port)));
  // Long enough for several attempts of the old code (one per ~1 s).
  for (int i = 0; i < 30; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    EXPECT_FALSE(agent_->upstream()->connected());
  }
  EXPECT_EQ(agent_->upstream()->connects(), 0u);
  agent_->Stop();  // returns although the peer never answers
  close(fd);
}

TEST_F(UpstreamTest, LastBatchOnStopSaysAgentStopping) {
  TestReceiver receiver;
  StartAgent(receiver.address());
  FakeRank rank(dir_.file("a.sock"));
  ASSERT_TRUE(rank.Send(MakeHello(10, 0, kComm, 0, 1)));
  ASSERT_TRUE(receiver.WaitUntil([](const Reqs& r) {
    for (const auto& q : r) {
      if (q.progress_size() > 0) return true;
    }
    return false;
  }));
  agent_->Stop();
  const Reqs reqs = receiver.requests();
  ASSERT_FALSE(reqs.empty());
  EXPECT_TRUE(reqs.back().agent_stopping());
  for (size_t i = 0; i + 1 < reqs.size(); ++i) {
    EXPECT_FALSE(reqs[i].agent_stopping()) << i;
  }
}

}  // namespace
}  // namespace pitstop::agent
