// The fixture of the standby-migration tests over the real Controller API
// and AgentLink on loopback (migration_api_test.cc, actions_ctl_test.cc):
// job1's agents and standbys as AgentLink test clients that answer the
// directives themselves (an emulated data plane: nothing moves on any
// rank).
#ifndef PITSTOP_TESTS_CONTROLLER_MIGRATION_MIGRATION_API_FIXTURE_H_
#define PITSTOP_TESTS_CONTROLLER_MIGRATION_MIGRATION_API_FIXTURE_H_

#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "pitstop/clock.h"
#include "pitstop/v1/controller.grpc.pb.h"
#include "src/controller/api/controller_service.h"
#include "src/controller/controller.h"
#include "tests/controller/sim_job.h"
#include "tests/controller/test_agent.h"

namespace pitstop::controller::testing {

class MigrationApiFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat(
               "pitstop-migapi-", ::getpid(), "-",
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    agents_.clear();
    server_.reset();
    core_.reset();
    std::filesystem::remove_all(dir_);
  }
  std::string Db() const { return (dir_ / "pitstop.db").string(); }
  // More options of the controller StartController creates.
  virtual void Configure(Controller::Options* o) { (void)o; }
  void StartController() {
    Controller::Options o;
    o.clock = &clock_;
    o.db_path = Db();
    o.cycle_period = absl::Hours(1);  // cycles only when the test runs one
    Configure(&o);
    auto core = Controller::Create(o);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
    auto server = ControllerServer::Start(core_.get(), "127.0.0.1:0");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    target_ = absl::StrCat("127.0.0.1:", server_->port());
    stub_ = v1::Controller::NewStub(TestChannel(target_));
  }
  // job1: 8 ranks on node0, node1 (4 each) plus `standbys` spare nodes.
  void StartJob(int standbys, const std::string& data_plane = "emulated") {
    for (v1::NodeRegistration reg : job_.Nodes()) {
      reg.set_migration_data_plane(data_plane);
      agents_[reg.host()] = std::make_unique<TestAgent>(target_, reg);
    }
    for (int i = 0; i < standbys; ++i) {
      v1::NodeRegistration reg;
      reg.set_host(absl::StrCat("spare", i));
      reg.set_agent_id(absl::StrCat("agent-spare", i));
      reg.set_standby(true);
      reg.set_migration_data_plane(data_plane);
      agents_[reg.host()] = std::make_unique<TestAgent>(target_, reg);
    }
    for (int32_t r = 0; r < job_.n_ranks(); ++r) {
      v1::ConnectRequest batch;
      *batch.add_communicators() = job_.Info(r);
      ASSERT_TRUE(agents_[job_.HostOf(r)]->Send(batch));
    }
    ASSERT_TRUE(WaitUntil([&] {
      auto comms = core_->ingest().Communicators("");
      if (comms.size() != 1 || comms[0].members_size() != job_.n_ranks() ||
          core_->Status().nodes_ready() != agents_.size()) {
        return false;
      }
      for (const auto& m : comms[0].members()) {
        if (m.host().empty()) return false;
      }
      return true;
    }));
  }
  grpc::Status Migrate(const std::string& host, const std::string& to,
                       v1::MigrateNodeResponse* r) {
    v1::MigrateNodeRequest req;
    req.set_host(host);
    req.set_to(to);
    req.set_who("test");
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(20));
    return stub_->MigrateNode(&ctx, req, r);
  }
  v1::ListStandbyResponse Standby() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(20));
    v1::ListStandbyResponse r;
    EXPECT_TRUE(stub_->ListStandby(&ctx, v1::ListStandbyRequest(), &r).ok());
    return r;
  }
  v1::Migration GetMigration(const std::string& id) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(20));
    v1::GetMigrationRequest req;
    req.set_migration_id(id);
    v1::GetMigrationResponse r;
    grpc::Status s = stub_->GetMigration(&ctx, req, &r);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return r.migration();
  }
  // Waits for `host`'s agent to receive a directive of `phase` and answers
  // it (READY with `progress`, or SWITCHED).
  // `died_rank` >= 0: the same batch also reports that rank of job1 dead
  // (an answer the rank gave just before it died).
  void Answer(const std::string& host, v1::MigrationDirective::Phase phase,
              uint64_t progress = 0, int died_rank = -1) {
    v1::MigrationDirective d;
    ASSERT_TRUE(WaitUntil([&] {
      for (const v1::AgentCommand& c :
           agents_[host]->WaitForCommands(1, absl::Milliseconds(50))) {
        if (c.has_migration() && c.migration().phase() == phase) {
          d = c.migration();
          return true;
        }
      }
      return false;
    })) << host
        << " got no " << v1::MigrationDirective::Phase_Name(phase);
    v1::ConnectRequest batch;
    v1::MigrationAck* a = batch.add_migration_acks();
    a->set_migration_id(d.migration_id());
    a->set_epoch(d.epoch());
    a->set_phase(phase);
    a->set_ok(true);
    a->set_progress_seq(progress);
    if (died_rank >= 0) {
      v1::RankLifecycle* l = batch.add_lifecycle();
      l->set_kind(v1::RankLifecycle::KIND_DIED);
      l->set_job_id("job1");
      l->set_pid(job_.PidOf(died_rank));
      l->set_global_rank(died_rank);
    }
    ASSERT_TRUE(agents_[host]->Send(batch));
  }
  void WaitState(const std::string& id, v1::MigrationState s) {
    ASSERT_TRUE(WaitUntil([&] { return GetMigration(id).state() == s; }))
        << "migration " << id << " never reached " << v1::MigrationState_Name(s)
        << "; now " << GetMigration(id).DebugString();
  }

  std::filesystem::path dir_;
  FakeClock clock_;
  SimJob job_{0xC0FFEE, 8, 4};
  std::unique_ptr<Controller> core_;
  std::unique_ptr<ControllerServer> server_;
  std::string target_;
  std::unique_ptr<v1::Controller::Stub> stub_;
  std::map<std::string, std::unique_ptr<TestAgent>> agents_;
};

}  // namespace pitstop::controller::testing

#endif  // PITSTOP_TESTS_CONTROLLER_MIGRATION_MIGRATION_API_FIXTURE_H_
