// LoraPolicyEngine with a FakeClock: reports of a 4-stage multi-LoRA job
// (16 layers of equal cost, 8 micro-batches), one rank slowed to half
// speed; OFF / ADVISE / AUTO, the cost of moving, faults as evidence.
#include "src/controller/trainers/lora/lora_policy.h"

#include "gtest/gtest.h"

namespace pitstop::controller {
namespace {

constexpr int kLayers = 16;
constexpr uint32_t kMb = 8;

struct Stage {
  int32_t rank;
  uint32_t begin, end;
};
const std::vector<Stage> kEven = {
    {0, 0, 4}, {1, 4, 8}, {2, 8, 12}, {3, 12, 16}};
// The best placement with rank 3 at half speed (placement_cases.json,
// one_rank_half_speed): 5, 5, 5 and 1 layers.
const std::vector<Stage> kBalanced = {
    {0, 0, 5}, {1, 5, 10}, {2, 10, 15}, {3, 15, 16}};

class LoraPolicyTest : public ::testing::Test {
 protected:
  LoraPolicyTest() : engine_(&clock_, LoraPolicyEngine::Options{}) {}

  // Every rank reports `steps` steps in `placement`; rank `slow` computes
  // at `slow_speed` (units per second; the others at 1e6).
  void Steps(const std::vector<Stage>& placement, int steps, int32_t slow = -1,
             double slow_speed = 1e6) {
    for (int i = 0; i < steps; ++i) {
      ++step_;
      for (size_t pos = 0; pos < placement.size(); ++pos) {
        const Stage& s = placement[pos];
        v1::ReportStepsRequest r;
        r.mutable_trainer()->set_job_id("lora-job");
        r.mutable_trainer()->set_global_rank(s.rank);
        r.mutable_trainer()->set_world_size(4);
        v1::StepReport* sr = r.add_steps();
        sr->set_step(step_);
        sr->set_wall_ns(100'000'000);
        v1::LoraStageTime* l = sr->mutable_lora();
        l->set_stage(pos);
        l->set_layer_begin(s.begin);
        l->set_layer_end(s.end);
        l->set_micro_batches(kMb);
        for (int k = 0; k < kLayers; ++k) l->add_layer_costs(1.0);
        const double speed = s.rank == slow ? slow_speed : 1e6;
        l->set_compute_ns(
            static_cast<uint64_t>((s.end - s.begin) * kMb / speed * 1e9));
        if (pos + 1 == placement.size()) l->set_samples(kMb * 4);
        if (adapters_ > 0) {
          l->set_adapters(adapters_);
          for (uint32_t a = 0; a < adapters_; ++a) l->add_adapter_ids(a);
          l->set_max_layers(max_layers_);
        }
        ASSERT_TRUE(engine_.AddReport("host" + std::to_string(s.rank), r).ok());
      }
      if (excluded_ >= 0) Excluded(excluded_, probe_);
    }
  }

  // Rank `rank`, excluded, reports step_ with a probe of `probe` units/s
  // (0: none).
  void Excluded(int32_t rank, double probe) {
    v1::ReportStepsRequest r;
    r.mutable_trainer()->set_job_id("lora-job");
    r.mutable_trainer()->set_global_rank(rank);
    r.mutable_trainer()->set_world_size(4);
    v1::StepReport* sr = r.add_steps();
    sr->set_step(step_);
    sr->set_wall_ns(100'000'000);
    v1::LoraStageTime* l = sr->mutable_lora();
    l->set_excluded(true);
    for (int k = 0; k < kLayers; ++k) l->add_layer_costs(1.0);
    l->set_probe_units_per_s(probe);
    ASSERT_TRUE(engine_.AddReport("host" + std::to_string(rank), r).ok());
  }

  std::vector<LoraPolicyEngine::Outgoing> Cycle() {
    return engine_.Evaluate({});
  }

  v1::JobLora State() {
    absl::StatusOr<v1::JobLora> s = engine_.State("lora-job");
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : v1::JobLora();
  }

  void SetPolicy(v1::LoraPolicy p, double move_s_per_layer = 0) {
    v1::LoraSettings s;
    s.set_policy(p);
    s.set_move_s_per_layer(move_s_per_layer);
    ASSERT_TRUE(engine_.SetSettings("lora-job", s).ok());
  }

