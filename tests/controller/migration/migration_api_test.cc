// Standby migration through the real Controller API and AgentLink over
// loopback gRPC: the standby pool, request errors, a full migration with
// the agents' answers, WatchMigrations and policy ACT. The agents are test
// clients of AgentLink that answer the directives themselves (an emulated
// data plane: nothing moves on any rank).
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pitstop/clock.h"
#include "pitstop/v1/controller.grpc.pb.h"
#include "src/controller/api/controller_service.h"
#include "src/controller/controller.h"
#include "src/controller/store/fault_store.h"
#include "tests/controller/migration/migration_api_fixture.h"
#include "tests/controller/sim_job.h"
#include "tests/controller/test_agent.h"

namespace pitstop::controller::testing {
namespace {

using ::testing::HasSubstr;

class MigrationApiTest : public MigrationApiFixture {};

TEST_F(MigrationApiTest, StandbyPoolIsListed) {
  StartController();
  StartJob(/*standbys=*/2);
  v1::ListStandbyResponse r = Standby();
  ASSERT_EQ(r.nodes_size(), 2);
  EXPECT_EQ(r.nodes(0).host(), "spare0");
  EXPECT_EQ(r.nodes(0).state(), v1::STANDBY_STATE_FREE);
  EXPECT_EQ(r.nodes(0).migration_data_plane(), "emulated");
  // A standby whose agent goes away is unreachable, not free.
  ASSERT_TRUE(agents_["spare1"]->Close().ok());
  agents_.erase("spare1");
  ASSERT_TRUE(WaitUntil([&] {
    v1::ListStandbyResponse s = Standby();
    return s.nodes_size() == 2 &&
           s.nodes(1).state() == v1::STANDBY_STATE_UNREACHABLE;
  }));
}

TEST_F(MigrationApiTest, BadRequestsSayWhy) {
  StartController();
  StartJob(/*standbys=*/1);
  v1::MigrateNodeResponse r;
  grpc::Status s = Migrate("", "", &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("host: required"));
  s = Migrate("node9", "", &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("node9 is not known"));
  s = Migrate("spare0", "", &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("is a standby node"));
  s = Migrate("node0", "node1", &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("node1 is not a standby node"));
  EXPECT_TRUE(core_->migration().ListMigrations("", true).empty());
}

TEST_F(MigrationApiTest, JobWithoutDataPlaneIsNotMigratable) {
  StartController();
  StartJob(/*standbys=*/1, /*data_plane=*/"");
  v1::MigrateNodeResponse r;
  grpc::Status s = Migrate("node0", "", &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("not migratable"));
  EXPECT_THAT(s.error_message(), HasSubstr("no migration data plane"));
}

TEST_F(MigrationApiTest, FullMigrationThroughTheAgents) {
  StartController();
  StartJob(/*standbys=*/1);
  // A watcher sees every phase.
  grpc::ClientContext wctx;
  v1::WatchMigrationsRequest wreq;
  auto watch = stub_->WatchMigrations(&wctx, wreq);

  v1::MigrateNodeResponse r;
  grpc::Status s = Migrate("node0", "", &r);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const std::string id = r.migration().migration_id();
  EXPECT_EQ(r.migration().state(), v1::MIGRATION_STATE_PREPARING);
  EXPECT_EQ(r.migration().joiner_host(), "spare0");
  EXPECT_EQ(r.migration().comms_size(), 1);
  EXPECT_EQ(Standby().nodes(0).state(), v1::STANDBY_STATE_RESERVED);
  // No free standby left for another node.
  v1::MigrateNodeResponse r2;
  s = Migrate("node1", "", &r2);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("no free standby"));

  Answer("node0", v1::MigrationDirective::PHASE_PREPARE, 40);
  Answer("node1", v1::MigrationDirective::PHASE_PREPARE, 42);
  Answer("spare0", v1::MigrationDirective::PHASE_PREPARE, 0);
  WaitState(id, v1::MIGRATION_STATE_SWITCHING);
  EXPECT_EQ(GetMigration(id).switch_seq(), 42u + 4u);
  Answer("node1", v1::MigrationDirective::PHASE_SWITCH_AT);
  Answer("spare0", v1::MigrationDirective::PHASE_SWITCH_AT);
  WaitState(id, v1::MIGRATION_STATE_COMMITTED);

