// Issue #33, round 23: the hosts a scheduler named for a job live in etcd
// with several controllers. A follower that takes over enforces them
// (they were in the old leader's memory only, so the new leader left every
// job open to any host), and a deposed leader that has not noticed cannot
// change them: etcd refuses, nothing changes, not even in its own memory.
// Skips loudly without the etcd binary.
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pitstop/leader_hint.h"
#include "src/controller/controller.h"
#include "src/controller/ha/etcd_fault_store.h"
#include "src/controller/ha/ha_controller.h"
#include "tests/controller/ha/ha_fixture.h"
#include "tests/controller/report_comm.h"

namespace pitstop::controller::ha {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST_F(HaTest,
       AFollowerThatTakesOverEnforcesJobHostsAndADeposedLeaderCannotWriteThem) {
  // A leads; its core writes through A's fence as it was.
  auto client_a = Client();
  auto a = Election(client_a.get(), "a:1");
  a->Start();
  ASSERT_TRUE(WaitFor([&] { return a->IsLeader(); }));
  StaleFence frozen(a->Fence());
  Controller::Options oa;
  oa.open_store = [&]() -> absl::StatusOr<std::unique_ptr<FaultStore>> {
    return std::make_unique<EtcdFaultStore>(client_a.get(), &frozen, prefix_);
  };
  auto core_a = Controller::Create(oa);
  ASSERT_TRUE(core_a.ok()) << core_a.status();

  // B follows before the job is named: what it enforces later comes from
  // etcd when it takes over, not from its start.
  HaOptions ho;
  ho.etcd_endpoints = endpoint();
  ho.etcd_prefix = prefix_;
  auto ha_b = HaController::Create(ho, "127.0.0.1:7002");
  ASSERT_TRUE(ha_b.ok()) << ha_b.status();
  HaController* hb = ha_b->get();
  Controller::Options ob;
  ob.open_store = [hb] { return hb->OpenStore(); };
  ob.leadership = hb;
  auto core_b = Controller::Create(ob);
  ASSERT_TRUE(core_b.ok()) << core_b.status();
  hb->Start(core_b->get());
  ASSERT_TRUE(WaitFor([&] { return (*core_b)->Status().leader() == "a:1"; }));

  auto named = (*core_a)->ingest().SetJobHosts("good", {"n1", "n2"}, "slurm");
  ASSERT_TRUE(named.ok()) << named.status();
  absl::Status s =
      (*core_b)->ingest().SetJobHosts("good", {"n3"}, "slurm").status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;  // a follower names nothing

  // A pauses past its lease (revoked: the same, sooner); B takes over.
  const EtcdFence a_fence = a->Fence();
  a->Stop(/*resign=*/false);
  ASSERT_TRUE(client_a->Revoke(a_fence.lease).ok());
  ASSERT_TRUE(WaitFor([&] {
    return (*core_b)->Status().role() == v1::CONTROLLER_ROLE_LEADER;
  }));
  EXPECT_THAT((*core_b)->ingest().JobHosts("good"), ElementsAre("n1", "n2"));
  s = testing::ReportComm(core_b->get(), "n3", "good", 0x6001);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("host n3 is not one of"));
  EXPECT_TRUE(testing::ReportComm(core_b->get(), "n1", "good", 0x6002).ok());

  // The deposed A names n3 and forgets the naming: etcd refuses both,
  // naming B; nothing changed in etcd or in A's memory.
  s = (*core_a)->ingest().SetJobHosts("good", {"n3"}, "evil").status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(LeaderFromMessage(s.message()), "127.0.0.1:7002");
  s = (*core_a)->ingest().SetJobHosts("good", {}, "evil").status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(frozen.refused_, 2);
  EXPECT_THAT((*core_a)->ingest().JobHosts("good"), ElementsAre("n1", "n2"));
  auto stored = (*hb->OpenStore())->ScheduledHosts();
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->count("good"), 1u);
  EXPECT_THAT(stored->at("good").hosts(), ElementsAre("n1", "n2"));
  EXPECT_EQ(stored->at("good").who(), "slurm");

  // The leader forgets it at the job's end: gone from etcd too.
  ASSERT_TRUE((*core_b)->ingest().SetJobHosts("good", {}, "slurm").ok());
  stored = (*hb->OpenStore())->ScheduledHosts();
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_TRUE(stored->empty());
  EXPECT_TRUE(testing::ReportComm(core_b->get(), "n3", "good", 0x6003).ok());
  hb->Stop();
}

}  // namespace
}  // namespace pitstop::controller::ha