  FakeClock clock_;
  LoraPolicyEngine engine_;
  uint64_t step_ = 0;
  uint32_t adapters_ = 0;    // > 0: reports name the adapters
  uint32_t max_layers_ = 0;  // reported with adapters_
  int32_t excluded_ = -1;    // >= 0: this rank reports as excluded
  double probe_ = 0;         // its probe, units/s
};

void ExpectStages(const v1::LoraPlacement& p, const std::vector<Stage>& want) {
  ASSERT_EQ(p.pipelines_size(), 1);
  ASSERT_EQ(p.pipelines(0).stages_size(), static_cast<int>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    const v1::LoraStage& s = p.pipelines(0).stages(i);
    EXPECT_EQ(s.rank(), want[i].rank) << i;
    EXPECT_EQ(s.layer_begin(), want[i].begin) << i;
    EXPECT_EQ(s.layer_end(), want[i].end) << i;
  }
}

TEST_F(LoraPolicyTest, HealthyJobGetsNoProposal) {
  Steps(kEven, 10);
  EXPECT_TRUE(Cycle().empty());
  clock_.Advance(absl::Seconds(30));
  Steps(kEven, 5);
  EXPECT_TRUE(Cycle().empty());
  const v1::JobLora s = State();
  EXPECT_EQ(s.settings().policy(), v1::LORA_POLICY_ADVISE);
  EXPECT_EQ(s.slow_ranks_size(), 0);
  EXPECT_FALSE(s.has_proposed());
  EXPECT_EQ(s.decisions_size(), 0);
  ExpectStages(s.current(), kEven);
  EXPECT_NEAR(s.measured_samples_per_s(), 320.0, 1e-6);  // 32 per 0.1 s
}

TEST_F(LoraPolicyTest, AdviseRecordsTheMoveAfterPersistingButSendsNothing) {
  Steps(kEven, 10, 3, 0.5e6);
  EXPECT_TRUE(Cycle().empty());
  v1::JobLora s = State();
  ASSERT_EQ(s.slow_ranks_size(), 1);
  EXPECT_EQ(s.slow_ranks(0), 3);
  ExpectStages(s.proposed(), kBalanced);
  // Even split at half speed: step = (4+4+4+8) + 7 * 8 = 76 us; balanced:
  // (5+5+5+2) + 7 * 5 = 52 us; 8 micro-batches of 4 samples.
  EXPECT_NEAR(s.current_samples_per_s(), 32 / 76e-6, 1e-3);
  EXPECT_NEAR(s.proposed_samples_per_s(), 32 / 52e-6, 1e-3);
  EXPECT_EQ(s.decisions_size(), 0);  // not persisted yet (5 s)
  clock_.Advance(absl::Seconds(6));
  Steps(kEven, 3, 3, 0.5e6);
  EXPECT_TRUE(Cycle().empty());
  s = State();
  ASSERT_EQ(s.decisions_size(), 1);
  const v1::LoraDecision& d = s.decisions(0);
  EXPECT_FALSE(d.sent());
  EXPECT_EQ(d.policy(), v1::LORA_POLICY_ADVISE);
  EXPECT_NE(d.evidence().text().find("rank 3 at 0.5"), std::string::npos)
      << d.evidence().text();
  // Layers 4, 8, 9, 12, 13 and 14 change owner.
  EXPECT_EQ(d.evidence().values().at("moved_layers"), 6);
  // Recorded once, not every cycle.
  Cycle();
  EXPECT_EQ(State().decisions_size(), 1);
}

TEST_F(LoraPolicyTest, AutoSendsThePlacementOnceAndSeesItApplied) {
  SetPolicy(v1::LORA_POLICY_AUTO);
  Steps(kEven, 10, 3, 0.5e6);
  EXPECT_TRUE(Cycle().empty());
  clock_.Advance(absl::Seconds(6));
  Steps(kEven, 2, 3, 0.5e6);
  std::vector<LoraPolicyEngine::Outgoing> out = Cycle();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].job_id, "lora-job");
  EXPECT_EQ(out[0].hosts.size(), 4u);
  const v1::TrainerDirective& d = out[0].directive;
  EXPECT_EQ(d.directive_id(), 1u);  // the job's first
  EXPECT_EQ(d.apply_at_step(), step_ + 3);
  EXPECT_EQ(d.mode(), v1::SYNC_MODE_UNSPECIFIED);
  ExpectStages(d.placement(), kBalanced);
  EXPECT_TRUE(Cycle().empty());  // pending: not sent again
  // The trainers move; the balanced pipeline is not moved again.
  Steps(kBalanced, 10, 3, 0.5e6);
  clock_.Advance(absl::Seconds(10));
  Steps(kBalanced, 5, 3, 0.5e6);
  EXPECT_TRUE(Cycle().empty());
  const v1::JobLora s = State();
  EXPECT_EQ(s.moves_applied(), 1u);
  ExpectStages(s.current(), kBalanced);
  EXPECT_FALSE(s.has_proposed());
  ASSERT_EQ(s.decisions_size(), 1);
  EXPECT_TRUE(s.decisions(0).sent());
}

