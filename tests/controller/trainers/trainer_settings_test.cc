// Issue #15: the trainer policies' per-job settings (SetSyncPolicy,
// SetLoraPolicy) are durable. A controller restarted on the same SQLite
// file has them; they were kept in memory only, so a restart forgot them.
// The etcd side (a new leader has them, a deposed leader's write is
// refused) is in controller_ha_test.

#include <filesystem>

#include "gtest/gtest.h"
#include "pitstop/clock.h"
#include "src/controller/controller.h"
#include "src/controller/store/fault_store.h"
#include "tests/controller/restart_fixture.h"

namespace pitstop::controller {
namespace {

class NullSink : public CommandSink {
 public:
  void Send(const v1::ConnectResponse&) override {}
};

// One multi-LoRA report of `job`'s 2 pipeline stages (what makes a job
// visible to GetJobLora).
v1::ConnectRequest LoraBatch(const std::string& job) {
  v1::ConnectRequest batch;
  for (int r = 0; r < 2; ++r) {
    v1::ReportStepsRequest* t = batch.add_trainer_reports();
    t->mutable_trainer()->set_job_id(job);
    t->mutable_trainer()->set_global_rank(r);
    t->mutable_trainer()->set_world_size(2);
    v1::StepReport* s = t->add_steps();
    s->set_step(1);
    s->set_wall_ns(300'000'000);
    v1::LoraStageTime* l = s->mutable_lora();
    l->set_stage(r);
    l->set_layer_begin(2 * r);
    l->set_layer_end(2 * r + 2);
    l->set_micro_batches(4);
    for (int k = 0; k < 4; ++k) l->add_layer_costs(1.0);
    l->set_compute_ns(100'000'000);
    if (r == 1) l->set_samples(16);
  }
  return batch;
}

class TrainerSettingsTest : public testing::RestartFixture {};

TEST_F(TrainerSettingsTest, ARestartedControllerKeepsSyncAndLoraSettings) {
  v1::SyncSettings sync;
  sync.set_policy(v1::SYNC_POLICY_AUTO);
  sync.set_slow_persist_s(7);
  v1::LoraSettings lora;
  lora.set_policy(v1::LORA_POLICY_AUTO);
  lora.set_min_gain(3);
  {
    auto core = Start();
    ASSERT_NE(core, nullptr);
    ASSERT_TRUE(core->trainers().SetSyncPolicy("job-a", sync).ok());
    ASSERT_TRUE(core->trainers().SetLoraPolicy("job-a", lora).ok());
    sync.set_slow_persist_s(9);  // the newest setting wins
    ASSERT_TRUE(core->trainers().SetSyncPolicy("job-a", sync).ok());
    // Refused settings are not stored.
    v1::SyncSettings bad;
    bad.set_local_mode(v1::SYNC_MODE_SYNC);
    EXPECT_TRUE(absl::IsInvalidArgument(
        core->trainers().SetSyncPolicy("job-b", bad).status()));
    v1::LoraSettings bad_lora;
    bad_lora.set_min_gain(-1);
    EXPECT_TRUE(absl::IsInvalidArgument(
        core->trainers().SetLoraPolicy("job-b", bad_lora).status()));
  }
  auto core = Start();
  ASSERT_NE(core, nullptr);
  auto got = core->trainers().JobSync("job-a");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->settings().policy(), v1::SYNC_POLICY_AUTO);
  EXPECT_EQ(got->settings().slow_persist_s(), 9u);
  EXPECT_EQ(got->settings().healthy_s(), DefaultSyncSettings().healthy_s());
  EXPECT_TRUE(absl::IsNotFound(core->trainers().JobSync("job-b").status()));
  // The LoRA view appears with the job's first reports; it has the
  // settings given before the restart.
  NullSink sink;
  v1::NodeRegistration reg;
  reg.set_host("lora-node");
  auto session = core->AgentConnected(reg, &sink);
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE(core->AgentBatch(*session, LoraBatch("job-a")).ok());
  auto view = core->trainers().JobLora("job-a");
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->settings().policy(), v1::LORA_POLICY_AUTO);
  EXPECT_EQ(view->settings().min_gain(), 3);
  core->AgentDisconnected(*session);
}

TEST_F(TrainerSettingsTest, TheStoreRoundTripsAndRefusesAnEmptyJob) {
  auto store = FaultStore::Open((dir_ / "s.db").string());
  ASSERT_TRUE(store.ok()) << store.status();
  v1::SyncSettings sync;
  sync.set_period_steps(12);
  v1::LoraSettings lora;
  lora.set_horizon_s(30);
  ASSERT_TRUE((*store)->SaveSyncPolicy("j1", sync).ok());
  ASSERT_TRUE((*store)->SaveLoraPolicy("j2", lora).ok());
  EXPECT_TRUE(absl::IsInvalidArgument((*store)->SaveSyncPolicy("", sync)));
  EXPECT_TRUE(absl::IsInvalidArgument((*store)->SaveLoraPolicy("", lora)));
  auto s = (*store)->SyncPolicies();
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 1u);
  EXPECT_EQ(s->at("j1").period_steps(), 12u);
  auto l = (*store)->LoraPolicies();
  ASSERT_TRUE(l.ok()) << l.status();
  ASSERT_EQ(l->size(), 1u);
  EXPECT_EQ(l->at("j2").horizon_s(), 30u);
}

}  // namespace
}  // namespace pitstop::controller
