// ControllerCore with the multi-LoRA policy: trainer reports through an
// agent batch, the AUTO placement directive to the job's agent, Job.lora in
// GetJob and the GetJobLora / SetLoraPolicy calls.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pitstop/clock.h"
#include "src/controller/controller_core.h"

namespace pitstop::controller {
namespace {

class SinkRecorder : public CommandSink {
 public:
  void Send(const v1::ConnectResponse& r) override { got.push_back(r); }
  std::vector<v1::ConnectResponse> got;
};

TEST(ControllerLoraTest, CoreSendsThePlacementAndShowsTheJob) {
  FakeClock clock;
  ControllerCore::Options o;
  o.clock = &clock;
  auto core = ControllerCore::Create(o);
  ASSERT_TRUE(core.ok()) << core.status();
  SinkRecorder sink;
  v1::NodeRegistration reg;
  reg.set_host("lora-node");
  auto session = (*core)->AgentConnected(reg, &sink);
  ASSERT_TRUE(session.ok());
  v1::LoraSettings auto_policy;
  auto_policy.set_policy(v1::LORA_POLICY_AUTO);
  auto_policy.set_slow_persist_s(2);
  auto set = (*core)->SetLoraPolicy("lora-job", auto_policy);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->horizon_s(), 120u);  // default filled in
  auto_policy.set_min_gain(-1);
  EXPECT_TRUE(absl::IsInvalidArgument(
      (*core)->SetLoraPolicy("lora-job", auto_policy).status()));
  EXPECT_TRUE(absl::IsNotFound((*core)->JobLora("lora-job").status()));
  // 4 stages of 4 layers; rank 3 computes at half speed.
  uint64_t step = 0;
  for (int sec = 0; sec < 6; ++sec) {
    v1::ConnectRequest batch;
    for (int r = 0; r < 4; ++r) {
      v1::ReportStepsRequest* t = batch.add_trainer_reports();
      t->mutable_trainer()->set_job_id("lora-job");
      t->mutable_trainer()->set_global_rank(r);
      t->mutable_trainer()->set_world_size(4);
      for (int i = 0; i < 3; ++i) {
        v1::StepReport* s = t->add_steps();
        s->set_step(step + i + 1);
        s->set_wall_ns(300'000'000);
        v1::LoraStageTime* l = s->mutable_lora();
        l->set_stage(r);
        l->set_layer_begin(4 * r);
        l->set_layer_end(4 * r + 4);
        l->set_micro_batches(8);
        for (int k = 0; k < 16; ++k) l->add_layer_costs(1.0);
        l->set_compute_ns(r == 3 ? 200'000'000 : 100'000'000);
        if (r == 3) l->set_samples(32);
      }
    }
    step += 3;
    ASSERT_TRUE((*core)->AgentBatch(*session, batch).ok());
    clock.Advance(absl::Seconds(1));
    (*core)->RunCycle();
  }
  ASSERT_EQ(sink.got.size(), 1u);
  ASSERT_EQ(sink.got[0].commands_size(), 1);
  const v1::TrainerDirective& d = sink.got[0].commands(0).trainer_directive();
  EXPECT_EQ(d.job_id(), "lora-job");
  EXPECT_GE(d.directive_id(), kLoraDirectiveIdBase);
  ASSERT_EQ(d.placement().pipelines_size(), 1);
  const auto& stages = d.placement().pipelines(0).stages();
  ASSERT_EQ(stages.size(), 4);
  EXPECT_EQ(stages[3].layer_end() - stages[3].layer_begin(), 1u);

  auto job = (*core)->Job("lora-job");  // known only from LoRA reports
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->n_ranks(), 4u);
  EXPECT_THAT(job->hosts(), ::testing::ElementsAre("lora-node"));
  ASSERT_TRUE(job->has_lora());
  EXPECT_THAT(job->lora().slow_ranks(), ::testing::ElementsAre(3));
  ASSERT_EQ(job->lora().decisions_size(), 1);
  EXPECT_TRUE(job->lora().decisions(0).sent());
  EXPECT_THAT(job->lora().decisions(0).evidence().text(),
              ::testing::HasSubstr("rank 3 at 0.50x"));
  // Not a local-SGD job: the sync policy leaves its reports alone.
  EXPECT_EQ(job->sync().trainers(), 0u);
  auto l = (*core)->JobLora("lora-job");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->trainers(), 4u);
  EXPECT_TRUE(absl::IsInvalidArgument((*core)->JobLora("").status()));
}

}  // namespace
}  // namespace pitstop::controller
