// The Controller and AgentLink services over real loopback gRPC: agent
// telemetry in, faults out (list, get, watch), operator actions, and the
// error codes of bad requests.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pitstop/clock.h"
#include "pitstop/grpc_util.h"
#include "pitstop/v1/controller.grpc.pb.h"
#include "src/controller/api/controller_service.h"
#include "src/controller/controller.h"
#include "tests/controller/sim_job.h"
#include "tests/controller/test_agent.h"

namespace pitstop::controller::testing {
namespace {

using ::testing::HasSubstr;

class ControllerApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Controller::Options o;
    o.clock = &clock_;
    o.db_path = ":memory:";
    auto core = Controller::Create(o);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
    auto server = ControllerServer::Start(core_.get(), "127.0.0.1:0");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    target_ = absl::StrCat("127.0.0.1:", server_->port());
    stub_ = v1::Controller::NewStub(TestChannel(target_));
  }
  void TearDown() override {
    agents_.clear();
    server_.reset();
    core_.reset();
  }

  // Connects one agent per node of `job` and sends the membership plus a
  // progress report where `behind` ranks never enqueued seq 10.
  void ReportHang(const SimJob& job, std::set<int32_t> behind) {
    for (const v1::NodeRegistration& reg : job.Nodes()) {
      agents_.push_back(std::make_unique<TestAgent>(target_, reg));
    }
    for (int32_t r = 0; r < job.n_ranks(); ++r) {
      v1::ConnectRequest batch;
      *batch.add_communicators() = job.Info(r);
      v1::RankProgress p = job.Progress(r, behind.count(r) ? 9 : 10, 9);
      *batch.add_progress() = p;
      const size_t agent = r / (job.n_ranks() / agents_.size());
      ASSERT_TRUE(agents_[agent]->Send(batch));
    }
    // Every member's own batch (membership and progress together) was
    // ingested: a detection cycle now sees all of them.
    ASSERT_TRUE(WaitUntil([&] {
      auto comms = core_->ingest().Communicators("");
      if (comms.size() != 1 || comms[0].members_size() != job.n_ranks() ||
          core_->Status().nodes_ready() != agents_.size()) {
        return false;
      }
      for (const auto& m : comms[0].members()) {
        if (m.host().empty()) return false;
      }
      return true;
    }));
  }

  // One window of 10 collectives of `duration_ns` (jittered) sent through
  // the agents, with ring connection data or without; waits until the
  // controller joined them, then runs a cycle 1 s later.
  void SendWindow(const SimJob& job, uint64_t* seq, uint64_t duration_ns,
                  bool connections) {
    const uint64_t joined = core_->Status().collectives_joined();
    std::vector<v1::ConnectRequest> batches(agents_.size());
    for (int i = 0; i < 10; ++i, ++*seq) {
      const std::vector<uint64_t> d =
          JitteredDurations(job.n_ranks(), duration_ns, *seq);
      for (int32_t r = 0; r < job.n_ranks(); ++r) {
        v1::CollectiveSummary s = job.Summary(r, *seq, d[r]);
        if (connections) job.AddRingConnections(&s, 10e9, 10e9);
        *batches[r / (job.n_ranks() / agents_.size())].add_summaries() = s;
      }
    }
    for (size_t a = 0; a < agents_.size(); ++a) {
      ASSERT_TRUE(agents_[a]->Send(batches[a]));
    }
    ASSERT_TRUE(WaitUntil(
        [&] { return core_->Status().collectives_joined() >= joined + 10; }));
    clock_.Advance(absl::Seconds(1));
    core_->RunCycle();
  }

  std::vector<v1::Fault> ListFaults(bool all = false) {
    grpc::ClientContext ctx;
    v1::ListFaultsRequest req;
    req.set_include_resolved(all);
    v1::ListFaultsResponse resp;
    EXPECT_TRUE(stub_->ListFaults(&ctx, req, &resp).ok());
    return {resp.faults().begin(), resp.faults().end()};
  }

  FakeClock clock_;
  std::unique_ptr<Controller> core_;
  std::unique_ptr<ControllerServer> server_;
  std::string target_;
  std::unique_ptr<v1::Controller::Stub> stub_;
  std::vector<std::unique_ptr<TestAgent>> agents_;
};

