// Issue #33, round 23: the hosts a scheduler named for a job live in etcd
// with several controllers. A follower that takes over enforces them
// (they were in the old leader's memory only, so the new leader left every
// job open to any host), and a deposed leader that has not noticed cannot
// change them: etcd refuses, nothing changes, not even in its own memory.
// Skips loudly without the etcd binary.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pitstop/leader_hint.h"
#include "src/controller/controller.h"
#include "src/controller/ha/etcd_client.h"
#include "src/controller/ha/etcd_fault_store.h"
#include "src/controller/ha/ha_controller.h"
#include "src/controller/ha/leader_election.h"
#include "tests/controller/ha/etcd_fixture.h"
#include "tests/controller/report_comm.h"

namespace pitstop::controller::ha {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A leader's fence as it was: once deposed, a leader that has not noticed.
class FrozenFence final : public WriteFence {
 public:
  explicit FrozenFence(EtcdFence f) : fence_(std::move(f)) {}
  EtcdFence Current() const override { return fence_; }
  void Refused() override { ++refused_; }
  int refused_ = 0;

 private:
  EtcdFence fence_;
};

// Waits up to 20 s (CI machines are loaded) for `pred`.
template <typename Pred>
bool WaitFor(Pred pred) {
  for (int i = 0; i < 400; ++i) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return pred();
}

class JobHostsHaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string bin = testing::FindEtcd();
    if (bin.empty()) return;
    etcd_ = new testing::EtcdProcess();
    if (!etcd_->Start(bin, &start_error_)) {
      delete etcd_;
      etcd_ = nullptr;
    }
  }
  static void TearDownTestSuite() {
    delete etcd_;
    etcd_ = nullptr;
  }
  void SetUp() override {
    if (testing::FindEtcd().empty()) {
      GTEST_SKIP() << "SKIPPED: etcd binary not found (install etcd-server "
                      "via tools/install-deps.sh, or set PITSTOP_ETCD)";
    }
    ASSERT_NE(etcd_, nullptr) << start_error_;
    prefix_ = absl::StrCat(
        "/", ::testing::UnitTest::GetInstance()->current_test_info()->name(),
        "/");
  }
  std::unique_ptr<EtcdClient> Client() {
    auto c = EtcdClient::Create(
        {.endpoints = etcd_->endpoint(), .timeout = absl::Seconds(2)});
    EXPECT_TRUE(c.ok()) << c.status();
    return std::move(*c);
  }
  static testing::EtcdProcess* etcd_;
  static std::string start_error_;
  std::string prefix_;
};

testing::EtcdProcess* JobHostsHaTest::etcd_ = nullptr;
std::string JobHostsHaTest::start_error_;

TEST_F(JobHostsHaTest,
       AFollowerThatTakesOverEnforcesThemAndADeposedLeaderCannotWrite) {
  // A leads; its core writes through A's fence as it was.
  auto client_a = Client();
  LeaderElection::Options lo;
  lo.key = prefix_ + "leader";
  lo.self = "a:1";
  lo.ttl = absl::Seconds(2);
  LeaderElection a(client_a.get(), lo);
  a.Start();
  ASSERT_TRUE(WaitFor([&] { return a.IsLeader(); }));
  FrozenFence frozen(a.Fence());
  Controller::Options oa;
  oa.open_store = [&]() -> absl::StatusOr<std::unique_ptr<FaultStore>> {
    return std::make_unique<EtcdFaultStore>(client_a.get(), &frozen, prefix_);
  };
  auto core_a = Controller::Create(oa);
  ASSERT_TRUE(core_a.ok()) << core_a.status();

  // B follows before the job is named: what it enforces later comes from
  // etcd when it takes over, not from its start.
  HaOptions ho;
  ho.etcd_endpoints = etcd_->endpoint();
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
  const EtcdFence a_fence = a.Fence();
  a.Stop(/*resign=*/false);
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