  // The leaver is drained, the standby is in use by the job.
  auto node = core_->nodes().Node("node0");
  ASSERT_TRUE(node.ok());
  EXPECT_EQ(node->state(), v1::NODE_STATE_DRAINED);
  EXPECT_THAT(node->drain_reason(), HasSubstr(id));
  EXPECT_EQ(Standby().nodes(0).state(), v1::STANDBY_STATE_IN_USE);

  // The watch may have been registered after MigrateNode returned (the
  // stream starts asynchronously), so CREATED and PREPARING may be missed;
  // the switch and the commit come after the agents' answers, always seen.
  std::vector<
      std::pair<v1::WatchMigrationsResponse::Change, v1::MigrationState>>
      seen;
  v1::WatchMigrationsResponse w;
  while (watch->Read(&w)) {
    EXPECT_EQ(w.migration().migration_id(), id);
    seen.emplace_back(w.change(), w.migration().state());
    if (w.change() == v1::WatchMigrationsResponse::CHANGE_FINISHED) break;
  }
  ASSERT_GE(seen.size(), 2u);
  EXPECT_EQ(seen[seen.size() - 2],
            std::make_pair(v1::WatchMigrationsResponse::CHANGE_UPDATED,
                           v1::MIGRATION_STATE_SWITCHING));
  EXPECT_EQ(seen.back(),
            std::make_pair(v1::WatchMigrationsResponse::CHANGE_FINISHED,
                           v1::MIGRATION_STATE_COMMITTED));
  for (size_t i = 1; i < seen.size(); ++i) {
    EXPECT_NE(seen[i].first, v1::WatchMigrationsResponse::CHANGE_CREATED);
  }
  wctx.TryCancel();
  (void)watch->Finish();
}

// Issue #33, R21-6: a process on host `evil`, where job1 does not run,
// whose environment names job1 (or an agent naming job1 for it) reported a
// communicator of job1 wider than the job's own. Before, `evil` became a
// stayer of job1's migrations (it got the new communicators' unique ids and
// could abort every migration by failing PREPARE) and its communicator was
// the switch communicator. Once the scheduler names job1's hosts, `evil` is
// no member of the migration, gets no directive, and cannot be the leaver;
// the joiner the controller chose is named with the job's hosts.
TEST_F(MigrationApiTest, AHostTheSchedulerDidNotNameIsNoMigrationMember) {
  StartController();
  StartJob(/*standbys=*/1);
  v1::NodeRegistration reg;
  reg.set_host("evil");
  reg.set_agent_id("agent-evil");
  reg.set_migration_data_plane("emulated");
  agents_["evil"] = std::make_unique<TestAgent>(target_, reg);
  constexpr uint64_t kIntruderComm = 0xE71;
  v1::ConnectRequest claim;
  v1::CommunicatorInfo* info = claim.add_communicators();
  info->set_comm_hash(kIntruderComm);
  info->set_job_id("job1");
  info->set_rank(0);
  info->set_n_ranks(64);
  info->set_pid(4242);
  info->add_global_ranks(99);
  ASSERT_TRUE(agents_["evil"]->Send(claim));
  ASSERT_TRUE(WaitUntil(
      [&] { return core_->ingest().Communicator(kIntruderComm).ok(); }));

  // The scheduler names job1's hosts.
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(20));
    v1::SetJobHostsRequest req;
    req.set_job_id("job1");
    req.add_hosts("node1");
    req.add_hosts("node0");
    req.set_who("slurm");
    v1::SetJobHostsResponse resp;
    grpc::Status s = stub_->SetJobHosts(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.hosts_size(), 2);
  }
  v1::MigrateNodeResponse r;
  grpc::Status s = Migrate("evil", "spare0", &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("not one of the hosts"));

  s = Migrate("node0", "spare0", &r);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const v1::Migration& m = r.migration();
  for (const v1::MigrationMember& member : m.members()) {
    EXPECT_NE(member.host(), "evil") << m.DebugString();
  }
  EXPECT_EQ(m.members_size(), 3) << m.DebugString();  // node0, node1, spare0
  EXPECT_EQ(m.switch_comm_hash(), job_.comm_hash());
  ASSERT_EQ(m.comms_size(), 1);
  EXPECT_EQ(m.comms(0).old_comm_hash(), job_.comm_hash());
  // The joiner is named with the job's hosts: its records will be taken.
  EXPECT_EQ(core_->ingest().JobHosts("job1"),
            (std::vector<std::string>{"node0", "node1", "spare0"}));
  // The stayers and the joiner are asked to PREPARE; `evil` is told nothing.
  Answer("node1", v1::MigrationDirective::PHASE_PREPARE, 42);
  for (const v1::AgentCommand& c :
       agents_["evil"]->WaitForCommands(1, absl::Milliseconds(300))) {
    EXPECT_FALSE(c.has_migration()) << c.DebugString();
  }
}

