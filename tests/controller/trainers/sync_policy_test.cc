// SyncPolicyEngine: step-time stragglers and the OFF / ADVISE / AUTO
// transitions on a FakeClock; plus Controller forwarding directives to
// the agents of the job and answering GetJobSync / SetSyncPolicy.
#include "src/controller/trainers/sync_policy.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pitstop/clock.h"
#include "src/controller/controller.h"
#include "tests/controller/metric_reader.h"
#include "tests/controller/trainers/trainer_batches.h"

namespace pitstop::controller {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

class SyncPolicyTest : public ::testing::Test {
 protected:
  SyncPolicyTest() : engine_(&clock_, Options()) {}

  static SyncPolicyEngine::Options Options() {
    SyncPolicyEngine::Options o;
    o.defaults.set_slow_persist_s(10);
    o.defaults.set_healthy_s(30);
    return o;
  }

  // One second of training: `steps` steps per rank, rank `slow` computing
  // `factor` x as long (the others wait for it in communication).
  void Second(int world, int slow = -1, double factor = 2.0,
              v1::SyncMode mode = v1::SYNC_MODE_SYNC, bool checkpoint = false) {
    for (int r = 0; r < world; ++r) {
      v1::ReportStepsRequest req;
      req.mutable_trainer()->set_job_id("j");
      req.mutable_trainer()->set_global_rank(r);
      req.mutable_trainer()->set_world_size(world);
      req.set_current_mode(mode);
      for (int i = 0; i < 5; ++i) {
        v1::StepReport* s = req.add_steps();
        s->set_step(++step_[r]);
        const uint64_t compute = r == slow ? base_ns_ * factor : base_ns_;
        const uint64_t wall = base_ns_ * (slow >= 0 ? factor : 1.0) + 1'000;
        s->set_wall_ns(wall);
        v1::PhaseTime* p = s->add_phases();
        p->set_phase(v1::TRAIN_PHASE_COMMUNICATION);
        p->set_duration_ns(wall - compute);
        if (checkpoint && r == 0) {
          p = s->add_phases();
          p->set_phase(v1::TRAIN_PHASE_CHECKPOINT);
          p->set_duration_ns(5'000'000'000);
          s->set_wall_ns(wall + 5'000'000'000);
        }
      }
      ASSERT_TRUE(engine_.AddReport(absl::StrCat("node", r / 2), req).ok());
    }
    clock_.Advance(absl::Seconds(1));
    sent_ = engine_.Evaluate(faults_);
    for (auto& o : sent_) all_sent_.push_back(o);
  }

  v1::JobSync State() {
    auto s = engine_.State("j");
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : v1::JobSync();
  }

  void SetPolicy(v1::SyncPolicy p) {
    v1::SyncSettings s;
    s.set_policy(p);
    ASSERT_TRUE(engine_.SetSettings("j", s).ok());
  }

  FakeClock clock_;
  SyncPolicyEngine engine_;
  std::vector<v1::Fault> faults_;
  std::vector<SyncPolicyEngine::Outgoing> sent_, all_sent_;
  std::map<int, uint64_t> step_;
  uint64_t base_ns_ = 40'000'000;  // a fast rank's compute per step
};

TEST_F(SyncPolicyTest, HealthyJobNeverSwitches) {
  SetPolicy(v1::SYNC_POLICY_AUTO);
  for (int i = 0; i < 120; ++i) Second(4);
  EXPECT_TRUE(all_sent_.empty());
  const v1::JobSync s = State();
  EXPECT_EQ(s.decisions_size(), 0);
  EXPECT_EQ(s.target_mode(), v1::SYNC_MODE_SYNC);
  EXPECT_EQ(s.trainers(), 4u);
  EXPECT_NEAR(s.step_ms_median(), 40.0, 0.01);
  EXPECT_TRUE(s.step_stragglers().empty());
}

TEST_F(SyncPolicyTest, AdviseRecordsButSendsNothing) {
  // ADVISE is the default.
  for (int i = 0; i < 5; ++i) Second(4, /*slow=*/3);
  EXPECT_EQ(State().step_stragglers_size(), 1);
  EXPECT_EQ(State().step_stragglers(0), 3);
  EXPECT_EQ(State().decisions_size(), 0);
  for (int i = 0; i < 10; ++i) Second(4, 3);
  const v1::JobSync s = State();
  ASSERT_EQ(s.decisions_size(), 1);
  EXPECT_EQ(s.settings().policy(), v1::SYNC_POLICY_ADVISE);
  EXPECT_FALSE(s.decisions(0).sent());
  EXPECT_EQ(s.decisions(0).to_mode(), v1::SYNC_MODE_TIMED);
  EXPECT_THAT(s.decisions(0).evidence().text(), HasSubstr("rank 3 computes"));
  EXPECT_NEAR(s.decisions(0).evidence().values().at("rank_3_ratio"), 2.0, 0.01);
  EXPECT_EQ(s.target_mode(), v1::SYNC_MODE_TIMED);
  EXPECT_EQ(s.reported_mode(), v1::SYNC_MODE_SYNC);
  EXPECT_TRUE(all_sent_.empty());
}

TEST_F(SyncPolicyTest, AutoSwitchesAfterPersistenceAndBackAfterHealthy) {
  SetPolicy(v1::SYNC_POLICY_AUTO);
  for (int i = 0; i < 5; ++i) Second(4);
  // Slow for 10 s (slow_persist_s) before the switch.
  // The verdict needs half of a rank's 20-step window slow (2 s here).
  int first_slow = -1, switched_at = -1;
  for (int i = 0; i < 20 && switched_at < 0; ++i) {
    Second(4, 3);
    if (first_slow < 0 && State().step_stragglers_size() > 0) first_slow = i;
    if (!sent_.empty()) switched_at = i;
  }
  ASSERT_EQ(first_slow, 1);
  ASSERT_EQ(switched_at, first_slow + 10);
  ASSERT_EQ(all_sent_.size(), 1u);
  const SyncPolicyEngine::Outgoing& o = all_sent_[0];
  EXPECT_EQ(o.job_id, "j");
  EXPECT_THAT(o.hosts, ::testing::ElementsAre("node0", "node1"));
  EXPECT_EQ(o.directive.mode(), v1::SYNC_MODE_TIMED);
  EXPECT_EQ(o.directive.period_ms(), 2000u);
  EXPECT_EQ(o.directive.directive_id(), 1u);
  EXPECT_EQ(o.directive.apply_at_step(), step_[0] + 5);
  EXPECT_THAT(o.directive.reason(), HasSubstr("slow for 10 s"));

  // The trainers switch and stay slow: no flapping, no resend.
  for (int i = 0; i < 40; ++i) Second(4, 3, 2.0, v1::SYNC_MODE_TIMED);
  EXPECT_EQ(all_sent_.size(), 1u);
  EXPECT_EQ(State().switches_applied(), 1u);

  // Healed: 30 s healthy (healthy_s) -> back to sync, once.
  int back_at = -1;
  for (int i = 0; i < 60; ++i) {
    Second(4, -1, 2.0, v1::SYNC_MODE_TIMED);
    if (!sent_.empty() && back_at < 0) back_at = i;
  }
  // The slow rank's old samples leave the 20-step window after 4 s.
  EXPECT_GE(back_at, 30);
  EXPECT_LE(back_at, 36);
  ASSERT_EQ(all_sent_.size(), 2u);
  EXPECT_EQ(all_sent_[1].directive.mode(), v1::SYNC_MODE_SYNC);
  EXPECT_EQ(all_sent_[1].directive.directive_id(), 2u);
  const v1::JobSync s = State();
  ASSERT_EQ(s.decisions_size(), 2);
  EXPECT_TRUE(s.decisions(1).sent());
  EXPECT_THAT(s.decisions(1).reason(), StartsWith("healthy for 30 s"));
}

TEST_F(SyncPolicyTest, TimedPeriodInStepsIsConvertedWithTheFastRanksPace) {
  v1::SyncSettings set;
  set.set_policy(v1::SYNC_POLICY_AUTO);
  set.set_timed_period_steps(12);
  ASSERT_TRUE(engine_.SetSettings("j", set).ok());
  EXPECT_EQ(State().settings().timed_period_steps(), 12u);
  // Rank 0 computes 40 ms per step, rank 1 (the straggler) 120 ms: the
  // period is 12 steps of the fast rank plus half a step of slack (so
  // that the 12th local step fits), 500 ms, not of the median of both
  // (80 ms: 1000 ms) nor of the slow one.
  for (int i = 0; i < 20 && all_sent_.empty(); ++i) Second(2, 1, 3.0);
  ASSERT_EQ(all_sent_.size(), 1u);
  EXPECT_EQ(all_sent_[0].directive.mode(), v1::SYNC_MODE_TIMED);
  EXPECT_EQ(all_sent_[0].directive.period_ms(), 500u);
  const v1::JobSync s = State();
  ASSERT_EQ(s.decisions_size(), 1);
  EXPECT_THAT(s.decisions(0).reason(),
              HasSubstr("A-EDiT period 12 steps (+ half a step of slack) x "
                        "40 ms = 500 ms"));
  EXPECT_EQ(s.decisions(0).evidence().values().at("period_ms"), 500.0);
  EXPECT_THAT(all_sent_[0].directive.reason(), HasSubstr("= 500 ms"));
}

TEST_F(SyncPolicyTest, TimedPeriodInStepsFollowsTheMachinesPace) {
  // The same setting on ranks twice as fast: half the milliseconds
  // (period_ms, set too, is not used). With timed_period_steps 0 the
  // directive carries period_ms (AutoSwitchesAfterPersistence...).
  base_ns_ = 20'000'000;
  v1::SyncSettings set;
  set.set_policy(v1::SYNC_POLICY_AUTO);
  set.set_timed_period_steps(12);
  set.set_period_ms(999);
  ASSERT_TRUE(engine_.SetSettings("j", set).ok());
  for (int i = 0; i < 20 && all_sent_.empty(); ++i) Second(4, 3, 2.0);
  ASSERT_EQ(all_sent_.size(), 1u);
  EXPECT_EQ(all_sent_[0].directive.period_ms(), 250u);  // 12.5 x 20 ms
}

TEST_F(SyncPolicyTest, ShortSlowSpellDoesNotSwitch) {
  SetPolicy(v1::SYNC_POLICY_AUTO);
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < 6; ++i) Second(4, 3);  // 6 s < 10 s
    for (int i = 0; i < 6; ++i) Second(4);     // window clears
  }
  EXPECT_TRUE(all_sent_.empty());
  EXPECT_EQ(State().decisions_size(), 0);
}

TEST_F(SyncPolicyTest, CheckpointPhaseIsNeverAStraggler) {
  SetPolicy(v1::SYNC_POLICY_AUTO);
  for (int i = 0; i < 60; ++i) {
    Second(4, -1, 2.0, v1::SYNC_MODE_SYNC, /*checkpoint=*/true);
  }
  EXPECT_TRUE(all_sent_.empty());
  EXPECT_TRUE(State().step_stragglers().empty());
}

TEST_F(SyncPolicyTest, OpenSlowFaultCountsAndOffDoesNothing) {
  SetPolicy(v1::SYNC_POLICY_AUTO);
  v1::Fault f;
  f.set_fault_id("F7");
  f.set_job_id("j");
  f.set_fault_class(v1::FAULT_CLASS_COMM_SLOW);
  f.set_state(v1::FAULT_STATE_CONFIRMED);
  faults_.push_back(f);
  for (int i = 0; i < 12; ++i) Second(4);
  ASSERT_EQ(all_sent_.size(), 1u);
  EXPECT_THAT(State().decisions(0).evidence().text(), HasSubstr("F7"));

  SyncPolicyEngine other(&clock_, Options());
  v1::SyncSettings off;
  off.set_policy(v1::SYNC_POLICY_OFF);
  ASSERT_TRUE(other.SetSettings("j", off).ok());
  v1::ReportStepsRequest req;
  req.mutable_trainer()->set_job_id("j");
  req.set_current_mode(v1::SYNC_MODE_SYNC);
  ASSERT_TRUE(other.AddReport("n", req).ok());
  for (int i = 0; i < 30; ++i) {
    clock_.Advance(absl::Seconds(1));
    EXPECT_TRUE(other.Evaluate(faults_).empty());
  }
  EXPECT_EQ(other.State("j")->decisions_size(), 0);
}

// slow_signal CONFIRMED_FAULTS (issue #28): the step reports' stragglers
// are the trainers' own signal and never trigger; a NON_COMM_SLOW fault the
// detection engine confirmed (from NCCL telemetry) does, and the decision
// names it.
TEST_F(SyncPolicyTest, ConfirmedFaultsSignalSwitchesOnTheFaultAlone) {
  v1::SyncSettings st;
  st.set_policy(v1::SYNC_POLICY_AUTO);
  st.set_slow_signal(v1::SLOW_SIGNAL_CONFIRMED_FAULTS);
  ASSERT_TRUE(engine_.SetSettings("j", st).ok());
  EXPECT_EQ(State().settings().slow_signal(), v1::SLOW_SIGNAL_CONFIRMED_FAULTS);
  // Rank 3 computes twice as long for 40 s: a step-time straggler, no
  // switch.
  for (int i = 0; i < 40; ++i) Second(4, /*slow=*/3);
  EXPECT_EQ(State().step_stragglers_size(), 1);
  EXPECT_TRUE(all_sent_.empty());
  EXPECT_EQ(State().decisions_size(), 0);
  EXPECT_EQ(State().slow_since_unix_ns(), 0u);
  // A suspected (not yet confirmed) straggler fault does not count either.
  v1::Fault f;
  f.set_fault_id("F9");
  f.set_job_id("j");
  f.set_fault_class(v1::FAULT_CLASS_NON_COMM_SLOW);
  f.set_state(v1::FAULT_STATE_SUSPECTED);
  faults_.push_back(f);
  for (int i = 0; i < 15; ++i) Second(4, 3);
  EXPECT_TRUE(all_sent_.empty());
  // Confirmed: slow from now on, switched after slow_persist_s (10 s).
  faults_[0].set_state(v1::FAULT_STATE_CONFIRMED);
  faults_[0].set_confirmed_unix_ns(1);
  for (int i = 0; i < 9; ++i) Second(4, 3);
  EXPECT_TRUE(all_sent_.empty());
  for (int i = 0; i < 3 && all_sent_.empty(); ++i) Second(4, 3);
  ASSERT_EQ(all_sent_.size(), 1u);
  EXPECT_EQ(all_sent_[0].directive.mode(), v1::SYNC_MODE_TIMED);
  const v1::SyncDecision d = State().decisions(0);
  ASSERT_EQ(d.fault_ids_size(), 1);
  EXPECT_EQ(d.fault_ids(0), "F9");
  EXPECT_THAT(d.evidence().text(),
              HasSubstr("confirmed slow faults (NCCL telemetry) F9"));
  EXPECT_THAT(all_sent_[0].directive.reason(), HasSubstr("F9"));
  // Switched, the fault resolves (the slow rank no longer holds the others
  // in a collective) but rank 3 is as slow as before: the job stays local.
  faults_.clear();
  for (int i = 0; i < 60; ++i) Second(4, 3, 2.0, v1::SYNC_MODE_TIMED);
  EXPECT_EQ(all_sent_.size(), 1u);
  EXPECT_EQ(State().healthy_since_unix_ns(), 0u);
  // Healthy for healthy_s (30 s): back to sync.
  for (int i = 0; i < 40 && all_sent_.size() == 1; ++i) {
    Second(4, -1, 2.0, v1::SYNC_MODE_TIMED);
  }
  ASSERT_EQ(all_sent_.size(), 2u);
  EXPECT_EQ(all_sent_[1].directive.mode(), v1::SYNC_MODE_SYNC);
}

TEST_F(SyncPolicyTest, StepsOrFaultsSignalNamesTheOpenFaultsToo) {
  SetPolicy(v1::SYNC_POLICY_AUTO);
  EXPECT_EQ(State().settings().slow_signal(), v1::SLOW_SIGNAL_STEPS_OR_FAULTS);
  v1::Fault f;
  f.set_fault_id("F3");
  f.set_job_id("j");
  f.set_fault_class(v1::FAULT_CLASS_NON_COMM_SLOW);
  f.set_state(v1::FAULT_STATE_SUSPECTED);
  faults_.push_back(f);
  for (int i = 0; i < 12 && all_sent_.empty(); ++i) Second(4);
  ASSERT_EQ(all_sent_.size(), 1u);
  ASSERT_EQ(State().decisions(0).fault_ids_size(), 1);
  EXPECT_THAT(State().decisions(0).evidence().text(),
              HasSubstr("open slow faults F3"));
}

TEST_F(SyncPolicyTest, AutoResendsWhenTrainersDidNotApply) {
  SetPolicy(v1::SYNC_POLICY_AUTO);
  for (int i = 0; i < 20 && all_sent_.empty(); ++i) Second(4, 3);
  ASSERT_EQ(all_sent_.size(), 1u);
  for (int i = 0; i < 59; ++i) Second(4, 3);
  ASSERT_EQ(all_sent_.size(), 1u);
  // The trainers keep reporting SYNC (e.g. abandoned: a rank never got it).
  Second(4, 3);
  ASSERT_EQ(all_sent_.size(), 2u);
  EXPECT_EQ(all_sent_[1].directive.directive_id(), 2u);
  EXPECT_EQ(all_sent_[1].directive.mode(), v1::SYNC_MODE_TIMED);
  EXPECT_THAT(State().decisions(1).reason(), HasSubstr("sending it again"));
}

TEST_F(SyncPolicyTest, ValidationNamesTheField) {
  v1::SyncSettings s;
  s.set_local_mode(v1::SYNC_MODE_SYNC);
  EXPECT_THAT(std::string(engine_.SetSettings("j", s).status().message()),
              StartsWith("settings.local_mode"));
  s.Clear();
  s.set_healthy_s(8 * 24 * 3600);
  EXPECT_THAT(std::string(engine_.SetSettings("j", s).status().message()),
              StartsWith("settings.healthy_s"));
  s.Clear();
  s.set_timed_period_steps(2'000'000);
  EXPECT_THAT(std::string(engine_.SetSettings("j", s).status().message()),
              StartsWith("settings.timed_period_steps"));
  s.Clear();
  s.set_policy(static_cast<v1::SyncPolicy>(42));
  EXPECT_THAT(std::string(engine_.SetSettings("j", s).status().message()),
              StartsWith("settings.policy"));
  s.Clear();
  s.set_slow_signal(static_cast<v1::SlowSignal>(9));
  EXPECT_THAT(std::string(engine_.SetSettings("j", s).status().message()),
              StartsWith("settings.slow_signal"));
  EXPECT_THAT(
      std::string(
          engine_.SetSettings("", v1::SyncSettings()).status().message()),
      StartsWith("job_id"));
  v1::ReportStepsRequest r;
  EXPECT_THAT(std::string(engine_.AddReport("n", r).message()),
              StartsWith("trainer.job_id"));
  r.mutable_trainer()->set_job_id("j");
  r.mutable_trainer()->set_global_rank(-3);
  EXPECT_THAT(std::string(engine_.AddReport("n", r).message()),
              StartsWith("trainer.global_rank"));
  EXPECT_TRUE(absl::IsNotFound(engine_.State("nope").status()));
}

TEST(SyncPolicyLimitsTest, JobsAndRanksAreBounded) {
  FakeClock clock;
  SyncPolicyEngine::Options o;
  o.max_jobs = 2;
  o.max_ranks_per_job = 3;
  SyncPolicyEngine engine(&clock, o);
  v1::ReportStepsRequest r;
  r.mutable_trainer()->set_job_id("a");
  for (int i = 0; i < 3; ++i) {
    r.mutable_trainer()->set_global_rank(i);
    ASSERT_TRUE(engine.AddReport("n", r).ok());
  }
  r.mutable_trainer()->set_global_rank(3);
  EXPECT_TRUE(absl::IsResourceExhausted(engine.AddReport("n", r)));
  r.mutable_trainer()->set_global_rank(1);
  EXPECT_TRUE(engine.AddReport("n", r).ok());  // known rank: fine
  r.mutable_trainer()->set_job_id("b");
  ASSERT_TRUE(engine.AddReport("n", r).ok());
  r.mutable_trainer()->set_job_id("c");
  EXPECT_TRUE(absl::IsResourceExhausted(engine.AddReport("n", r)));
  EXPECT_TRUE(absl::IsResourceExhausted(
      engine.SetSettings("c", v1::SyncSettings()).status()));
  // Once a job is idle past the expiry (an hour by default), a new job takes
  // its place: "b" reports again, so "a" (idle longest) is forgotten.
  clock.Advance(absl::Minutes(59));
  r.mutable_trainer()->set_job_id("b");
  ASSERT_TRUE(engine.AddReport("n", r).ok());
  r.mutable_trainer()->set_job_id("c");
  EXPECT_TRUE(absl::IsResourceExhausted(engine.AddReport("n", r)));
  clock.Advance(absl::Minutes(2));
  ASSERT_TRUE(engine.AddReport("n", r).ok());
  EXPECT_TRUE(absl::IsNotFound(engine.State("a").status()));
  EXPECT_TRUE(engine.State("b").ok());
  EXPECT_TRUE(engine.State("c").ok());
}

// Attacker round 18, R18-8: one host reported a step for each of 4,200
// made-up jobs; the cluster-wide table (max_jobs 4096, an hour's idle
// expiry) was full and every other host's new job was refused for an
// hour. A host creates at most its share of the jobs.
TEST(SyncPolicyLimitsTest, OneHostsMadeUpJobsDoNotFillTheTable) {
  FakeClock clock;
  SyncPolicyEngine engine(&clock, SyncPolicyEngine::Options{});
  v1::ReportStepsRequest r;
  r.mutable_trainer()->set_global_rank(0);
  int refused = 0;
  for (int i = 0; i < 4200; ++i) {
    r.mutable_trainer()->set_job_id(absl::StrCat("flood-", i));
    refused += absl::IsResourceExhausted(engine.AddReport("evil", r));
  }
  EXPECT_GE(refused, 4200 - 4096);
  r.mutable_trainer()->set_job_id("newjob");
  absl::Status s = engine.AddReport("b", r);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(engine.State("newjob").ok());
  // The host's own jobs still report.
  r.mutable_trainer()->set_job_id("flood-0");
  EXPECT_TRUE(engine.AddReport("evil", r).ok());
}

class SinkRecorder : public CommandSink {
 public:
  void Send(const v1::ConnectResponse& r) override { got.push_back(r); }
  std::vector<v1::ConnectResponse> got;
};

TEST(ControllerSyncTest, CoreSendsDirectivesToTheJobsAgentsAndListsTheJob) {
  FakeClock clock;
  prometheus::Registry registry;
  PolicyActionMetrics actions(&registry);
  Controller::Options o;
  o.clock = &clock;
  o.policy_actions = &actions;
  o.sync.defaults = DefaultSyncSettings();
  o.sync.defaults.set_slow_persist_s(3);
  auto core = Controller::Create(o);
  ASSERT_TRUE(core.ok()) << core.status();
  SinkRecorder sink;
  v1::NodeRegistration reg;
  reg.set_host("gloo-node");
  auto session = (*core)->AgentConnected(reg, &sink);
  ASSERT_TRUE(session.ok());
  v1::SyncSettings auto_policy;
  auto_policy.set_policy(v1::SYNC_POLICY_AUTO);
  auto_policy.set_local_mode(v1::SYNC_MODE_LOCAL_SGD);
  auto set = (*core)->trainers().SetSyncPolicy("cpu-job", auto_policy);
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(set->slow_persist_s(), 3u);
  EXPECT_TRUE(absl::IsInvalidArgument(
      (*core)->trainers().SetSyncPolicy("", auto_policy).status()));
  uint64_t step = 0;
  for (int sec = 0; sec < 8; ++sec) {
    const v1::ConnectRequest batch = testing::SlowRankOneBatch("cpu-job", step);
    step += 5;
    ASSERT_TRUE((*core)->AgentBatch(*session, batch).ok());
    clock.Advance(absl::Seconds(1));
    (*core)->RunCycle();
  }
  ASSERT_EQ(sink.got.size(), 1u);
  ASSERT_EQ(sink.got[0].commands_size(), 1);
  const v1::TrainerDirective& d = sink.got[0].commands(0).trainer_directive();
  EXPECT_EQ(d.job_id(), "cpu-job");
  EXPECT_EQ(d.mode(), v1::SYNC_MODE_LOCAL_SGD);
  EXPECT_EQ(d.period_steps(), 8u);
  // The switch sent is a policy action (docs/controller.md, "Metrics").
  const auto switches = [&registry](const char* to) {
    return testing::MetricValue(registry,
                                "pitstop_controller_policy_actions_total",
                                {{"policy", "sync"}, {"action", to}});
  };
  EXPECT_EQ(switches("local_sgd"), 1);
  EXPECT_EQ(switches("sync"), 0);

  auto job = (*core)->Job("cpu-job");  // known only from trainer reports
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->n_ranks(), 2u);
  EXPECT_THAT(job->hosts(), ::testing::ElementsAre("gloo-node"));
  EXPECT_EQ(job->sync().step_stragglers_size(), 1);
  EXPECT_EQ(job->sync().step_stragglers(0), 1);
  ASSERT_EQ(job->sync().decisions_size(), 1);
  EXPECT_TRUE(job->sync().decisions(0).sent());
  auto s = (*core)->trainers().JobSync("cpu-job");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->target_mode(), v1::SYNC_MODE_LOCAL_SGD);
  EXPECT_TRUE(absl::IsNotFound((*core)->trainers().JobSync("none").status()));
}

// Multi-LoRA pipeline reports (StepReport.lora) belong to the LoRA policy
// (src/controller/trainers/lora/): a slow stage there is not a data-parallel
// straggler and must never switch the job to local SGD.
TEST_F(SyncPolicyTest, MultiLoraReportsAreLeftToTheLoraPolicy) {
  SetPolicy(v1::SYNC_POLICY_AUTO);
  for (int round = 0; round < 30; ++round) {
    for (int r = 0; r < 4; ++r) {
      v1::ReportStepsRequest req;
      req.mutable_trainer()->set_job_id("lora-j");
      req.mutable_trainer()->set_global_rank(r);
      req.mutable_trainer()->set_world_size(4);
      v1::StepReport* s = req.add_steps();
      s->set_step(round + 1);
      s->set_wall_ns(r == 3 ? 80'000'000 : 40'000'000);
      s->mutable_lora()->set_layer_end(1);
      ASSERT_TRUE(engine_.AddReport("node0", req).ok());
    }
    clock_.Advance(absl::Seconds(1));
    EXPECT_TRUE(engine_.Evaluate({}).empty());
  }
  EXPECT_EQ(engine_.State("lora-j").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace pitstop::controller
