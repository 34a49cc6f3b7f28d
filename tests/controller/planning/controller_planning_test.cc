// The live flow plan inside the controller: agent batches feed it, the
// core sends each new epoch to the job's agents as a PathDirective and
// records their acks; GetFlowPlan / ListLinks / SetLinkHealth through the
// core and over gRPC (error codes), and planning off without a fabric.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pitstop/clock.h"
#include "pitstop/sync.h"
#include "pitstop/v1/controller.grpc.pb.h"
#include "src/controller/api/controller_service.h"
#include "src/controller/controller.h"
#include "tests/controller/test_agent.h"

namespace pitstop::controller {
namespace {

using ::testing::HasSubstr;

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

class ControllerPlanningTest : public ::testing::Test {
 protected:
  void Open(const std::string& fabric) {
    Controller::Options o;
    o.clock = &clock_;
    o.db_path = ":memory:";
    o.planning.fabric = fabric;
    auto core = Controller::Create(o);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
  }
  // 2 hosts x 2 GPUs, one ring communicator of 4 ranks, 2 channels.
  void Connect() {
    for (int h = 0; h < 2; ++h) {
      v1::NodeRegistration reg;
      reg.set_host(absl::StrCat("node", h));
      reg.set_agent_id(absl::StrCat("a", h));
      auto s = core_->AgentConnected(reg, &sinks_[h]);
      ASSERT_TRUE(s.ok()) << s.status();
      sessions_[h] = *s;
    }
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
  std::vector<v1::PathDirective> Paths(int h) {
    std::vector<v1::PathDirective> out;
    for (const v1::AgentCommand& c : sinks_[h].commands()) {
      if (c.has_path()) out.push_back(c.path());
    }
    return out;
  }

  FakeClock clock_;
  std::unique_ptr<Controller> core_;
  CapturingSink sinks_[2];
  uint64_t sessions_[2] = {0, 0};
};

TEST_F(ControllerPlanningTest, OffWithoutAFabric) {
  Open("");
  v1::GetFlowPlanRequest req;
  req.set_job_id("job7");
  EXPECT_EQ(core_->planning().GetFlowPlan(req).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(core_->planning().GetFlowPlan(req).status().message(),
              HasSubstr("--fabric"));
  EXPECT_EQ(core_->planning().ListLinks({}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(core_->planning().Run().empty());
}

TEST_F(ControllerPlanningTest, BadFabricFailsCreate) {
  Controller::Options o;
  o.clock = &clock_;
  o.planning.fabric = "/no/such/topology.txt";
  auto core = Controller::Create(o);
  ASSERT_FALSE(core.ok());
  EXPECT_THAT(core.status().message(), HasSubstr("/no/such/topology.txt"));
}

TEST_F(ControllerPlanningTest, EpochsReachTheAgentsAndTheirAcksAreRecorded) {
  Open("gen:leafspine,gpus=4,gpus_per_host=2,hosts_per_tor=1,tor_uplinks=2");
  Connect();
  clock_.Advance(absl::Seconds(3));
  const std::map<std::string, uint64_t> planned = core_->planning().Run();
  ASSERT_EQ(planned.at("job7"), 1u);
  for (int h = 0; h < 2; ++h) {
    const std::vector<v1::PathDirective> d = Paths(h);
    ASSERT_EQ(d.size(), 1u) << h;
    EXPECT_EQ(d[0].job_id(), "job7");
    EXPECT_EQ(d[0].epoch(), 1u);
    ASSERT_EQ(d[0].comms_size(), 1);
    EXPECT_EQ(d[0].comms(0).comm_hash(), kComm);
  }
  // node0's agent acks; node1's not yet.
  uint64_t id = 0;
  for (const v1::AgentCommand& c : sinks_[0].commands()) {
    if (c.has_path()) id = c.command_id();
  }
  v1::ConnectRequest ack;
  ack.add_acked_command_ids(id);
  ASSERT_TRUE(core_->AgentBatch(sessions_[0], ack).ok());
  v1::GetFlowPlanRequest req;
  req.set_job_id("job7");
  absl::StatusOr<v1::FlowPlan> plan = core_->planning().GetFlowPlan(req);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->epoch(), 1u);
  EXPECT_EQ(plan->network_flows(), 4u);  // 2 boundary hops x 2 channels
  ASSERT_EQ(plan->hosts_size(), 2);
  EXPECT_EQ(plan->hosts(0).host(), "node0");
  EXPECT_EQ(plan->hosts(0).epoch_acked(), 1u);
  EXPECT_EQ(plan->hosts(1).epoch_acked(), 0u);

  // An operator marks a spine: the jobs crossing it are re-planned at once
  // and the new epoch goes out.
  v1::SetLinkHealthRequest mark;
  mark.set_link("spine0");
  mark.set_degraded(true);
  mark.set_who("op");
  absl::StatusOr<v1::SetLinkHealthResponse> r =
      core_->planning().SetLinkHealth(mark);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->links().empty());
  if (r->replanned().count("job7")) {
    EXPECT_EQ(r->replanned().at("job7"), 2u);
    EXPECT_EQ(Paths(0).back().epoch(), 2u);
  } else {
    // Every flow was on spine1 already: nothing crossed, no new epoch.
    absl::StatusOr<v1::FlowPlan> now = core_->planning().GetFlowPlan(req);
    ASSERT_TRUE(now.ok());
    for (const v1::PlannedFlow& f : now->planned_flows()) {
      for (const std::string& l : f.path()) {
        EXPECT_EQ(l.find("spine0"), std::string::npos) << l;
      }
    }
  }
  v1::ListLinksRequest lr;
  lr.set_job_id("job7");
  absl::StatusOr<v1::ListLinksResponse> links = core_->planning().ListLinks(lr);
  ASSERT_TRUE(links.ok());
  int degraded = 0;
  for (const v1::LinkStatus& l : links->links()) {
    degraded += l.health() == v1::LINK_HEALTH_DEGRADED;
    if (l.health() == v1::LINK_HEALTH_DEGRADED) {
      EXPECT_EQ(l.flows(), 0u) << l.name();  // the plan avoids it
    }
  }
  EXPECT_GT(degraded, 0);
}

TEST_F(ControllerPlanningTest, ApiErrorCodesOverGrpc) {
  Open("gen:leafspine,gpus=4,gpus_per_host=2,hosts_per_tor=1,tor_uplinks=2");
  auto server = ControllerServer::Start(core_.get(), "127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::Controller::NewStub(
      testing::TestChannel(absl::StrCat("127.0.0.1:", (*server)->port())));
  auto call = [&](const std::string& job) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    v1::GetFlowPlanRequest req;
    req.set_job_id(job);
    v1::GetFlowPlanResponse resp;
    return stub->GetFlowPlan(&ctx, req, &resp);
  };
  EXPECT_EQ(call("").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  grpc::Status nf = call("nope");
  EXPECT_EQ(nf.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(nf.error_message(), HasSubstr("no connections learned"));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::SetLinkHealthRequest bad;
  bad.set_link("spine9");
  bad.set_degraded(true);
  v1::SetLinkHealthResponse resp;
  grpc::Status st = stub->SetLinkHealth(&ctx, bad, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("spine9"));
  (*server).reset();
}

}  // namespace
}  // namespace pitstop::controller
