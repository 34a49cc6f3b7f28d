// Non-comm-slow (straggler) detection on deterministic inputs, plus the
// deceptive-normal cases that must not raise anything.
#include <algorithm>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/controller/detect/robust_stats.h"
#include "tests/controller/engine_test_base.h"

namespace pitstop::controller::testing {
namespace {

constexpr uint64_t kBase = 1'000'000;  // 1 ms collective

class StragglerTest : public EngineTest {
 protected:
  StragglerTest() : job_(0xA1, 8, 2) {}
  void SetUp() override {
    EngineTest::SetUp();
    job_.Register(engine_.get());
    // Warm-up: 3 windows of normal, jittery collectives.
    RunWindows(job_, 3, 10,
               [&](uint64_t seq) { return JitteredDurations(8, kBase, seq); });
  }
  // Rank `slow` arrives 400 us late: it runs only the communication, the
  // others wait for it.
  std::vector<uint64_t> WithStraggler(uint64_t seq, int32_t slow) {
    std::vector<uint64_t> d = JitteredDurations(8, kBase + 400'000, seq);
    d[slow] = kBase;
    return d;
  }
  SimJob job_;
};

TEST_F(StragglerTest, FlagsTheLateRankAndNotItsVictims) {
  RunWindows(job_, 2, 10, [&](uint64_t s) { return WithStraggler(s, 5); });
  EXPECT_TRUE(faults_.empty()) << "2 of 5 windows must not be enough";

  RunWindows(job_, 1, 10, [&](uint64_t s) { return WithStraggler(s, 5); });
  ASSERT_EQ(Latest().size(), 1u);
  v1::Fault f = Latest()[0];
  EXPECT_EQ(f.fault_class(), v1::FAULT_CLASS_NON_COMM_SLOW);
  EXPECT_EQ(f.state(), v1::FAULT_STATE_SUSPECTED);
  EXPECT_EQ(f.job_id(), "job1");
  ASSERT_EQ(f.suspects_size(), 1);
  const v1::Suspect& s = f.suspects(0);
  EXPECT_EQ(s.level(), v1::SUSPECT_LEVEL_GPU);
  EXPECT_EQ(s.global_rank(), 5);
  EXPECT_EQ(s.host(), "node2");
  EXPECT_EQ(s.gpu_index(), 1);
  EXPECT_EQ(s.nic(), "mlx5_1");  // GPU i <-> NIC i heuristic
  EXPECT_EQ(VictimGlobals(f), (std::set<int32_t>{0, 1, 2, 3, 4, 6, 7}));
  ASSERT_GE(f.evidence_size(), 1);
  EXPECT_GT(f.evidence(0).values().at("robust_z"), 3.5);
  EXPECT_NEAR(f.evidence(0).values().at("median_mean_wait_ns"), 400'000,
              40'000);

  RunWindows(job_, 2, 10, [&](uint64_t s) { return WithStraggler(s, 5); });
  EXPECT_EQ(Latest()[0].state(), v1::FAULT_STATE_CONFIRMED);

  // The straggler recovers: after M quiet windows the fault resolves.
  RunWindows(job_, 5, 10,
             [&](uint64_t seq) { return JitteredDurations(8, kBase, seq); });
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_EQ(Latest()[0].state(), v1::FAULT_STATE_RESOLVED);
  for (const v1::Fault& x : faults_) {
    EXPECT_EQ(SuspectGlobals(x), std::set<int32_t>{5});
  }
}

TEST_F(StragglerTest, CheckpointPauseOfAllRanksIsNotAFault) {
  // Nobody issues collectives for 10 s (all ranks write a checkpoint) ...
  for (int i = 0; i < 10; ++i) Cycle(absl::Seconds(1));
  // ... then every rank is slower together for one window (caches cold).
  RunWindows(job_, 1, 10, [&](uint64_t seq) {
    return JitteredDurations(8, 5 * kBase, seq);
  });
  RunWindows(job_, 6, 10,
             [&](uint64_t seq) { return JitteredDurations(8, kBase, seq); });
  EXPECT_TRUE(faults_.empty()) << faults_[0].DebugString();
}

TEST_F(StragglerTest, OneSlowCollectiveThatDoesNotRepeatIsNotAFault) {
  const uint64_t once = seq_ + 4;
  RunWindows(job_, 1, 10, [&](uint64_t seq) {
    // One collective in which rank 3 is 400 us late, once.
    return seq == once ? WithStraggler(seq, 3)
                       : JitteredDurations(8, kBase, seq);
  });
  RunWindows(job_, 6, 10,
             [&](uint64_t seq) { return JitteredDurations(8, kBase, seq); });
  EXPECT_TRUE(faults_.empty()) << faults_[0].DebugString();
}

TEST_F(StragglerTest, StragglerInTwoOfFiveWindowsIsNotAFault) {
  for (int round = 0; round < 3; ++round) {
    RunWindows(job_, 1, 10, [&](uint64_t s) { return WithStraggler(s, 2); });
    RunWindows(job_, 2, 10,
               [&](uint64_t seq) { return JitteredDurations(8, kBase, seq); });
  }
  EXPECT_TRUE(faults_.empty()) << faults_[0].DebugString();
}

// A 4-rank communicator with 5 collectives a window: one rank is last in
// `late_in` of them, every window (lateness 80% of the collective).
class LastByChanceTest : public EngineTest {
 protected:
  LastByChanceTest() : job_(0xA7, 4, 2) {}
  void SetUp() override {
    EngineTest::SetUp();
    job_.Register(engine_.get());
    RunWindows(job_, 5, 5,
               [&](uint64_t seq) { return JitteredDurations(4, kBase, seq); });
  }
  void RunLateIn(int late_in) {
    RunWindows(job_, 6, 5, [&](uint64_t seq) {
      std::vector<uint64_t> d = JitteredDurations(4, kBase, seq);
      if (static_cast<int>(seq % 5) < late_in) {
        d = JitteredDurations(4, kBase + 800'000, seq);
        d[2] = kBase;
      }
      return d;
    });
  }
  SimJob job_;
};

TEST_F(LastByChanceTest, LastInThreeOfFiveOfFourRanksIsChance) {
  // P(>= 3 of 5 | p = 1/4) = 10%: what a healthy job with loader jitter
  // shows one window in ten (the soak's false fault, round 8).
  RunLateIn(3);
  EXPECT_TRUE(faults_.empty()) << faults_[0].DebugString();
}

TEST_F(LastByChanceTest, LastInFourOfFiveIsNamed) {
  RunLateIn(4);  // P(>= 4 of 5 | p = 1/4) = 1.6%
  ASSERT_FALSE(faults_.empty());
  EXPECT_EQ(faults_[0].fault_class(), v1::FAULT_CLASS_NON_COMM_SLOW);
  EXPECT_EQ(SuspectGlobals(faults_[0]), std::set<int32_t>{2});
  EXPECT_NEAR(faults_[0].evidence(0).values().at("chance_of_last_count"),
              0.0156, 0.001);
}

TEST_F(LastByChanceTest, AStarvedWindowNeitherConfirmsNorResolves) {
  RunLateIn(5);  // a straggler, last in every collective
  ASSERT_FALSE(faults_.empty());
  ASSERT_EQ(Latest().size(), 1u);
  ASSERT_NE(Latest()[0].state(), v1::FAULT_STATE_RESOLVED);
  // The job is starved: two collectives a window, rank 2 last in both.
  // 2 of 2 at p = 1/4 is 6%, no evidence; nor is it evidence that the
  // straggler recovered, so the fault stays open.
  RunWindows(job_, 8, 2, [&](uint64_t seq) {
    std::vector<uint64_t> d = JitteredDurations(4, kBase + 800'000, seq);
    d[2] = kBase;
    return d;
  });
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_NE(Latest()[0].state(), v1::FAULT_STATE_RESOLVED);
  // When it really recovers, the fault resolves.
  RunWindows(job_, 6, 5,
             [&](uint64_t seq) { return JitteredDurations(4, kBase, seq); });
  EXPECT_EQ(Latest()[0].state(), v1::FAULT_STATE_RESOLVED);
}

TEST(BinomialTailTest, MatchesHandComputedTails) {
  EXPECT_NEAR(BinomialTailAtLeast(3, 5, 0.25), 0.103516, 1e-6);
  EXPECT_NEAR(BinomialTailAtLeast(4, 5, 0.25), 0.015625, 1e-6);
  EXPECT_NEAR(BinomialTailAtLeast(5, 5, 0.5), 0.03125, 1e-9);
  EXPECT_DOUBLE_EQ(BinomialTailAtLeast(0, 5, 0.25), 1);
  EXPECT_DOUBLE_EQ(BinomialTailAtLeast(6, 5, 0.25), 0);
  // Large windows: 600 of 1,000 at p = 1/4 is beyond any chance, and the
  // tail at the mean is about one half.
  EXPECT_LT(BinomialTailAtLeast(600, 1000, 0.25), 1e-50);
  EXPECT_NEAR(BinomialTailAtLeast(500, 1000, 0.5), 0.5126, 1e-3);
  // Below or near the mean (exact values from fractions), and tails whose
  // first term underflows: no walk through the bulk, no 0 for ~1.
  EXPECT_NEAR(BinomialTailAtLeast(1, 10, 0.25), 0.943686, 1e-6);
  EXPECT_NEAR(BinomialTailAtLeast(2, 10, 0.25), 0.755975, 1e-6);
  EXPECT_NEAR(BinomialTailAtLeast(3, 12, 0.25), 0.609325, 1e-6);
  EXPECT_NEAR(BinomialTailAtLeast(30, 100, 0.25), 0.149541, 1e-6);
  EXPECT_DOUBLE_EQ(BinomialTailAtLeast(100, 100'000, 0.25), 1);
  EXPECT_LT(BinomialTailAtLeast(500'000, 1'000'000, 0.25), 1e-300);
  EXPECT_DOUBLE_EQ(BinomialTailAtLeast(1, 2'000'000'000, 0.25), 1);
}

TEST(StragglerWarmupTest, NoVerdictDuringWarmup) {
  FakeClock clock;
  auto engine = DetectionEngine::Create(&clock, {});
  ASSERT_TRUE(engine.ok());
  SimJob job(0xB2, 8, 8);
  job.Register(engine->get());
  std::vector<v1::Fault> faults;
  // 5 windows x 3 collectives = 15 < 20 warm-up collectives.
  uint64_t seq = 1;
  for (int w = 0; w < 5; ++w) {
    for (int i = 0; i < 3; ++i, ++seq) {
      std::vector<uint64_t> d(8, 2 * kBase);
      d[4] = kBase;
      job.Feed(engine->get(), seq, d);
    }
    clock.Advance(absl::Seconds(1));
    for (auto& f : (*engine)->RunCycle().faults) faults.push_back(f);
  }
  EXPECT_TRUE(faults.empty());
}

}  // namespace
}  // namespace pitstop::controller::testing