TEST_F(MigrationApiTest, JoinerAgentLossAbortsAndFreesTheStandby) {
  StartController();
  StartJob(/*standbys=*/1);
  v1::MigrateNodeResponse r;
  ASSERT_TRUE(Migrate("node0", "spare0", &r).ok());
  const std::string id = r.migration().migration_id();
  Answer("node0", v1::MigrationDirective::PHASE_PREPARE);
  ASSERT_TRUE(agents_["spare0"]->Close().ok());
  WaitState(id, v1::MIGRATION_STATE_ABORTED);
  EXPECT_THAT(GetMigration(id).abort_reason(), HasSubstr("joiner spare0 died"));
  // The stayers were told to drop the new communicators.
  bool aborted = false;
  ASSERT_TRUE(WaitUntil([&] {
    for (const auto& c :
         agents_["node1"]->WaitForCommands(1, absl::Milliseconds(50))) {
      aborted |= c.has_migration() &&
                 c.migration().phase() == v1::MigrationDirective::PHASE_ABORT;
    }
    return aborted;
  }));
  EXPECT_FALSE(core_->nodes().Node("node0")->state() == v1::NODE_STATE_DRAINED);
}

// A leaver that dies before its host answered SWITCHED aborts the migration
// (its state may not have gone); one whose SWITCHED comes in the same batch
// as its death had sent its state: the answer is taken first and the
// migration commits.
TEST_F(MigrationApiTest, LeaverDeathAbortsOnlyBeforeItsSwitchedAnswer) {
  StartController();
  StartJob(/*standbys=*/1);
  v1::MigrateNodeResponse r;
  ASSERT_TRUE(Migrate("node0", "spare0", &r).ok());
  const std::string id = r.migration().migration_id();
  for (const char* host : {"node0", "node1", "spare0"}) {
    Answer(host, v1::MigrationDirective::PHASE_PREPARE);
  }
  WaitState(id, v1::MIGRATION_STATE_SWITCHING);
  Answer("node0", v1::MigrationDirective::PHASE_SWITCH_AT, 0,
         /*died_rank=*/0);
  Answer("node1", v1::MigrationDirective::PHASE_SWITCH_AT);
  Answer("spare0", v1::MigrationDirective::PHASE_SWITCH_AT);
  WaitState(id, v1::MIGRATION_STATE_COMMITTED);
}