TEST_F(ControllerApiTest, AgentTelemetryBecomesAFaultSeenByWatchers) {
  grpc::ClientContext watch_ctx;
  v1::WatchFaultsRequest watch_req;
  watch_req.set_include_existing(true);
  auto watch = stub_->WatchFaults(&watch_ctx, watch_req);

  SimJob job(0x51, 8, 4);
  ReportHang(job, {6});
  clock_.Advance(absl::Seconds(6));
  core_->RunCycle();

  std::vector<v1::Fault> faults = ListFaults();
  ASSERT_EQ(faults.size(), 1u);
  const v1::Fault& f = faults[0];
  EXPECT_EQ(f.fault_class(), v1::FAULT_CLASS_NON_COMM_HANG);
  ASSERT_EQ(f.suspects_size(), 1);
  EXPECT_EQ(f.suspects(0).global_rank(), 6);
  EXPECT_EQ(f.suspects(0).host(), "node1");

  v1::WatchFaultsResponse event;
  ASSERT_TRUE(watch->Read(&event));
  // OPENED, or EXISTING if the subscription landed after the cycle.
  EXPECT_THAT(event.change(),
              ::testing::AnyOf(v1::WatchFaultsResponse::CHANGE_OPENED,
                               v1::WatchFaultsResponse::CHANGE_EXISTING));
  EXPECT_EQ(event.fault().fault_id(), f.fault_id());

  grpc::ClientContext ack_ctx;
  v1::AcknowledgeFaultRequest ack;
  ack.set_fault_id(f.fault_id());
  ack.set_who("oncall");
  v1::AcknowledgeFaultResponse ack_resp;
  ASSERT_TRUE(stub_->AcknowledgeFault(&ack_ctx, ack, &ack_resp).ok());
  EXPECT_EQ(ack_resp.fault().state(), v1::FAULT_STATE_ACKNOWLEDGED);
  ASSERT_TRUE(watch->Read(&event));
  EXPECT_EQ(event.change(), v1::WatchFaultsResponse::CHANGE_UPDATED);
  EXPECT_EQ(event.fault().acknowledged_by(), "oncall");

  // The engine keeps seeing the hang (now past 2 timeouts: CONFIRMED), but
  // the operator's acknowledgement stands.
  clock_.Advance(absl::Seconds(6));
  core_->RunCycle();
  grpc::ClientContext get_ctx;
  v1::GetFaultRequest get;
  get.set_fault_id(f.fault_id());
  v1::GetFaultResponse got;
  ASSERT_TRUE(stub_->GetFault(&get_ctx, get, &got).ok());
  EXPECT_EQ(got.fault().state(), v1::FAULT_STATE_ACKNOWLEDGED);

  grpc::ClientContext res_ctx;
  v1::ResolveFaultRequest res;
  res.set_fault_id(f.fault_id());
  res.set_who("oncall");
  res.set_note("rank 6 restarted");
  v1::ResolveFaultResponse res_resp;
  ASSERT_TRUE(stub_->ResolveFault(&res_ctx, res, &res_resp).ok());
  EXPECT_EQ(res_resp.fault().state(), v1::FAULT_STATE_RESOLVED);
  // The confirmation seen meanwhile came as an update; then the resolution.
  ASSERT_TRUE(watch->Read(&event));
  if (event.change() == v1::WatchFaultsResponse::CHANGE_UPDATED) {
    EXPECT_EQ(event.fault().state(), v1::FAULT_STATE_ACKNOWLEDGED);
    EXPECT_NE(event.fault().confirmed_unix_ns(), 0u);
    ASSERT_TRUE(watch->Read(&event));
  }
  EXPECT_EQ(event.change(), v1::WatchFaultsResponse::CHANGE_RESOLVED);
  EXPECT_TRUE(ListFaults().empty());
  EXPECT_EQ(ListFaults(true).size(), 1u);

  // Acknowledging a resolved fault is refused.
  grpc::ClientContext ack2_ctx;
  const grpc::Status late = stub_->AcknowledgeFault(&ack2_ctx, ack, &ack_resp);
  EXPECT_EQ(late.error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  watch_ctx.TryCancel();
  while (watch->Read(&event)) {
  }
  (void)watch->Finish();
}

// NCCL samples the activation mask when an operation starts, so deep
// profiling cannot help a hang: the stuck operation never records more.
TEST_F(ControllerApiTest, CommHangSendsNoDeepProfilingCommand) {
  SimJob job(0x52, 4, 2);
  ReportHang(job, {});  // everyone entered seq 10, no proxy data
  clock_.Advance(absl::Seconds(6));
  core_->RunCycle();
  std::vector<v1::Fault> faults = ListFaults();
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[0].fault_class(), v1::FAULT_CLASS_COMM_HANG);
  EXPECT_TRUE(agents_[0]->WaitForCommands(1, absl::Milliseconds(500)).empty());
}