// The default is ADVISE: an operator reads the advice, then switches the
// job to AUTO. The advised placement goes out at the next cycle, not only
// after the resend interval (60 s of a slowed job).
TEST_F(LoraPolicyTest, SwitchingFromAdviseToAutoSendsTheAdviceAtOnce) {
  Steps(kEven, 10, 3, 0.5e6);
  Cycle();
  clock_.Advance(absl::Seconds(6));
  Steps(kEven, 2, 3, 0.5e6);
  EXPECT_TRUE(Cycle().empty());
  ASSERT_EQ(State().decisions_size(), 1);  // advised
  SetPolicy(v1::LORA_POLICY_AUTO);
  clock_.Advance(absl::Seconds(1));
  Steps(kEven, 2, 3, 0.5e6);
  std::vector<LoraPolicyEngine::Outgoing> out = Cycle();
  ASSERT_EQ(out.size(), 1u);
  ExpectStages(out[0].directive.placement(), kBalanced);
  EXPECT_TRUE(Cycle().empty());  // sent: pending until applied or due
}

TEST_F(LoraPolicyTest, AutoResendsADirectiveNotApplied) {
  SetPolicy(v1::LORA_POLICY_AUTO);
  Steps(kEven, 10, 3, 0.5e6);
  Cycle();
  clock_.Advance(absl::Seconds(6));
  Steps(kEven, 2, 3, 0.5e6);
  std::vector<LoraPolicyEngine::Outgoing> first = Cycle();
  ASSERT_EQ(first.size(), 1u);
  clock_.Advance(absl::Seconds(61));
  Steps(kEven, 5, 3, 0.5e6);
  std::vector<LoraPolicyEngine::Outgoing> again = Cycle();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_GT(again[0].directive.directive_id(),
            first[0].directive.directive_id());
}

TEST_F(LoraPolicyTest, OffComputesNothing) {
  SetPolicy(v1::LORA_POLICY_OFF);
  Steps(kEven, 10, 3, 0.5e6);
  clock_.Advance(absl::Seconds(10));
  Steps(kEven, 3, 3, 0.5e6);
  EXPECT_TRUE(Cycle().empty());
  const v1::JobLora s = State();
  EXPECT_EQ(s.settings().policy(), v1::LORA_POLICY_OFF);
  EXPECT_FALSE(s.has_proposed());
  EXPECT_EQ(s.decisions_size(), 0);
}

TEST_F(LoraPolicyTest, MoveCostingMoreThanTheGainIsNotMade) {
  // 1000 s per layer: 6 layers cost 6000 s of pipeline, the gain over the
  // 120 s horizon is far less.
  SetPolicy(v1::LORA_POLICY_AUTO, 1000);
  Steps(kEven, 10, 3, 0.5e6);
  clock_.Advance(absl::Seconds(10));
  Steps(kEven, 3, 3, 0.5e6);
  EXPECT_TRUE(Cycle().empty());
  const v1::JobLora s = State();
  EXPECT_EQ(s.slow_ranks_size(), 1);
  EXPECT_FALSE(s.has_proposed());
  EXPECT_EQ(s.decisions_size(), 0);
}

