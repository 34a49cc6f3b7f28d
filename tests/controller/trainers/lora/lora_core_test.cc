// Controller with the multi-LoRA policy: trainer reports through an
// agent batch, the AUTO placement directive to the job's agent (counted as
// a policy action), Job.lora in GetJob and the GetJobLora / SetLoraPolicy
// calls.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pitstop/clock.h"
#include "src/agent/trainer_hub.h"
#include "src/controller/controller.h"
#include "tests/controller/metric_reader.h"

namespace pitstop::controller {
namespace {

class SinkRecorder : public CommandSink {
 public:
  void Send(const v1::ConnectResponse& r) override { got.push_back(r); }
  std::vector<v1::ConnectResponse> got;
};

// One batch of `job`'s 4 ranks, 3 steps each from step + 1: with `lora`,
// 4 stages of 4 layers (rank 3 at half speed); without, local-SGD steps
// (rank 3 computing twice as long). Every rank reports `seen` as the
// highest directive id it received.
v1::ConnectRequest Batch(const std::string& job, uint64_t step, bool lora,
                         uint64_t seen = 0) {
  v1::ConnectRequest batch;
  for (int r = 0; r < 4; ++r) {
    v1::ReportStepsRequest* t = batch.add_trainer_reports();
    t->mutable_trainer()->set_job_id(job);
    t->mutable_trainer()->set_global_rank(r);
    t->mutable_trainer()->set_world_size(4);
    t->set_seen_directive_id(seen);
    if (!lora) t->set_current_mode(v1::SYNC_MODE_SYNC);
    for (int i = 0; i < 3; ++i) {
      v1::StepReport* s = t->add_steps();
      s->set_step(step + i + 1);
      s->set_wall_ns(300'000'000);
      if (!lora) {
        v1::PhaseTime* p = s->add_phases();
        p->set_phase(v1::TRAIN_PHASE_COMMUNICATION);
        p->set_duration_ns(r == 3 ? 100'000'000 : 200'000'000);
        continue;
      }
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
  return batch;
}

TEST(ControllerLoraTest, CoreSendsThePlacementAndShowsTheJob) {
  FakeClock clock;
  prometheus::Registry registry;
  PolicyActionMetrics actions(&registry);
  Controller::Options o;
  o.clock = &clock;
  o.policy_actions = &actions;
  auto core = Controller::Create(o);
  ASSERT_TRUE(core.ok()) << core.status();
  SinkRecorder sink;
  v1::NodeRegistration reg;
  reg.set_host("lora-node");
  auto session = (*core)->AgentConnected(reg, &sink);
  ASSERT_TRUE(session.ok());
  v1::LoraSettings auto_policy;
  auto_policy.set_policy(v1::LORA_POLICY_AUTO);
  auto_policy.set_slow_persist_s(2);
  auto set = (*core)->trainers().SetLoraPolicy("lora-job", auto_policy);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->horizon_s(), 120u);  // default filled in
  auto_policy.set_min_gain(-1);
  EXPECT_TRUE(absl::IsInvalidArgument(
      (*core)->trainers().SetLoraPolicy("lora-job", auto_policy).status()));
  EXPECT_TRUE(
      absl::IsNotFound((*core)->trainers().JobLora("lora-job").status()));
  // 4 stages of 4 layers; rank 3 computes at half speed.
  uint64_t step = 0;
  for (int sec = 0; sec < 6; ++sec) {
    ASSERT_TRUE(
        (*core)->AgentBatch(*session, Batch("lora-job", step, true)).ok());
    step += 3;
    clock.Advance(absl::Seconds(1));
    (*core)->RunCycle();
  }
  ASSERT_EQ(sink.got.size(), 1u);
  ASSERT_EQ(sink.got[0].commands_size(), 1);
  const v1::TrainerDirective& d = sink.got[0].commands(0).trainer_directive();
  EXPECT_EQ(d.job_id(), "lora-job");
  EXPECT_EQ(d.directive_id(), 1u);  // the job's first directive
  ASSERT_EQ(d.placement().pipelines_size(), 1);
  const auto& stages = d.placement().pipelines(0).stages();
  ASSERT_EQ(stages.size(), 4);
  EXPECT_EQ(stages[3].layer_end() - stages[3].layer_begin(), 1u);
  // A policy action (pitstop_controller_policy_actions_total).
  EXPECT_EQ(
      testing::MetricValue(registry, "pitstop_controller_policy_actions_total",
                           {{"policy", "lora"}, {"action", "reschedule"}}),
      1);

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
  auto l = (*core)->trainers().JobLora("lora-job");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->trainers(), 4u);
  EXPECT_TRUE(
      absl::IsInvalidArgument((*core)->trainers().JobLora("").status()));
}

// Both trainer policies' directives of one job share one id sequence: a
// local-SGD directive after a LoRA directive to the same job gets a higher
// id, so the agent's per-job slot and the Python client (which keep only
// ids above the highest seen) deliver it.
TEST(ControllerLoraTest, SyncDirectiveAfterALoraDirectiveIsDelivered) {
  FakeClock clock;
  Controller::Options o;
  o.clock = &clock;
  auto core = Controller::Create(o);
  ASSERT_TRUE(core.ok()) << core.status();
  SinkRecorder sink;
  v1::NodeRegistration reg;
  reg.set_host("node");
  auto session = (*core)->AgentConnected(reg, &sink);
  ASSERT_TRUE(session.ok());
  v1::LoraSettings lora;
  lora.set_policy(v1::LORA_POLICY_AUTO);
  lora.set_slow_persist_s(2);
  ASSERT_TRUE((*core)->trainers().SetLoraPolicy("job", lora).ok());
  v1::SyncSettings sync;
  sync.set_policy(v1::SYNC_POLICY_AUTO);
  sync.set_slow_persist_s(2);
  ASSERT_TRUE((*core)->trainers().SetSyncPolicy("job", sync).ok());
  uint64_t step = 0;
  for (int sec = 0; sec < 6 && sink.got.empty(); ++sec, step += 3) {
    ASSERT_TRUE((*core)->AgentBatch(*session, Batch("job", step, true)).ok());
    clock.Advance(absl::Seconds(1));
    (*core)->RunCycle();
  }
  ASSERT_EQ(sink.got.size(), 1u);
  const v1::TrainerDirective placement =
      sink.got[0].commands(0).trainer_directive();
  ASSERT_TRUE(placement.has_placement());
  // The job's trainers now run local SGD's synchronous mode (same job id),
  // rank 3 a straggler; they saw the placement directive.
  for (int sec = 0; sec < 12 && sink.got.size() < 2; ++sec, step += 3) {
    ASSERT_TRUE((*core)
                    ->AgentBatch(*session, Batch("job", step, false,
                                                 placement.directive_id()))
                    .ok());
    clock.Advance(absl::Seconds(1));
    (*core)->RunCycle();
  }
  ASSERT_EQ(sink.got.size(), 2u);
  const v1::TrainerDirective switch_dir =
      sink.got[1].commands(0).trainer_directive();
  EXPECT_FALSE(switch_dir.has_placement());
  EXPECT_NE(switch_dir.mode(), v1::SYNC_MODE_SYNC);
  EXPECT_GT(switch_dir.directive_id(), placement.directive_id());
  // Through a real agent hub: a trainer that saw the placement directive
  // gets the switch.
  agent::TrainerHub hub(true);
  hub.OnDirective(placement);
  hub.OnDirective(switch_dir);
  v1::ReportStepsRequest poll;
  poll.mutable_trainer()->set_job_id("job");
  poll.set_seen_directive_id(placement.directive_id());
  absl::StatusOr<v1::ReportStepsResponse> resp = hub.Report(poll);
  ASSERT_TRUE(resp.ok()) << resp.status();
  ASSERT_EQ(resp->directives_size(), 1);
  EXPECT_EQ(resp->directives(0).directive_id(), switch_dir.directive_id());
}

// A controller that starts afresh continues above the ids the trainers
// report having seen (the agents would drop a lower one).
TEST(ControllerLoraTest, NewControllerContinuesAboveTheSeenIds) {
  FakeClock clock;
  Controller::Options o;
  o.clock = &clock;
  auto core = Controller::Create(o);
  ASSERT_TRUE(core.ok()) << core.status();
  SinkRecorder sink;
  v1::NodeRegistration reg;
  reg.set_host("node");
  auto session = (*core)->AgentConnected(reg, &sink);
  ASSERT_TRUE(session.ok());
  v1::LoraSettings lora;
  lora.set_policy(v1::LORA_POLICY_AUTO);
  lora.set_slow_persist_s(2);
  ASSERT_TRUE((*core)->trainers().SetLoraPolicy("job", lora).ok());
  uint64_t step = 0;
  for (int sec = 0; sec < 6 && sink.got.empty(); ++sec, step += 3) {
    ASSERT_TRUE(
        (*core)->AgentBatch(*session, Batch("job", step, true, 41)).ok());
    clock.Advance(absl::Seconds(1));
    (*core)->RunCycle();
  }
  ASSERT_EQ(sink.got.size(), 1u);
  EXPECT_EQ(sink.got[0].commands(0).trainer_directive().directive_id(), 42u);
}

}  // namespace
}  // namespace pitstop::controller
