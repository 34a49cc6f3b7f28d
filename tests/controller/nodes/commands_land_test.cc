// Commands that land (docs/controller.md): the controller keeps the
// commands an agent has not acked and writes them again, with the same
// command ids, to the stream of an agent that reconnects; an acked one is
// not written again. Counts per host in GetNode.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "pitstop/clock.h"
#include "pitstop/sync.h"
#include "src/controller/controller.h"

namespace pitstop::controller {
namespace {

constexpr uint64_t kComm = 0xabc;

class CapturingSink : public CommandSink {
 public:
  void Send(const v1::ConnectResponse& r) override {
    MutexLock lock(&mu_);
    for (const v1::AgentCommand& c : r.commands()) commands_.push_back(c);
  }
  std::vector<v1::AgentCommand> commands() {
    MutexLock lock(&mu_);
    return commands_;
  }

 private:
  Mutex mu_;
  std::vector<v1::AgentCommand> commands_ ABSL_GUARDED_BY(mu_);
};

class CommandsLandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Controller::Options o;
    o.clock = &clock_;
    o.db_path = ":memory:";
    o.planning.fabric =
        "gen:leafspine,gpus=4,gpus_per_host=2,hosts_per_tor=1,tor_uplinks=2";
    auto core = Controller::Create(o);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
  }
  uint64_t Register(int h, CommandSink* sink) {
    v1::NodeRegistration reg;
    reg.set_host(absl::StrCat("node", h));
    reg.set_agent_id(absl::StrCat("a", h));
    auto s = core_->AgentConnected(reg, sink);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : 0;
  }
  // 2 hosts x 2 GPUs, one ring communicator of 4 ranks.
  void Connect() {
    for (int h = 0; h < 2; ++h) sessions_[h] = Register(h, &sinks_[h]);
    for (int h = 0; h < 2; ++h) {
      v1::ConnectRequest batch;
      for (int r = 2 * h; r < 2 * h + 2; ++r) {
        v1::CommunicatorInfo* c = batch.add_communicators();
        c->set_comm_hash(kComm);
        c->set_rank(r);
        c->set_n_ranks(4);
        c->set_n_nodes(2);
        c->set_host(absl::StrCat("node", h));
        c->set_cuda_device(r % 2);
        c->set_job_id("job7");
        c->set_pid(100 + r);
        v1::CollectiveSummary* s = batch.add_summaries();
        s->set_comm_hash(kComm);
        s->set_rank(r);
        s->set_seq_number(1);
        s->set_func(v1::COLL_FUNC_ALL_REDUCE);
        s->set_kind(v1::OP_KIND_COLLECTIVE);
        s->set_n_channels(2);
        s->set_pid(100 + r);
        for (int ch = 0; ch < 2; ++ch) {
          v1::ConnectionSummary* cs = s->add_connections();
          cs->set_peer_rank((r + 1) % 4);
          cs->set_channel_id(ch);
          cs->set_is_send(true);
          cs->set_bytes(32 << 20);
          cs->set_duration_ns(3'000'000);
        }
      }
      ASSERT_TRUE(core_->AgentBatch(sessions_[h], batch).ok());
    }
  }
  static std::vector<v1::AgentCommand> Paths(CapturingSink* sink) {
    std::vector<v1::AgentCommand> out;
    for (const v1::AgentCommand& c : sink->commands()) {
      if (c.has_path()) out.push_back(c);
    }
    return out;
  }
  absl::Status Ack(uint64_t session, uint64_t id) {
    v1::ConnectRequest ack;
    ack.add_acked_command_ids(id);
    return core_->AgentBatch(session, ack);
  }

  FakeClock clock_;
  std::unique_ptr<Controller> core_;
  CapturingSink sinks_[2];
  uint64_t sessions_[2] = {0, 0};
};

