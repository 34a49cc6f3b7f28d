// The agent's side of standby migration: --standby and the data plane in
// the registration, directives from the controller answered through the
// upstream stream (emulated data plane), refused without one.
#include "src/agent/migration_plane.h"

#include "gtest/gtest.h"
#include "src/agent/agent.h"
#include "tests/agent/test_receiver.h"
#include "tests/agent/test_util.h"

namespace pitstop::agent {
namespace {

using testing::TempDir;
using testing::TestReceiver;
using Reqs = std::vector<v1::ConnectRequest>;

class MigrationPlaneTest : public ::testing::Test {
 protected:
  absl::Status StartAgent(const std::string& controller,
                          const std::string& plane, bool standby) {
    AgentOptions o;
    o.ingest_socket = dir_.file("a.sock");
    o.controller = controller;
    o.host = "spare7";
    o.batch_ms = 50;
    o.metrics_address = "";
    o.upstream_backoff_max_ms = 200;
    o.sysfs_root = dir_.file("sys");
    o.standby = standby;
    o.migration_data_plane = plane;
    auto a = Agent::Create(o, Clock::Real());
    if (!a.ok()) return a.status();
    agent_ = std::move(*a);
    return absl::OkStatus();
  }
  void TearDown() override {
    if (agent_) agent_->Stop();
  }
  static v1::AgentCommand Directive(v1::MigrationDirective::Phase phase) {
    v1::AgentCommand cmd;
    cmd.set_command_id(7);
    v1::MigrationDirective* d = cmd.mutable_migration();
    d->set_phase(phase);
    d->set_migration_id("M3");
    d->set_job_id("job1");
    d->set_epoch(2);
    d->set_role(v1::MIGRATION_ROLE_JOINER);
    return cmd;
  }
  // The first MigrationAck of `phase` the receiver got, if any.
  static bool FindAck(const Reqs& reqs, v1::MigrationDirective::Phase phase,
                      v1::MigrationAck* out) {
    for (const v1::ConnectRequest& q : reqs) {
      for (const v1::MigrationAck& a : q.migration_acks()) {
        if (a.phase() == phase) {
          *out = a;
          return true;
        }
      }
    }
    return false;
  }

  TempDir dir_;
  std::unique_ptr<Agent> agent_;
};

TEST_F(MigrationPlaneTest, StandbyWithEmulatedPlaneAnswersEachPhase) {
  TestReceiver receiver;
  ASSERT_TRUE(StartAgent(receiver.address(), "emulated", true).ok());
  ASSERT_TRUE(receiver.WaitUntil(
      [](const Reqs& r) { return !r.empty() && r[0].has_registration(); }));
  const v1::NodeRegistration reg = receiver.requests()[0].registration();
  EXPECT_TRUE(reg.standby());
  EXPECT_EQ(reg.migration_data_plane(), "emulated");

  ASSERT_TRUE(
      receiver.SendCommand(Directive(v1::MigrationDirective::PHASE_PREPARE)));
  v1::MigrationAck ready;
  ASSERT_TRUE(receiver.WaitUntil([&](const Reqs& r) {
    return FindAck(r, v1::MigrationDirective::PHASE_PREPARE, &ready);
  }));
  EXPECT_TRUE(ready.ok());
  EXPECT_EQ(ready.migration_id(), "M3");
  EXPECT_EQ(ready.epoch(), 2u);

  ASSERT_TRUE(
      receiver.SendCommand(Directive(v1::MigrationDirective::PHASE_SWITCH_AT)));
  v1::MigrationAck switched;
  ASSERT_TRUE(receiver.WaitUntil([&](const Reqs& r) {
    return FindAck(r, v1::MigrationDirective::PHASE_SWITCH_AT, &switched);
  }));
  EXPECT_TRUE(switched.ok());
}

TEST_F(MigrationPlaneTest, WithoutDataPlaneTheAgentRefusesAndSaysWhy) {
  TestReceiver receiver;
  ASSERT_TRUE(StartAgent(receiver.address(), "none", false).ok());
  ASSERT_TRUE(receiver.WaitUntil(
      [](const Reqs& r) { return !r.empty() && r[0].has_registration(); }));
  EXPECT_FALSE(receiver.requests()[0].registration().standby());
  EXPECT_EQ(receiver.requests()[0].registration().migration_data_plane(), "");
  ASSERT_TRUE(
      receiver.SendCommand(Directive(v1::MigrationDirective::PHASE_PREPARE)));
  v1::MigrationAck ack;
  ASSERT_TRUE(receiver.WaitUntil([&](const Reqs& r) {
    return FindAck(r, v1::MigrationDirective::PHASE_PREPARE, &ack);
  }));
  EXPECT_FALSE(ack.ok());
  EXPECT_NE(ack.error().find("no migration data plane"), std::string::npos);
}

TEST_F(MigrationPlaneTest, UnknownDataPlaneIsAUsageError) {
  TestReceiver receiver;
  absl::Status s = StartAgent(receiver.address(), "rdma", false);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("migration.data_plane"), std::string::npos);
  AgentOptions o;
  o.migration_data_plane = "rdma";
  s = ValidateAgentOptions(o, "agent.yaml");
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("--migration-data-plane"), std::string::npos);
}

TEST(EmulatedMigrationPlane, RepeatedDirectiveIsAnsweredAgainNotReapplied) {
  std::vector<v1::MigrationAck> acks;
  EmulatedMigrationPlane plane(
      [&](const v1::MigrationAck& a) { acks.push_back(a); });
  v1::MigrationDirective d;
  d.set_phase(v1::MigrationDirective::PHASE_PREPARE);
  d.set_migration_id("M1");
  d.set_epoch(1);
  plane.OnDirective(d);
  plane.OnDirective(d);
  EXPECT_EQ(acks.size(), 2u);
  EXPECT_EQ(plane.applied(), 1u);
  d.set_phase(v1::MigrationDirective::PHASE_COMMIT);
  plane.OnDirective(d);
  EXPECT_EQ(acks.size(), 2u);  // COMMIT needs no answer
  EXPECT_EQ(plane.applied(), 2u);
}

}  // namespace
}  // namespace pitstop::agent