// Policy ACT: a CONFIRMED GPU fault on node0 (here in the database when the
// controller starts, as after a restart) starts a migration at the next
// cycle once job1's policy is ACT; OBSERVE (the default) does nothing.
TEST_F(MigrationApiTest, PolicyActMigratesAConfirmedHardwareFault) {
  {
    auto store = FaultStore::Open(Db());
    ASSERT_TRUE(store.ok()) << store.status();
    v1::Fault f;
    f.set_fault_id("F7");
    f.set_job_id("job1");
    f.set_state(v1::FAULT_STATE_CONFIRMED);
    f.set_fault_class(v1::FAULT_CLASS_NON_COMM_SLOW);
    f.set_summary("GPU 2 of node0 is slow");
    v1::Suspect* s = f.add_suspects();
    s->set_level(v1::SUSPECT_LEVEL_GPU);
    s->set_host("node0");
    s->set_gpu_index(2);
    bool ignored = false;
    ASSERT_TRUE((*store)->Upsert(f, &ignored).ok());
  }
  StartController();
  StartJob(/*standbys=*/1);
  core_->RunCycle();
  EXPECT_TRUE(core_->migration().ListMigrations("", true).empty())
      << "OBSERVE acted";

  v1::JobPolicy act;
  act.set_mode(v1::POLICY_MODE_ACT);
  ASSERT_TRUE(core_->ingest().SetPolicy("job1", act).ok());
  core_->RunCycle();
  std::vector<v1::Migration> ms = core_->migration().ListMigrations("", true);
  ASSERT_EQ(ms.size(), 1u);
  const std::string id = ms[0].migration_id();
  EXPECT_EQ(ms[0].fault_id(), "F7");
  EXPECT_EQ(ms[0].leaver_host(), "node0");
  EXPECT_EQ(ms[0].requested_by(), "policy");
  EXPECT_EQ(ms[0].state(), v1::MIGRATION_STATE_PREPARING);
  core_->RunCycle();  // one migration per fault
  EXPECT_EQ(core_->migration().ListMigrations("", true).size(), 1u);

  Answer("node0", v1::MigrationDirective::PHASE_PREPARE);
  Answer("node1", v1::MigrationDirective::PHASE_PREPARE);
  Answer("spare0", v1::MigrationDirective::PHASE_PREPARE);
  WaitState(id, v1::MIGRATION_STATE_SWITCHING);
  Answer("node1", v1::MigrationDirective::PHASE_SWITCH_AT);
  Answer("spare0", v1::MigrationDirective::PHASE_SWITCH_AT);
  WaitState(id, v1::MIGRATION_STATE_COMMITTED);
  auto f = core_->faults().Fault("F7");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->state(), v1::FAULT_STATE_MITIGATING);
  EXPECT_THAT(f->resolution_note(), HasSubstr(id));
}

