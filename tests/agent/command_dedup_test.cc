// Commands that land, the agent's side (docs/controller.md): a command the
// controller writes again to a reconnected stream is acked again and not
// applied twice. The in-process Agent against a real in-test AgentLink
// receiver over TCP.
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/agent/agent.h"
#include "tests/agent/fake_rank.h"
#include "tests/agent/test_receiver.h"
#include "tests/agent/test_util.h"

namespace pitstop::agent {
namespace {

using testing::CountLifecycle;
using testing::Eventually;
using testing::FakeRank;
using testing::MakeGoodbye;
using testing::MakeHello;
using testing::TempDir;
using testing::TestReceiver;
using Reqs = std::vector<v1::ConnectRequest>;

constexpr uint64_t kComm = 0x5151;

class CommandDedupTest : public ::testing::Test {
 protected:
  void StartAgent(const std::string& controller) {
    AgentOptions o;
    o.ingest_socket = dir_.file("a.sock");
    o.controller = controller;
    o.host = "emu-node-3";
    o.batch_ms = 50;
    o.metrics_address = "";
    o.upstream_backoff_max_ms = 200;
    o.sysfs_root = dir_.file("sys");
    o.ingest_verify_pid = false;  // the fake rank claims pid 5
    auto a = Agent::Create(o, Clock::Real());
    ASSERT_TRUE(a.ok()) << a.status();
    agent_ = std::move(*a);
  }
  void TearDown() override {
    if (agent_) agent_->Stop();
  }

  TempDir dir_;
  std::unique_ptr<Agent> agent_;
};

// The controller writes a command again to a reconnected stream when it has
// no ack for it (the ack may have been lost with the old stream): the agent
// acks it again and does not apply it twice (docs/controller.md, "Commands
// that land").
TEST_F(CommandDedupTest, ACommandSentAgainOnANewStreamIsAppliedOnce) {
  auto receiver = std::make_unique<TestReceiver>();
  const int port = receiver->port();
  StartAgent(receiver->address());
  FakeRank rank(dir_.file("a.sock"));
  ASSERT_TRUE(rank.Send(MakeHello(5, 0, kComm, 0, 1)));
  ASSERT_TRUE(receiver->WaitUntil([](const Reqs& r) {
    return CountLifecycle(r, v1::RankLifecycle::KIND_STREAM_OPENED) == 1;
  }));
  auto mask = [](uint64_t id, uint32_t event_mask) {
    v1::AgentCommand cmd;
    cmd.set_command_id(id);
    cmd.mutable_set_activation_mask()->set_comm_hash(kComm);
    cmd.mutable_set_activation_mask()->set_rank(-1);
    cmd.mutable_set_activation_mask()->set_event_mask(event_mask);
    cmd.mutable_set_activation_mask()->set_duration_ms(10'000);
    return cmd;
  };
  auto acked = [](const Reqs& r, uint64_t id) {
    for (const auto& q : r) {
      for (uint64_t a : q.acked_command_ids()) {
        if (a == id) return true;
      }
    }
    return false;
  };
  ASSERT_TRUE(receiver->SendCommand(mask(91, 0x58)));
  ASSERT_TRUE(Eventually([&] { return rank.activations().size() == 1; }));
  ASSERT_TRUE(receiver->WaitUntil([&](const Reqs& r) { return acked(r, 91); }));
  // The stream breaks; the agent reconnects to the same address.
  receiver.reset();
  ASSERT_TRUE(Eventually([&] { return !agent_->upstream()->connected(); }));
  receiver =
      std::make_unique<TestReceiver>("127.0.0.1:" + std::to_string(port));
  ASSERT_TRUE(receiver->WaitUntil(
      [](const Reqs& r) { return !r.empty() && r[0].has_registration(); }));
  // 91 again (unacked as far as the controller knows), then a new one.
  ASSERT_TRUE(receiver->SendCommand(mask(91, 0x58)));
  ASSERT_TRUE(receiver->SendCommand(mask(93, 0x18)));
  ASSERT_TRUE(receiver->WaitUntil(
      [&](const Reqs& r) { return acked(r, 91) && acked(r, 93); }));
  // The rank gets 93 after 91 would have come (one reader, in order).
  ASSERT_TRUE(Eventually([&] { return rank.activations().size() >= 2; }));
  const auto activations = rank.activations();
  ASSERT_EQ(activations.size(), 2u);
  EXPECT_EQ(activations[0].command_id(), 91u);
  EXPECT_EQ(activations[1].command_id(), 93u);
  EXPECT_EQ(agent_->upstream()->duplicate_commands(), 1u);
  rank.Send(MakeGoodbye());
  EXPECT_TRUE(rank.Close().ok());
}

}  // namespace
}  // namespace pitstop::agent
