// Flow plans in the SQLite store (the single controller's): a planner's
// plan survives a restart, a stale epoch never replaces a newer plan. The
// etcd store's side is in controller_ha_test.
#include <unistd.h>

#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/c4p/fabric_io.h"
#include "src/c4p/flows.h"
#include "src/c4p/plan_codec.h"
#include "src/c4p/planner.h"
#include "src/controller/store/fault_store.h"

namespace pitstop::controller {
namespace {

using ::testing::HasSubstr;

c4p::FlowPlan RealPlan(uint64_t epoch) {
  auto o = c4p::ParseGeneratorSpec("gen:leafspine,gpus=16,hosts_per_tor=2");
  EXPECT_TRUE(o.ok()) << o.status();
  auto fab = c4p::GenerateFabric(*o);
  EXPECT_TRUE(fab.ok()) << fab.status();
  auto place = c4p::PlaceJob(*fab, 16, c4p::Placement::kPacked, 1);
  EXPECT_TRUE(place.ok()) << place.status();
  int channels = 0;
  std::vector<c4p::Flow> flows =
      c4p::BuildRingFlows(*fab, *place, c4p::RingSpec(), &channels);
  c4p::Planner planner(&*fab, &flows, c4p::PlannerOptions());
  return planner.Plan(epoch);
}

class PlanStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("pitstop-plans-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    Open();
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  void Open() {  // a controller (re)start on the same file
    store_.reset();
    auto s = FaultStore::Open((dir_ / "pitstop.db").string());
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(*s);
  }
  std::filesystem::path dir_;
  std::unique_ptr<FaultStore> store_;
};

TEST_F(PlanStoreTest, ThePlanSurvivesARestartAndOnlyNewerEpochsReplaceIt) {
  const c4p::FlowPlan p3 = RealPlan(3);
  ASSERT_FALSE(p3.paths.empty());
  ASSERT_TRUE(store_->SavePlan({"job1", 3, c4p::EncodePlan(p3)}).ok());
  ASSERT_TRUE(store_->SavePlan({"job0", 1, c4p::EncodePlan(RealPlan(1))}).ok());
  Open();
  auto plans = store_->Plans();
  ASSERT_TRUE(plans.ok()) << plans.status();
  ASSERT_EQ(plans->size(), 2u);
  EXPECT_EQ((*plans)[0].job_id, "job0");  // by job id
  EXPECT_EQ((*plans)[1].job_id, "job1");
  EXPECT_EQ((*plans)[1].epoch, 3u);
  auto back = c4p::DecodePlan((*plans)[1].data);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->epoch, 3u);
  ASSERT_EQ(back->paths.size(), p3.paths.size());
  for (size_t i = 0; i < p3.paths.size(); ++i) {
    EXPECT_EQ(back->paths[i].links, p3.paths[i].links) << i;
  }

  // A re-plan that lost a race (epoch 2) does not undo epoch 3.
  absl::Status s = store_->SavePlan({"job1", 2, c4p::EncodePlan(RealPlan(2))});
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("epoch 2"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("stored epoch 3"));
  // The same epoch again (a retried write) and a newer one replace it.
  ASSERT_TRUE(store_->SavePlan({"job1", 3, "{}"}).ok());
  ASSERT_TRUE(store_->SavePlan({"job1", 4, c4p::EncodePlan(RealPlan(4))}).ok());
  plans = store_->Plans();
  ASSERT_TRUE(plans.ok());
  EXPECT_EQ((*plans)[1].epoch, 4u);
  EXPECT_TRUE(c4p::DecodePlan((*plans)[1].data).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(store_->SavePlan({"", 1, "{}"})));
}

}  // namespace
}  // namespace pitstop::controller