TEST_F(LoraPolicyTest, NonCommSlowFaultIsEvidence) {
  Steps(kEven, 10);
  v1::Fault f;
  f.set_fault_id("f-1");
  f.set_job_id("lora-job");
  f.set_fault_class(v1::FAULT_CLASS_NON_COMM_SLOW);
  f.add_suspects()->set_global_rank(2);
  EXPECT_TRUE(engine_.Evaluate({f}).empty());
  const v1::JobLora s = State();
  ASSERT_EQ(s.slow_faults_size(), 1);
  EXPECT_EQ(s.slow_faults(0), "f-1");
  ASSERT_EQ(s.slow_ranks_size(), 1);
  EXPECT_EQ(s.slow_ranks(0), 2);
  EXPECT_FALSE(s.has_proposed());  // measured speeds are even: no gain
}

// slow_signal CONFIRMED_FAULTS (issue #28): the measured half speed alone
// moves nothing; a confirmed NON_COMM_SLOW fault naming the rank (from
// NCCL telemetry) does, its placement from the measured speeds, and the
// decision names the fault.
TEST_F(LoraPolicyTest, ConfirmedFaultsSignalMovesOnTheFaultAlone) {
  v1::LoraSettings st;
  st.set_policy(v1::LORA_POLICY_AUTO);
  st.set_slow_signal(v1::SLOW_SIGNAL_CONFIRMED_FAULTS);
  ASSERT_TRUE(engine_.SetSettings("lora-job", st).ok());
  for (int i = 0; i < 4; ++i) {
    Steps(kEven, 3, 3, 0.5e6);
    EXPECT_TRUE(Cycle().empty());
    clock_.Advance(absl::Seconds(3));
  }
  EXPECT_EQ(State().slow_ranks_size(), 0);
  EXPECT_FALSE(State().has_proposed());
  v1::Fault f;
  f.set_fault_id("F4");
  f.set_job_id("lora-job");
  f.set_fault_class(v1::FAULT_CLASS_NON_COMM_SLOW);
  f.set_state(v1::FAULT_STATE_SUSPECTED);
  f.add_suspects()->set_global_rank(3);
  Steps(kEven, 3, 3, 0.5e6);
  EXPECT_TRUE(engine_.Evaluate({f}).empty());
  EXPECT_EQ(State().slow_ranks_size(), 0);  // not confirmed yet
  f.set_state(v1::FAULT_STATE_CONFIRMED);
  f.set_confirmed_unix_ns(1);
  Steps(kEven, 3, 3, 0.5e6);
  EXPECT_TRUE(engine_.Evaluate({f}).empty());
  ASSERT_EQ(State().slow_ranks_size(), 1);
  EXPECT_EQ(State().slow_ranks(0), 3);
  ExpectStages(State().proposed(), kBalanced);
  clock_.Advance(absl::Seconds(6));
  Steps(kEven, 2, 3, 0.5e6);
  std::vector<LoraPolicyEngine::Outgoing> out = engine_.Evaluate({f});
  ASSERT_EQ(out.size(), 1u);
  ExpectStages(out[0].directive.placement(), kBalanced);
  const v1::LoraDecision d = State().decisions(0);
  ASSERT_EQ(d.fault_ids_size(), 1);
  EXPECT_EQ(d.fault_ids(0), "F4");
  EXPECT_NE(d.evidence().text().find("faults F4"), std::string::npos)
      << d.evidence().text();
}