// Comm-slow on thin evidence (collectives slower, no connection data): the
// controller asks the agents for deep profiling over their streams.
TEST_F(ControllerApiTest, ThinCommSlowEvidenceAsksTheAgentsForDeepProfiling) {
  SimJob job(0x54, 8, 2);
  ReportHang(job, {});
  uint64_t seq = 11;
  for (int w = 0; w < 4; ++w) SendWindow(job, &seq, 1'000'000, true);
  for (int w = 0; w < 3; ++w) SendWindow(job, &seq, 2'000'000, false);
  std::vector<v1::AgentCommand> cmds =
      agents_[0]->WaitForCommands(1, absl::Seconds(10));
  ASSERT_EQ(cmds.size(), 1u);
  ASSERT_TRUE(cmds[0].has_set_activation_mask());
  EXPECT_EQ(cmds[0].set_activation_mask().comm_hash(), 0x54u);
  EXPECT_EQ(cmds[0].set_activation_mask().event_mask(), kDeepActivationMask);
  EXPECT_GT(cmds[0].set_activation_mask().duration_ms(), 0u);
}

TEST_F(ControllerApiTest, ListsNodesJobsAndCommunicators) {
  SimJob job(0x53, 8, 4);
  ReportHang(job, {});
  grpc::ClientContext c1, c2, c3, c4;
  v1::ListNodesResponse nodes;
  ASSERT_TRUE(stub_->ListNodes(&c1, {}, &nodes).ok());
  ASSERT_EQ(nodes.nodes_size(), 2);
  EXPECT_EQ(nodes.nodes(0).state(), v1::NODE_STATE_READY);
  EXPECT_TRUE(nodes.nodes(0).agent_connected());
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(stub_->ListJobs(&c2, {}, &jobs).ok());
  ASSERT_EQ(jobs.jobs_size(), 1);
  EXPECT_EQ(jobs.jobs(0).n_ranks(), 8u);
  v1::GetCommunicatorRequest gc;
  gc.set_comm_hash(0x53);
  v1::GetCommunicatorResponse comm;
  ASSERT_TRUE(stub_->GetCommunicator(&c3, gc, &comm).ok());
  EXPECT_EQ(comm.communicator().members_size(), 8);
  EXPECT_EQ(comm.communicator().members(5).host(), "node1");

  v1::DrainNodeRequest drain;
  drain.set_host("node1");
  drain.set_reason("bad NIC");
  v1::DrainNodeResponse drained;
  ASSERT_TRUE(stub_->DrainNode(&c4, drain, &drained).ok());
  EXPECT_EQ(drained.node().state(), v1::NODE_STATE_DRAINED);
  EXPECT_EQ(drained.node().drain_reason(), "bad NIC");
}

