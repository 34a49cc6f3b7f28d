// A detection cycle in three steps (DetectionEngine::BeginCycle,
// CycleWork::Detect, FinishCycle): the controller runs the detectors on
// the engine's copy without its lock, so inputs arrive between the steps.
// They must count for the next window, and a verdict judged on a copy that
// went stale (members changed meanwhile) must not be published.
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "tests/controller/engine_test_base.h"

namespace pitstop::controller::testing {
namespace {

constexpr uint64_t kBase = 1'000'000;  // 1 ms collective

class CycleWorkTest : public EngineTest {
 protected:
  // BeginCycle after `d`, `between` (inputs while the detectors would run),
  // Detect, FinishCycle; keeps the faults like Cycle().
  CycleResult SplitCycle(absl::Duration d, const std::function<void()>& between,
                         bool between_before_detect = true) {
    clock_.Advance(d);
    std::unique_ptr<CycleWork> work = engine_->BeginCycle(nullptr);
    if (between_before_detect) between();
    work->Detect();
    if (!between_before_detect) between();
    CycleResult r = engine_->FinishCycle(work.get(), nullptr);
    for (const v1::Fault& f : r.faults) faults_.push_back(f);
    return r;
  }
  void Report(const SimJob& job, int32_t rank, uint64_t enq, uint64_t done) {
    ASSERT_TRUE(
        engine_->AddProgress(job.HostOf(rank), job.Progress(rank, enq, done))
            .ok());
  }
  bool AnyFaultBlames(const std::string& host) const {
    for (const v1::Fault& f : faults_) {
      for (const v1::Suspect& s : f.suspects()) {
        if (s.host() == host) return true;
      }
    }
    return false;
  }
};

// Rank 3 (node0) never enqueued seq 10 that the others wait in.
void SetUpHang(const SimJob& job, DetectionEngine* engine) {
  job.Register(engine);
  for (int32_t r = 0; r < 8; ++r) {
    ASSERT_TRUE(
        engine->AddProgress(job.HostOf(r), job.Progress(r, r == 3 ? 9 : 10, 9))
            .ok());
  }
}

// The control: the copy's verdict blames rank 3 on node0.
TEST_F(CycleWorkTest, HangOnTheCopyBlamesTheRankThatNeverEnqueued) {
  SimJob job(0xD2, 8, 4);
  SetUpHang(job, engine_.get());
  SplitCycle(absl::Seconds(6), [] {});
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_EQ(SuspectGlobals(Latest()[0]), (std::set<int32_t>{3}));
  EXPECT_TRUE(AnyFaultBlames("node0"));
  EXPECT_EQ(engine_->stats().hang_verdicts_rejudged, 0u);
}

// node0's agent is lost while the detectors judge the copy: the verdict on
// the copy (blaming rank 3 on node0) is stale and judged again on the live
// state, where node0's ranks are not judged.
TEST_F(CycleWorkTest, AVerdictOnAStaleCopyIsJudgedAgain) {
  SimJob job(0xD2, 8, 4);
  SetUpHang(job, engine_.get());
  SplitCycle(absl::Seconds(6), [&] { engine_->NodeLost("node0"); });
  EXPECT_EQ(engine_->stats().hang_verdicts_rejudged, 1u);
  EXPECT_FALSE(AnyFaultBlames("node0"));
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_NE(Latest()[0].summary().find("node0 is unreachable"),
            std::string::npos)
      << Latest()[0].summary();
  // The same when the node is lost after the detectors ran, before the
  // verdicts are published.
  engine_->NodeBack("node0");
  SplitCycle(
      absl::Seconds(1), [&] { engine_->NodeLost("node0"); },
      /*between_before_detect=*/false);
  EXPECT_EQ(engine_->stats().hang_verdicts_rejudged, 2u);
  EXPECT_FALSE(AnyFaultBlames("node0"));
}

// Progress reports between the steps are not overwritten by the copy's
// bookkeeping: the hang resolves in the next cycle once rank 3 caught up.
TEST_F(CycleWorkTest, ProgressBetweenTheStepsCountsInTheNextCycle) {
  SimJob job(0xD2, 8, 4);
  SetUpHang(job, engine_.get());
  SplitCycle(absl::Seconds(6), [&] {
    for (int32_t r = 0; r < 8; ++r) Report(job, r, 11, 10);
  });
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_NE(Latest()[0].state(), v1::FAULT_STATE_RESOLVED);
  Cycle(absl::Milliseconds(500));
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_EQ(Latest()[0].state(), v1::FAULT_STATE_RESOLVED);
}

// Collectives joined between BeginCycle (which took the closed window) and
// FinishCycle belong to the next window: neither added to the window being
// judged nor lost.
TEST_F(CycleWorkTest, CollectivesBetweenTheStepsCountInTheNextWindow) {
  SimJob job(0xA1, 8, 2);
  job.Register(engine_.get());
  auto straggler = [&](uint64_t seq) {
    std::vector<uint64_t> d = JitteredDurations(8, kBase + 400'000, seq);
    d[5] = kBase;
    return d;
  };
  RunWindows(job, 3, 10,
             [&](uint64_t seq) { return JitteredDurations(8, kBase, seq); });
  // Three windows with a straggler open a fault (3 of 5); the third
  // window's cycle is split and 7 collectives arrive in between: they
  // belong to the fourth window, not to the third (taken by BeginCycle).
  RunWindows(job, 2, 10, straggler);
  for (int i = 0; i < 10; ++i, ++seq_)
    job.Feed(engine_.get(), seq_, straggler(seq_));
  SplitCycle(absl::Seconds(1), [&] {
    for (int i = 0; i < 7; ++i, ++seq_) {
      job.Feed(engine_.get(), seq_, straggler(seq_));
    }
  });
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_EQ(Latest()[0].evidence(0).values().at("collectives"), 10);
  EXPECT_EQ(Latest()[0].windows_hit(), 3u);
  // The window of those 7 is the fourth hit (the tracker keeps it without
  // emitting), so one more window confirms the fault (5 of 5). Had they
  // been lost, that window would be empty (neither hit nor miss) and this
  // one only the fourth hit.
  Cycle(absl::Seconds(1));
  for (int i = 0; i < 10; ++i, ++seq_) {
    job.Feed(engine_.get(), seq_, straggler(seq_));
  }
  Cycle(absl::Seconds(1));
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_EQ(SuspectGlobals(Latest()[0]), (std::set<int32_t>{5}));
  EXPECT_EQ(Latest()[0].state(), v1::FAULT_STATE_CONFIRMED);
  EXPECT_EQ(Latest()[0].windows_hit(), 5u);
}

// The hook of Options::detect_hook runs in Detect(), once per cycle.
TEST(CycleWorkHookTest, DetectRunsTheHookOnce) {
  FakeClock clock;
  int calls = 0;
  DetectionEngine::Options o;
  o.detect_hook = [&calls] { ++calls; };
  auto engine = DetectionEngine::Create(&clock, o);
  ASSERT_TRUE(engine.ok());
  std::unique_ptr<CycleWork> work = (*engine)->BeginCycle(nullptr);
  EXPECT_EQ(calls, 0);
  work->Detect();
  EXPECT_EQ(calls, 1);
  (void)(*engine)->FinishCycle(work.get(), nullptr);
  EXPECT_EQ(calls, 1);
  (void)(*engine)->RunCycle();
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace pitstop::controller::testing
