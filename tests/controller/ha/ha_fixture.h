// Shared by the tests of several controllers on a real etcd
// (controller_ha_test): one etcd for the suite, a key prefix per test, a
// fence frozen at what a paused leader believed, and a patient wait.
#ifndef PITSTOP_TESTS_CONTROLLER_HA_HA_FIXTURE_H_
#define PITSTOP_TESTS_CONTROLLER_HA_HA_FIXTURE_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "src/controller/ha/etcd_client.h"
#include "src/controller/ha/etcd_fault_store.h"
#include "src/controller/ha/leader_election.h"
#include "tests/controller/ha/etcd_fixture.h"

namespace pitstop::controller::ha {

// A fence fixed at what a controller believed when it was paused: models
// a deposed leader that has not noticed yet.
class StaleFence final : public WriteFence {
 public:
  explicit StaleFence(EtcdFence f) : fence_(std::move(f)) {}
  EtcdFence Current() const override { return fence_; }
  void Refused() override { ++refused_; }
  int refused_ = 0;

 private:
  EtcdFence fence_;
};

// Waits up to 20 s (generous: CI machines are loaded) for `pred`.
template <typename Pred>
bool WaitFor(Pred pred) {
  for (int i = 0; i < 400; ++i) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return pred();
}

// One etcd for the suite (starting one takes seconds); each test works
// under its own key prefix. Skips loudly without the etcd binary.
class HaTest : public ::testing::Test {
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
  const std::string& endpoint() const { return etcd_->endpoint(); }
  std::unique_ptr<EtcdClient> Client() {
    auto c = EtcdClient::Create(
        {.endpoints = endpoint(), .timeout = absl::Seconds(2)});
    EXPECT_TRUE(c.ok()) << c.status();
    return std::move(*c);
  }
  std::unique_ptr<LeaderElection> Election(EtcdClient* c,
                                           const std::string& self) {
    LeaderElection::Options o;
    o.key = prefix_ + "leader";
    o.self = self;
    o.ttl = absl::Seconds(2);
    return std::make_unique<LeaderElection>(c, std::move(o));
  }
  static inline testing::EtcdProcess* etcd_ = nullptr;
  static inline std::string start_error_;
  std::string prefix_;
};

}  // namespace pitstop::controller::ha

#endif  // PITSTOP_TESTS_CONTROLLER_HA_HA_FIXTURE_H_