// A hand-started migration names no fault; once it commits, the job's open
// faults that blame the leaver first are being mitigated. Faults that blame
// another node, or belong to another job, are left as they are.
TEST_F(MigrationApiTest, CommitMitigatesTheJobsFaultsThatBlameTheLeaver) {
  {
    auto store = FaultStore::Open(Db());
    ASSERT_TRUE(store.ok()) << store.status();
    auto add = [&](const std::string& id, const std::string& job,
                   const std::string& host, v1::SuspectLevel level) {
      v1::Fault f;
      f.set_fault_id(id);
      f.set_job_id(job);
      f.set_state(v1::FAULT_STATE_CONFIRMED);
      f.set_fault_class(v1::FAULT_CLASS_PROCESS_DIED);
      f.set_summary(absl::StrCat("a rank on ", host, " died"));
      v1::Suspect* s = f.add_suspects();
      s->set_level(level);
      s->set_host(host);
      bool ignored = false;
      ASSERT_TRUE((*store)->Upsert(f, &ignored).ok());
    };
    add("F1", "job1", "node0", v1::SUSPECT_LEVEL_PROCESS);
    add("F2", "job1", "node1", v1::SUSPECT_LEVEL_PROCESS);
    add("F3", "job2", "node0", v1::SUSPECT_LEVEL_NODE);
  }
  StartController();
  StartJob(/*standbys=*/1);
  v1::MigrateNodeResponse r;
  grpc::Status s = Migrate("node0", "", &r);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const std::string id = r.migration().migration_id();
  EXPECT_TRUE(r.migration().fault_id().empty());
  Answer("node0", v1::MigrationDirective::PHASE_PREPARE);
  Answer("node1", v1::MigrationDirective::PHASE_PREPARE);
  Answer("spare0", v1::MigrationDirective::PHASE_PREPARE);
  WaitState(id, v1::MIGRATION_STATE_SWITCHING);
  auto f1 = core_->faults().Fault("F1");
  ASSERT_TRUE(f1.ok());
  EXPECT_EQ(f1->state(), v1::FAULT_STATE_CONFIRMED) << "before the commit";
  Answer("node1", v1::MigrationDirective::PHASE_SWITCH_AT);
  Answer("spare0", v1::MigrationDirective::PHASE_SWITCH_AT);
  WaitState(id, v1::MIGRATION_STATE_COMMITTED);
  f1 = core_->faults().Fault("F1");
  ASSERT_TRUE(f1.ok());
  EXPECT_EQ(f1->state(), v1::FAULT_STATE_MITIGATING);
  EXPECT_THAT(f1->resolution_note(), HasSubstr(id));
  for (const char* other : {"F2", "F3"}) {
    auto f = core_->faults().Fault(other);
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(f->state(), v1::FAULT_STATE_CONFIRMED) << other;
  }

  // A fault about node0 that comes after the commit (a dead rank's fault
  // can come a cycle after a quick --from-replica migration) is mitigated
  // in the cycle that stores it.
  v1::ConnectRequest death;
  v1::RankLifecycle* l = death.add_lifecycle();
  l->set_kind(v1::RankLifecycle::KIND_DIED);
  l->set_job_id("job1");
  l->set_pid(job_.PidOf(0));  // node0's rank 0 (its communicator retired)
  l->set_global_rank(0);
  ASSERT_TRUE(agents_["node0"]->Send(death));
  std::string late_id;
  ASSERT_TRUE(WaitUntil([&] {
    core_->RunCycle();
    auto faults = core_->faults().Faults("job1", true, 0);
    for (const v1::Fault& f :
         faults.ok() ? *faults : std::vector<v1::Fault>{}) {
      if (f.fault_id() != "F1" && f.fault_id() != "F2") late_id = f.fault_id();
    }
    return !late_id.empty();
  })) << "no fault for the death reported after the commit";
  auto late = core_->faults().Fault(late_id);
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(late->fault_class(), v1::FAULT_CLASS_PROCESS_DIED);
  EXPECT_EQ(late->state(), v1::FAULT_STATE_MITIGATING);
  EXPECT_THAT(late->resolution_note(), HasSubstr(id));
  auto f2 = core_->faults().Fault("F2");
  ASSERT_TRUE(f2.ok());
  EXPECT_EQ(f2->state(), v1::FAULT_STATE_CONFIRMED);
}

TEST_F(MigrationApiTest, RestartedControllerStillMitigatesTheLeaversFaults) {
  StartController();
  StartJob(/*standbys=*/1);
  v1::MigrateNodeResponse r;
  grpc::Status s = Migrate("node0", "", &r);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const std::string id = r.migration().migration_id();
  for (const char* host : {"node0", "node1", "spare0"}) {
    Answer(host, v1::MigrationDirective::PHASE_PREPARE);
  }
  WaitState(id, v1::MIGRATION_STATE_SWITCHING);
  Answer("node1", v1::MigrationDirective::PHASE_SWITCH_AT);
  Answer("spare0", v1::MigrationDirective::PHASE_SWITCH_AT);
  WaitState(id, v1::MIGRATION_STATE_COMMITTED);
  agents_.clear();
  server_.reset();
  core_.reset();
  // A fault blaming the leaver, stored while no controller ran: the next
  // one knows from the stored history that job1 left node0.
  {
    auto store = FaultStore::Open(Db());
    ASSERT_TRUE(store.ok()) << store.status();
    v1::Fault f;
    f.set_fault_id("F9");
    f.set_job_id("job1");
    f.set_state(v1::FAULT_STATE_CONFIRMED);
    f.set_fault_class(v1::FAULT_CLASS_PROCESS_DIED);
    f.add_suspects()->set_host("node0");
    bool ignored = false;
    ASSERT_TRUE((*store)->Upsert(f, &ignored).ok());
  }
  StartController();
  core_->RunCycle();
  auto f9 = core_->faults().Fault("F9");
  ASSERT_TRUE(f9.ok());
  EXPECT_EQ(f9->state(), v1::FAULT_STATE_MITIGATING);
  EXPECT_THAT(f9->resolution_note(), HasSubstr(id));
}

}  // namespace
}  // namespace pitstop::controller::testing
