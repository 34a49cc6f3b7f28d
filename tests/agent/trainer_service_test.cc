// TrainerService: TrainerHub rules, and the real Agent serving it on its
// ingest Unix socket, forwarding step reports to an in-test AgentLink
// receiver and delivering its directives back to the trainer.
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "pitstop/v1/trainer.grpc.pb.h"
#include "src/agent/agent.h"
#include "src/agent/local_tenants.h"
#include "src/agent/trainer_hub.h"
#include "tests/agent/test_receiver.h"
#include "tests/agent/test_util.h"

namespace pitstop::agent {
namespace {

using testing::TempDir;
using testing::TestReceiver;
using Reqs = std::vector<v1::ConnectRequest>;

v1::ReportStepsRequest MakeReport(const std::string& job, int rank, int steps,
                                  uint64_t first_step = 1) {
  v1::ReportStepsRequest r;
  r.mutable_trainer()->set_job_id(job);
  r.mutable_trainer()->set_global_rank(rank);
  r.mutable_trainer()->set_world_size(4);
  r.set_current_mode(v1::SYNC_MODE_SYNC);
  for (int i = 0; i < steps; ++i) {
    v1::StepReport* s = r.add_steps();
    s->set_step(first_step + i);
    s->set_wall_ns(50'000'000);
    v1::PhaseTime* p = s->add_phases();
    p->set_phase(v1::TRAIN_PHASE_FORWARD);
    p->set_duration_ns(20'000'000);
  }
  return r;
}

v1::TrainerDirective MakeDirective(const std::string& job, uint64_t id) {
  v1::TrainerDirective d;
  d.set_job_id(job);
  d.set_directive_id(id);
  d.set_mode(v1::SYNC_MODE_TIMED);
  d.set_period_ms(1000);
  d.set_apply_at_step(40);
  d.set_reason("test");
  return d;
}

TEST(TrainerHubTest, RejectsBadReportsNamingTheField) {
  TrainerHub hub(true);
  v1::ReportStepsRequest r = MakeReport("", 0, 1);
  EXPECT_THAT(std::string(hub.Report(r).status().message()),
              ::testing::StartsWith("trainer.job_id"));
  r = MakeReport("j", -1, 1);
  EXPECT_THAT(std::string(hub.Report(r).status().message()),
              ::testing::StartsWith("trainer.global_rank"));
  r = MakeReport("j", 5, 1);  // world_size 4
  EXPECT_THAT(std::string(hub.Report(r).status().message()),
              ::testing::StartsWith("trainer.world_size"));
  r = MakeReport("j", 0, 1);
  r.mutable_steps(0)->mutable_phases(0)->set_phase(
      static_cast<v1::TrainPhase>(99));
  EXPECT_THAT(std::string(hub.Report(r).status().message()),
              ::testing::StartsWith("steps[0].phases[0].phase"));
  r = MakeReport("j", 0, TrainerHub::kMaxStepsPerReport + 1);
  EXPECT_THAT(std::string(hub.Report(r).status().message()),
              ::testing::StartsWith("steps: "));
  r = MakeReport("j", 0, 1);
  r.set_current_mode(static_cast<v1::SyncMode>(7));
  EXPECT_EQ(hub.Report(r).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(hub.counters().reports, 0u);
}

TEST(TrainerHubTest, QueuesForUpstreamAndReturnsUnseenDirective) {
  TrainerHub hub(true);
  ASSERT_TRUE(hub.Report(MakeReport("j", 0, 3)).ok());
  ASSERT_TRUE(hub.Report(MakeReport("j", 1, 2)).ok());
  v1::ConnectRequest batch;
  hub.FillBatch(&batch);
  ASSERT_EQ(batch.trainer_reports_size(), 2);
  EXPECT_EQ(batch.trainer_reports(0).steps_size(), 3);
  batch.Clear();
  hub.FillBatch(&batch);
  EXPECT_EQ(batch.trainer_reports_size(), 0);

  hub.OnDirective(MakeDirective("j", 2));
  hub.OnDirective(MakeDirective("j", 1));  // older: ignored
  hub.OnDirective(MakeDirective("other", 9));
  v1::ReportStepsRequest r = MakeReport("j", 0, 0);
  auto resp = hub.Report(r);
  ASSERT_TRUE(resp.ok());
  ASSERT_EQ(resp->directives_size(), 1);
  EXPECT_EQ(resp->directives(0).directive_id(), 2u);
  r.set_seen_directive_id(2);
  resp = hub.Report(r);
  ASSERT_TRUE(resp.ok());
  EXPECT_EQ(resp->directives_size(), 0);
}

v1::ProfileRequest MakeProfileRequest(const std::string& job, int rank,
                                      uint64_t id) {
  v1::ProfileRequest r;
  r.set_request_id(id);
  r.set_job_id(job);
  r.set_global_rank(rank);
  r.set_steps(5);
  r.set_max_ops(32);
  r.set_max_duration_ms(20000);
  r.set_reason("fault F3");
  return r;
}

TEST(TrainerHubTest, ProfileRequestGoesOnceToItsTrainer) {
  TrainerHub hub(true);
  hub.OnProfileRequest(MakeProfileRequest("j", 2, 7));
  // Another rank, another job: nothing for them.
  EXPECT_EQ(hub.Report(MakeReport("j", 1, 1))->profile_requests_size(), 0);
  EXPECT_EQ(hub.Report(MakeReport("k", 2, 1))->profile_requests_size(), 0);
  absl::StatusOr<v1::ReportStepsResponse> r = hub.Report(MakeReport("j", 2, 1));
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->profile_requests_size(), 1);
  EXPECT_EQ(r->profile_requests(0).request_id(), 7u);
  EXPECT_EQ(hub.Report(MakeReport("j", 2, 1))->profile_requests_size(), 0);
  // A newer request for the same trainer replaces one still waiting.
  hub.OnProfileRequest(MakeProfileRequest("j", 2, 8));
  hub.OnProfileRequest(MakeProfileRequest("j", 2, 9));
  r = hub.Report(MakeReport("j", 2, 0));
  ASSERT_EQ(r->profile_requests_size(), 1);
  EXPECT_EQ(r->profile_requests(0).request_id(), 9u);
  // Invalid requests are dropped and counted.
  v1::ProfileRequest bad = MakeProfileRequest("j", 2, 10);
  bad.set_steps(1000);
  hub.OnProfileRequest(bad);
  bad = MakeProfileRequest("", 2, 11);
  hub.OnProfileRequest(bad);
  EXPECT_EQ(hub.Report(MakeReport("j", 2, 0))->profile_requests_size(), 0);
  EXPECT_EQ(hub.counters().profile_requests, 2u);
  EXPECT_EQ(hub.counters().profile_requests_dropped, 2u);
  // The trainer's answer goes upstream with its report, as it came.
  v1::ReportStepsRequest answer = MakeReport("j", 2, 0);
  v1::ProfileResult* p = answer.add_profiles();
  p->set_request_id(9);
  p->set_steps(5);
  p->add_ops()->set_name("aten::mm");
  ASSERT_TRUE(hub.Report(answer).ok());
  v1::ConnectRequest batch;
  hub.FillBatch(&batch);
  int answers = 0;
  for (const auto& t : batch.trainer_reports()) answers += t.profiles_size();
  EXPECT_EQ(answers, 1);
  // Answers beyond the limits are refused, naming the field.
  p->set_steps(65);
  EXPECT_THAT(std::string(hub.Report(answer).status().message()),
              ::testing::StartsWith("profiles[0]"));
  p->set_steps(5);
  p->mutable_ops(0)->set_name(std::string(300, 'x'));
  EXPECT_THAT(std::string(hub.Report(answer).status().message()),
              ::testing::StartsWith("profiles[0].ops[0].name"));
  p->mutable_ops(0)->set_name("aten::mm");
  p->set_request_id(0);
  EXPECT_THAT(std::string(hub.Report(answer).status().message()),
              ::testing::StartsWith("profiles[0].request_id"));
}

TEST(TrainerHubTest, BoundedQueueDropsOldestAndNoUpstreamDropsAll) {
  TrainerHub hub(true);
  const int per = TrainerHub::kMaxStepsPerReport;
  const int calls = TrainerHub::kMaxQueuedSteps / per + 3;
  for (int i = 0; i < calls; ++i) {
    ASSERT_TRUE(hub.Report(MakeReport("j", 0, per, 1 + i * per)).ok());
  }
  EXPECT_EQ(hub.counters().steps_dropped, 3u * per);
  v1::ConnectRequest batch;
  hub.FillBatch(&batch);
  EXPECT_EQ(batch.trainer_reports(0).steps(0).step(), 1u + 3u * per);

  TrainerHub off(false);
  ASSERT_TRUE(off.Report(MakeReport("j", 0, 5)).ok());
  EXPECT_EQ(off.counters().steps_dropped, 5u);
  batch.Clear();
  off.FillBatch(&batch);
  EXPECT_EQ(batch.trainer_reports_size(), 0);
}

// The job this test process may report for: the one its environment names
// as the library reads it, else the library's fallback (R18-8: the agent
// checks a trainer's job against what the kernel knows of its process).
std::string OwnJob() {
  for (const char* var :
       {"PITSTOP_JOB_ID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') return v;
  }
  return kLibraryDefaultJob;
}

TEST(TrainerServiceTest, AgentForwardsReportsAndDeliversDirectives) {
  const std::string job = OwnJob();
  TempDir dir;
  TestReceiver receiver;
  AgentOptions o;
  o.ingest_socket = dir.file("a.sock");
  o.controller = receiver.address();
  o.host = "trainer-node";
  o.batch_ms = 50;
  o.metrics_address = "";
  o.sysfs_root = dir.file("sys");
  auto agent = Agent::Create(o, Clock::Real());
  ASSERT_TRUE(agent.ok()) << agent.status();
  ASSERT_TRUE(receiver.WaitUntil([](const Reqs& r) { return !r.empty(); }));

  auto channel = grpc::CreateChannel("unix:" + o.ingest_socket,
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::TrainerService::NewStub(channel);
  auto call = [&](const v1::ReportStepsRequest& req,
                  v1::ReportStepsResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    return stub->ReportSteps(&ctx, req, resp);
  };
  v1::ReportStepsResponse resp;
  grpc::Status st = call(MakeReport(job, 2, 7), &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_TRUE(receiver.WaitUntil([&job](const Reqs& reqs) {
    for (const auto& r : reqs) {
      for (const auto& t : r.trainer_reports()) {
        if (t.trainer().job_id() == job && t.steps_size() == 7 &&
            t.trainer().global_rank() == 2) {
          return true;
        }
      }
    }
    return false;
  }));

  // Bad input: INVALID_ARGUMENT naming the field, over the socket.
  st = call(MakeReport("", 0, 1), &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), ::testing::HasSubstr("trainer.job_id"));

  v1::AgentCommand cmd;
  cmd.set_command_id(77);
  *cmd.mutable_trainer_directive() = MakeDirective(job, 3);
  ASSERT_TRUE(receiver.SendCommand(cmd));
  bool got = false;
  for (int i = 0; i < 200 && !got; ++i) {
    v1::ReportStepsRequest poll = MakeReport(job, 2, 0);
    ASSERT_TRUE(call(poll, &resp).ok());
    got = resp.directives_size() == 1;
    if (!got) absl::SleepFor(absl::Milliseconds(25));
  }
  ASSERT_TRUE(got);
  EXPECT_EQ(resp.directives(0).directive_id(), 3u);
  EXPECT_EQ(resp.directives(0).mode(), v1::SYNC_MODE_TIMED);
  EXPECT_EQ(resp.directives(0).apply_at_step(), 40u);
  EXPECT_TRUE(resp.controller_connected());
  (*agent)->Stop();
}

// Attacker round 18, R18-8: any local process reported step times for
// another job's global rank (a forged step-time straggler), took its
// profile requests and filled the controller's trainer tables with made-up
// jobs. A trainer reports only for a job its process belongs to and a
// global rank no other process on the node holds.
TEST(TrainerServiceTest, ATrainerReportsOnlyForItsOwnJobAndRank) {
  TempDir dir;
  AgentOptions o;
  o.ingest_socket = dir.file("a.sock");
  o.controller = "";
  o.host = "trainer-node";
  o.metrics_address = "";
  o.sysfs_root = dir.file("sys");
  auto agent = Agent::Create(o, Clock::Real());
  ASSERT_TRUE(agent.ok()) << agent.status();
  auto stub = v1::TrainerService::NewStub(grpc::CreateChannel(
      "unix:" + o.ingest_socket, grpc::InsecureChannelCredentials()));
  auto call = [&](const v1::ReportStepsRequest& req) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    v1::ReportStepsResponse resp;
    return stub->ReportSteps(&ctx, req, &resp);
  };
  const std::string other = OwnJob() + "-not-mine";
  grpc::Status st = call(MakeReport(other, 3, 1));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(st.error_message(), ::testing::HasSubstr("trainer.job_id"));
  for (int i = 0; i < 5; ++i) {
    (void)call(MakeReport(absl::StrCat("flood-", i), 0, 1));
  }
  EXPECT_EQ((*agent)->core()->tenant_stats().trainers_refused, 6u);
  EXPECT_EQ((*agent)->trainer_hub()->counters().reports, 0u);
  // Its own job is taken.
  st = call(MakeReport(OwnJob(), 3, 1));
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ((*agent)->trainer_hub()->counters().reports, 1u);
  (*agent)->Stop();
}

}  // namespace
}  // namespace pitstop::agent