TEST_F(CommandsLandTest, AnUnackedPlanIsSentAgainToAReconnectedAgentOnce) {
  Connect();
  clock_.Advance(absl::Seconds(3));
  ASSERT_EQ(core_->planning().Run().at("job7"), 1u);
  ASSERT_EQ(Paths(&sinks_[0]).size(), 1u);
  ASSERT_EQ(Paths(&sinks_[1]).size(), 1u);
  const uint64_t id0 = Paths(&sinks_[0])[0].command_id();
  const uint64_t id1 = Paths(&sinks_[1])[0].command_id();
  // node0 acks; node1's stream breaks before its ack arrives.
  ASSERT_TRUE(Ack(sessions_[0], id0).ok());
  core_->AgentDisconnected(sessions_[1]);

  // node1's agent comes back on a new stream: the plan again, same id.
  CapturingSink again1;
  const uint64_t s1 = Register(1, &again1);
  std::vector<v1::AgentCommand> resent = Paths(&again1);
  ASSERT_EQ(resent.size(), 1u);
  EXPECT_EQ(resent[0].command_id(), id1);
  EXPECT_EQ(resent[0].path().job_id(), "job7");
  EXPECT_EQ(resent[0].path().epoch(), 1u);
  // node0 acked: a new stream of it gets nothing.
  core_->AgentDisconnected(sessions_[0]);
  CapturingSink again0;
  Register(0, &again0);
  EXPECT_TRUE(again0.commands().empty());

  // The ack on the new stream ends it: the next reconnect gets nothing,
  // and the flow plan shows the epoch acked.
  ASSERT_TRUE(Ack(s1, id1).ok());
  core_->AgentDisconnected(s1);
  CapturingSink third1;
  Register(1, &third1);
  EXPECT_TRUE(third1.commands().empty());
  v1::GetFlowPlanRequest req;
  req.set_job_id("job7");
  absl::StatusOr<v1::FlowPlan> plan = core_->planning().GetFlowPlan(req);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->hosts_size(), 2);
  EXPECT_EQ(plan->hosts(1).epoch_acked(), 1u);

  absl::StatusOr<v1::Node> n1 = core_->nodes().Node("node1");
  ASSERT_TRUE(n1.ok()) << n1.status();
  EXPECT_EQ(n1->commands_sent(), 1u);
  EXPECT_EQ(n1->commands_resent(), 1u);
  EXPECT_EQ(n1->commands_acked(), 1u);
  EXPECT_EQ(n1->commands_unacked(), 0u);
  absl::StatusOr<v1::Node> n0 = core_->nodes().Node("node0");
  ASSERT_TRUE(n0.ok());
  EXPECT_EQ(n0->commands_sent(), 1u);
  EXPECT_EQ(n0->commands_resent(), 0u);
  EXPECT_EQ(n0->commands_acked(), 1u);
}

// A plan made while a known host's agent is away waits for it.
TEST_F(CommandsLandTest, APlanForAnAbsentAgentIsSentWhenItConnects) {
  Connect();
  core_->AgentDisconnected(sessions_[1]);
  clock_.Advance(absl::Seconds(3));
  ASSERT_EQ(core_->planning().Run().at("job7"), 1u);
  EXPECT_TRUE(Paths(&sinks_[1]).empty());
  CapturingSink back;
  Register(1, &back);
  ASSERT_EQ(Paths(&back).size(), 1u);
  EXPECT_EQ(Paths(&back)[0].path().epoch(), 1u);
  absl::StatusOr<v1::Node> n1 = core_->nodes().Node("node1");
  ASSERT_TRUE(n1.ok());
  EXPECT_EQ(n1->commands_sent(), 1u);
  EXPECT_EQ(n1->commands_resent(), 0u);
  EXPECT_EQ(n1->commands_unacked(), 1u);
}

// Command ids start from the controller's start time, so a restarted
// controller does not reuse ids its agents have applied (they apply an id
// once).
TEST_F(CommandsLandTest, CommandIdsDoNotRestartAtOne) {
  Connect();
  clock_.Advance(absl::Seconds(3));
  ASSERT_EQ(core_->planning().Run().at("job7"), 1u);
  ASSERT_EQ(Paths(&sinks_[0]).size(), 1u);
  EXPECT_GE(
      Paths(&sinks_[0])[0].command_id(),
      static_cast<uint64_t>(absl::ToUnixMicros(clock_.Now())) - 3'000'000);
}

}  // namespace
}  // namespace pitstop::controller