TEST_F(LoraPolicyTest, BadSettingsAndUnknownJobs) {
  v1::LoraSettings s;
  s.set_min_gain(-1);
  EXPECT_EQ(engine_.SetSettings("j", s).status().code(),
            absl::StatusCode::kInvalidArgument);
  s.set_min_gain(0);
  s.set_slow_min_effect(1.5);
  EXPECT_NE(engine_.SetSettings("j", s).status().message().find(
                "settings.slow_min_effect"),
            std::string::npos);
  s.set_slow_min_effect(0);
  s.set_slow_signal(static_cast<v1::SlowSignal>(7));
  EXPECT_NE(engine_.SetSettings("j", s).status().message().find(
                "settings.slow_signal"),
            std::string::npos);
  EXPECT_EQ(engine_.SetSettings("", v1::LoraSettings()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_.State("nope").status().code(), absl::StatusCode::kNotFound);
  v1::ReportStepsRequest r;
  r.mutable_trainer()->set_job_id("j");
  r.mutable_trainer()->set_global_rank(0);
  v1::LoraStageTime* l = r.add_steps()->mutable_lora();
  l->set_layer_begin(3);
  l->set_layer_end(9);
  l->add_layer_costs(1);
  EXPECT_EQ(engine_.AddReport("h", r).code(),
            absl::StatusCode::kInvalidArgument);
}

// One stage's report of one step for `job` (a one-rank, one-layer job).
absl::Status ReportOneStep(LoraPolicyEngine& engine, const std::string& job) {
  v1::ReportStepsRequest r;
  r.mutable_trainer()->set_job_id(job);
  r.mutable_trainer()->set_global_rank(0);
  r.mutable_trainer()->set_world_size(1);
  v1::StepReport* sr = r.add_steps();
  sr->set_step(1);
  sr->set_wall_ns(1'000'000);
  v1::LoraStageTime* l = sr->mutable_lora();
  l->set_layer_begin(0);
  l->set_layer_end(1);
  l->set_micro_batches(1);
  l->add_layer_costs(1.0);
  l->set_compute_ns(1'000'000);
  return engine.AddReport("host0", r);
}

// A controller that runs for months sees many short jobs: with the table
// full, a new job replaces one idle past the expiry, never an active one.
TEST(LoraPolicyLimitsTest, FullTableForgetsTheJobIdleLongest) {
  FakeClock clock;
  LoraPolicyEngine::Options o;
  o.max_jobs = 3;
  o.job_idle_expiry = absl::Minutes(10);
  LoraPolicyEngine engine(&clock, o);
  for (const char* job : {"a", "b", "c"}) {  // reported at 0, 1 and 2 min
    ASSERT_TRUE(ReportOneStep(engine, job).ok());
    clock.Advance(absl::Minutes(1));
  }
  // All three active within the expiry: a fourth is refused, saying why,
  // by reports and by settings alike.
  absl::Status full = ReportOneStep(engine, "d");
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("more than 3"), std::string::npos) << full;
  EXPECT_EQ(engine.SetSettings("d", v1::LoraSettings()).status().code(),
            absl::StatusCode::kResourceExhausted);
  // At 11 min "a" is idle past the expiry; "b" reports again. "d" takes
  // the place of "a", the others stay.
  clock.Advance(absl::Minutes(8));
  ASSERT_TRUE(ReportOneStep(engine, "b").ok());
  ASSERT_TRUE(ReportOneStep(engine, "d").ok());
  EXPECT_EQ(engine.State("a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(engine.State("b").ok());
  EXPECT_TRUE(engine.State("c").ok());
  EXPECT_TRUE(engine.State("d").ok());
  // "c" (idle 9 min) is still within the expiry; at 12 min it is not.
  EXPECT_FALSE(ReportOneStep(engine, "e").ok());
  clock.Advance(absl::Minutes(1));
  ASSERT_TRUE(ReportOneStep(engine, "e").ok());
  EXPECT_EQ(engine.State("c").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(engine.State("b").ok());
  EXPECT_TRUE(engine.State("e").ok());
}

// An excluded rank is probed (one block timed every few steps); while its
// probes are slow it stays out, once they show it recovered the policy
// brings it back (the gain beats the cost of moving).
TEST_F(LoraPolicyTest, ExcludedRankComesBackWhenItsProbesRecover) {
  SetPolicy(v1::LORA_POLICY_AUTO);
  const std::vector<Stage> without3 = {{0, 0, 6}, {1, 6, 11}, {2, 11, 16}};
  excluded_ = 3;
  probe_ = 0.1e6;  // still slow
  Steps(without3, 10);
  clock_.Advance(absl::Seconds(10));
  Steps(without3, 5);
  EXPECT_TRUE(Cycle().empty());
  v1::JobLora s = State();
  ASSERT_EQ(s.current().excluded_ranks_size(), 1);
  EXPECT_FALSE(s.has_proposed());
  EXPECT_EQ(s.slow_ranks_size(), 1);  // the probes say so
  // Recovered: its probes run at the others' speed (the old ones age out
  // of the window after sample_max_age).
  probe_ = 1e6;
  clock_.Advance(absl::Seconds(31));
  Steps(without3, 3);
  EXPECT_TRUE(Cycle().empty());  // not persisted yet
  s = State();
  ASSERT_TRUE(s.has_proposed());
  EXPECT_EQ(s.proposed().excluded_ranks_size(), 0);
  ExpectStages(s.proposed(), kEven);
  clock_.Advance(absl::Seconds(6));
  Steps(without3, 2);
  std::vector<LoraPolicyEngine::Outgoing> out = Cycle();
  ASSERT_EQ(out.size(), 1u);
  ExpectStages(out[0].directive.placement(), kEven);
  EXPECT_EQ(out[0].directive.placement().excluded_ranks_size(), 0);
  EXPECT_NE(out[0].directive.reason().find("back: rank 3 probes at 1.00x"),
            std::string::npos)
      << out[0].directive.reason();
  // The trainers move: rank 3 holds a stage again, nothing more is sent.
  const uint64_t moves = State().moves_applied();
  excluded_ = -1;
  Steps(kEven, 10);
  clock_.Advance(absl::Seconds(10));
  Steps(kEven, 5);
  EXPECT_TRUE(Cycle().empty());
  EXPECT_EQ(State().moves_applied(), moves + 1);
  EXPECT_TRUE(State().current().excluded_ranks().empty());
}

// With max_pipelines 2 and ranks that hold 10 of the 16 layers, the best
// placement for rank 3 at 0.7x is two pipelines of two stages (adapters
// split); the directive carries both, the same as ComputePlacement.
TEST_F(LoraPolicyTest, SeveralPipelinesWhenTheSettingsAllow) {
  v1::LoraSettings set;
  set.set_policy(v1::LORA_POLICY_AUTO);
  set.set_max_pipelines(2);
  ASSERT_TRUE(engine_.SetSettings("lora-job", set).ok());
  adapters_ = 4;  // 8 micro-batches: 2 per adapter
  max_layers_ = 10;
  Steps(kEven, 10, 3, 0.7e6);
  EXPECT_TRUE(Cycle().empty());  // better from now; persists 5 s
  clock_.Advance(absl::Seconds(6));
  Steps(kEven, 3, 3, 0.7e6);
  std::vector<LoraPolicyEngine::Outgoing> out = Cycle();
  ASSERT_EQ(out.size(), 1u);
  const v1::LoraPlacement& p = out[0].directive.placement();
  ASSERT_EQ(p.pipelines_size(), 2);
  lora::PlacementInput in;
  in.speeds = {{0, 1e6}, {1, 1e6}, {2, 1e6}, {3, 0.7e6}};
  in.layer_costs.assign(kLayers, 1.0);
  in.micro_batches = kMb;
  in.samples_per_micro_batch = 4;
  in.adapters = {0, 1, 2, 3};
  in.max_pipelines = 2;
  in.max_layers_per_rank = 10;
  absl::StatusOr<lora::Placement> want = lora::ComputePlacement(in);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_EQ(want->pipelines.size(), 2u);
  for (int q = 0; q < 2; ++q) {
    const lora::Pipeline& w = want->pipelines[q];
    ASSERT_EQ(p.pipelines(q).stages_size(), static_cast<int>(w.stages.size()));
    for (size_t i = 0; i < w.stages.size(); ++i) {
      EXPECT_EQ(p.pipelines(q).stages(i).rank(), w.stages[i].rank);
      EXPECT_EQ(p.pipelines(q).stages(i).layer_end(), w.stages[i].layer_end);
    }
    EXPECT_EQ(std::vector<uint32_t>(p.pipelines(q).adapters().begin(),
                                    p.pipelines(q).adapters().end()),
              w.adapters);
  }
  // Speeds come from whole-nanosecond compute times: equal to 1e-5.
  EXPECT_NEAR(p.estimated_samples_per_s(), want->estimate.samples_per_s,
              1e-5 * want->estimate.samples_per_s);
  // Without the setting the same reports give one pipeline.
  EXPECT_EQ(engine_.Settings("other").max_pipelines(), 1u);
}

}  // namespace
}  // namespace pitstop::controller