TEST_F(ControllerApiTest, BadRequestsNameTheFieldAndUnknownIdsAreNotFound) {
  struct Case {
    std::function<grpc::Status(grpc::ClientContext*)> call;
    grpc::StatusCode code;
    std::string field;
  };
  std::vector<Case> cases = {
      {[&](grpc::ClientContext* c) {
         v1::GetFaultResponse r;
         return stub_->GetFault(c, {}, &r);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "fault_id"},
      {[&](grpc::ClientContext* c) {
         v1::GetFaultRequest q;
         q.set_fault_id("F999");
         v1::GetFaultResponse r;
         return stub_->GetFault(c, q, &r);
       },
       grpc::StatusCode::NOT_FOUND, "F999"},
      {[&](grpc::ClientContext* c) {
         v1::AcknowledgeFaultRequest q;
         q.set_fault_id("F1");
         v1::AcknowledgeFaultResponse r;
         return stub_->AcknowledgeFault(c, q, &r);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "who"},
      {[&](grpc::ClientContext* c) {
         v1::DrainNodeRequest q;
         q.set_host("node0");
         v1::DrainNodeResponse r;
         return stub_->DrainNode(c, q, &r);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "reason"},
      {[&](grpc::ClientContext* c) {
         v1::UncordonNodeRequest q;
         q.set_host("nowhere");
         v1::UncordonNodeResponse r;
         return stub_->UncordonNode(c, q, &r);
       },
       grpc::StatusCode::NOT_FOUND, "nowhere"},
      {[&](grpc::ClientContext* c) {
         v1::GetCommunicatorResponse r;
         return stub_->GetCommunicator(c, {}, &r);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "comm_hash"},
      {[&](grpc::ClientContext* c) {
         v1::GetJobRequest q;
         q.set_job_id("nojob");
         v1::GetJobResponse r;
         return stub_->GetJob(c, q, &r);
       },
       grpc::StatusCode::NOT_FOUND, "nojob"},
      {[&](grpc::ClientContext* c) {
         v1::SetJobPolicyRequest q;
         q.set_job_id("job1");
         q.mutable_policy()->set_persistence_n(9);
         q.mutable_policy()->set_persistence_m(3);
         v1::SetJobPolicyResponse r;
         return stub_->SetJobPolicy(c, q, &r);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "policy.persistence_n"},
      {[&](grpc::ClientContext* c) {
         v1::SetJobPolicyRequest q;
         q.set_job_id("job1");
         v1::SetJobPolicyResponse r;
         return stub_->SetJobPolicy(c, q, &r);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "policy"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    grpc::ClientContext ctx;
    const grpc::Status s = cases[i].call(&ctx);
    EXPECT_EQ(s.error_code(), cases[i].code) << "case " << i;
    EXPECT_THAT(s.error_message(), HasSubstr(cases[i].field)) << "case " << i;
  }
}

TEST_F(ControllerApiTest, AgentStreamWithoutRegistrationIsRejected) {
  auto stub = v1::AgentLink::NewStub(TestChannel(target_));
  grpc::ClientContext ctx;
  auto stream = stub->Connect(&ctx);
  v1::ConnectRequest batch;
  batch.add_summaries()->set_comm_hash(1);
  stream->Write(batch);
  stream->WritesDone();
  v1::ConnectResponse resp;
  while (stream->Read(&resp)) {
  }
  const grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("registration"));
}

// Records with absurd ranks / sizes (which once grew per-rank tables to
// gigabytes or threw inside the gRPC callback) are skipped: the rest of the
// batch and later batches are used, the stream stays open and the server
// shuts down.
TEST_F(ControllerApiTest, AgentRecordsWithHugeRanksAreSkipped) {
  SimJob job(0x5A, 2, 1);
  agents_.push_back(std::make_unique<TestAgent>(target_, job.Nodes()[0]));
  v1::ConnectRequest bad;
  v1::CommunicatorInfo huge = job.Info(0);
  huge.set_comm_hash(0xBAD);
  huge.set_n_ranks(INT32_MAX);
  *bad.add_communicators() = huge;
  v1::CollectiveSummary far = job.Summary(0, 1, 1000);
  far.set_comm_hash(0xBAD2);
  far.set_rank(2000000000);
  *bad.add_summaries() = far;
  v1::RankProgress p = job.Progress(0, 1, 1);
  p.set_comm_hash(0xBAD3);
  p.set_rank(20000000);
  *bad.add_progress() = p;
  *bad.add_communicators() = job.Info(0);  // valid: must still be used
  ASSERT_TRUE(agents_[0]->Send(bad));
  // Rank 1 lives on node1: its own agent reports it (issue #33).
  agents_.push_back(std::make_unique<TestAgent>(target_, job.Nodes()[1]));
  v1::ConnectRequest good;
  *good.add_communicators() = job.Info(1);
  ASSERT_TRUE(agents_[1]->Send(good));
  ASSERT_TRUE(WaitUntil([&] {
    auto comms = core_->ingest().Communicators("");
    return comms.size() == 1 && comms[0].members_size() == 2 &&
           !comms[0].members(1).host().empty();
  }));
  for (const v1::Communicator& c : core_->ingest().Communicators("")) {
    EXPECT_EQ(c.comm_hash(), job.comm_hash());
  }
  // Returns once the open agent stream is cancelled (it did not wedge).
  server_->Shutdown(absl::Milliseconds(100));
  EXPECT_FALSE(agents_[0]->Close().ok());
  EXPECT_FALSE(agents_[1]->Close().ok());
}

// An agent whose stream closed (or that went silent) leaves stale progress
// behind: its ranks are not blamed, and the fault names its node as
// unreachable.
TEST_F(ControllerApiTest, RanksOfAGoneAgentAreNotBlamed) {
  SimJob job(0x61, 4, 2);
  ReportHang(job, {3});  // rank 3 (node1) never enqueued seq 10
  ASSERT_EQ(agents_.size(), 2u);
  agents_[1]->Close();
  ASSERT_TRUE(WaitUntil(
      [&] { return !core_->nodes().Node("node1")->agent_connected(); }));
  clock_.Advance(absl::Seconds(6));
  core_->RunCycle();
  std::vector<v1::Fault> faults = ListFaults();
  ASSERT_EQ(faults.size(), 1u);
  for (const v1::Suspect& s : faults[0].suspects()) {
    EXPECT_NE(s.host(), "node1") << faults[0].summary();
  }
  EXPECT_THAT(faults[0].summary(), HasSubstr("the agent of node1"));
}

// A silent agent (stream open, nothing sent for agent_silence) counts as
// gone too.
TEST(ControllerSilenceTest, SilentAgentCountsAsGone) {
  FakeClock clock;
  Controller::Options o;
  o.clock = &clock;
  o.agent_silence = absl::Seconds(3);
  auto core = Controller::Create(o);
  ASSERT_TRUE(core.ok()) << core.status();
  auto server = ControllerServer::Start(core->get(), "127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string target = absl::StrCat("127.0.0.1:", (*server)->port());
  SimJob job(0x62, 4, 2);
  std::vector<std::unique_ptr<TestAgent>> agents;
  for (const v1::NodeRegistration& reg : job.Nodes()) {
    agents.push_back(std::make_unique<TestAgent>(target, reg));
  }
  for (int32_t r = 0; r < 4; ++r) {
    v1::ConnectRequest batch;
    *batch.add_communicators() = job.Info(r);
    *batch.add_progress() = job.Progress(r, r == 3 ? 9 : 10, 9);
    ASSERT_TRUE(agents[r / 2]->Send(batch));
  }
  ASSERT_TRUE(WaitUntil([&] {
    auto comms = (*core)->ingest().Communicators("");
    return comms.size() == 1 && comms[0].members_size() == 4 &&
           !comms[0].members(3).host().empty();
  }));
  // node0 keeps sending (empty batches, like an idle agent); node1 is silent.
  for (int s = 0; s < 6; ++s) {
    clock.Advance(absl::Seconds(1));
    ASSERT_TRUE(agents[0]->Send(v1::ConnectRequest()));
    const uint64_t now = static_cast<uint64_t>(absl::ToUnixNanos(clock.Now()));
    ASSERT_TRUE(WaitUntil([&] {
      return (*core)->nodes().Node("node0")->last_seen_unix_ns() == now;
    }));
    (*core)->RunCycle();
  }
  auto faults = (*core)->faults().Faults("", false, 0);
  ASSERT_TRUE(faults.ok());
  ASSERT_EQ(faults->size(), 1u);
  for (const v1::Suspect& s : (*faults)[0].suspects()) {
    EXPECT_NE(s.host(), "node1") << (*faults)[0].summary();
  }
  EXPECT_THAT((*faults)[0].summary(), HasSubstr("the agent of node1"));
  agents.clear();
  (*server)->Shutdown(absl::ZeroDuration());
}

TEST_F(ControllerApiTest, PolicyRoundTrips) {
  grpc::ClientContext c1, c2;
  v1::SetJobPolicyRequest set;
  set.set_job_id("job7");
  set.mutable_policy()->set_hang_timeout_floor_ms(2000);
  v1::SetJobPolicyResponse set_resp;
  ASSERT_TRUE(stub_->SetJobPolicy(&c1, set, &set_resp).ok());
  EXPECT_EQ(set_resp.policy().hang_timeout_floor_ms(), 2000u);
  EXPECT_EQ(set_resp.policy().mode(), v1::POLICY_MODE_OBSERVE);
  v1::GetJobPolicyRequest get;
  get.set_job_id("job7");
  v1::GetJobPolicyResponse get_resp;
  ASSERT_TRUE(stub_->GetJobPolicy(&c2, get, &get_resp).ok());
  EXPECT_EQ(get_resp.policy().hang_timeout_floor_ms(), 2000u);
}

}  // namespace
}  // namespace pitstop::controller::testing
