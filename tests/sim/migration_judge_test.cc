// The step-log rules migrated runs are judged by: each can fail.
#include "src/sim/migration_judge.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

#include "src/sim/migration_scenario.h"

namespace pitstop::sim {
namespace {

StepLogLines Steps(int from, int to) {
  StepLogLines out;
  for (int s = from; s < to; ++s) out.emplace_back(s, 1.0);
  return out;
}
StepLogLines Cat(StepLogLines a, const StepLogLines& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(MigrationJudge, ParsesStepLogs) {
  const StepLogLines l = ParseStepLog("step 0 ms 2.5\nstep 1 ms 3\n");
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[1].first, 1);
  EXPECT_DOUBLE_EQ(l[0].second, 2.5);
}

TEST(MigrationJudge, StandbyEveryStepOnce) {
  EXPECT_EQ(CheckMovedOnce(Steps(0, 40), Steps(40, 100), 100), "");
  EXPECT_EQ(CheckMovedOnce(Steps(0, 100), {}, 100), "");
  EXPECT_NE(CheckMovedOnce(Steps(0, 41), Steps(40, 100), 100), "");  // twice
  EXPECT_NE(CheckMovedOnce(Steps(0, 40), Steps(41, 100), 100), "");  // gap
  EXPECT_NE(CheckMovedOnce(Steps(0, 40), Steps(40, 99), 100), "");   // short
}

TEST(MigrationJudge, RecoveredStayerRedoesTheAgreedStep) {
  EXPECT_EQ(CheckRecoveredStayer(Cat(Steps(0, 50), Steps(50, 100)), 50, 100),
            "");
  // Finished step 50 before the peer died in it: 50 is redone and logged
  // twice.
  EXPECT_EQ(CheckRecoveredStayer(Cat(Steps(0, 51), Steps(50, 100)), 50, 100),
            "");
  EXPECT_NE(CheckRecoveredStayer(Cat(Steps(0, 52), Steps(50, 100)), 50, 100),
            "");  // two steps ahead: cannot be
  EXPECT_NE(CheckRecoveredStayer(Cat(Steps(0, 50), Steps(51, 100)), 50, 100),
            "");  // skipped the redo
  EXPECT_NE(CheckRecoveredStayer(Cat(Steps(0, 50), Steps(50, 99)), 50, 100),
            "");
}

TEST(MigrationJudge, RecoveredMovedRankJoinerStartsAtTheRedo) {
  EXPECT_EQ(CheckRecoveredMoved(Steps(0, 50), Steps(50, 100), 50, 100), "");
  EXPECT_EQ(CheckRecoveredMoved(Steps(0, 51), Steps(50, 100), 50, 100), "");
  // Killed after step 49's all-reduce, before logging it (seen in a run).
  EXPECT_EQ(CheckRecoveredMoved(Steps(0, 49), Steps(50, 100), 50, 100), "");
  EXPECT_NE(CheckRecoveredMoved(Steps(0, 48), Steps(50, 100), 50, 100), "");
  EXPECT_NE(CheckRecoveredMoved(Steps(0, 50), Steps(51, 100), 50, 100), "");
}

TEST(MigrationJudge, DowntimeIsTheLongestStepAroundTheSwitch) {
  StepLogLines l = Steps(0, 100);
  l[51].second = 40;
  l[90].second = 99;  // far from the switch: not counted
  const auto [longest, median] = LongestAroundAndMedian(l, 50);
  EXPECT_DOUBLE_EQ(longest, 40);
  EXPECT_DOUBLE_EQ(median, 1);
}

TEST(MigrationJudge, MedianOfAStepRange) {
  StepLogLines l = Steps(0, 30);
  for (int i = 10; i < 20; ++i) l[i].second = 3.0 + i;  // 13 .. 22
  EXPECT_DOUBLE_EQ(MedianStepMs(l, 0, 10), 1);
  EXPECT_DOUBLE_EQ(MedianStepMs(l, 10, 20), 18);  // upper middle of 10
  EXPECT_DOUBLE_EQ(MedianStepMs(l, 10, 11), 13);
  EXPECT_DOUBLE_EQ(MedianStepMs(l, 40, 50), 0);  // no such steps
}

// The degraded-node report explains why a 3x slower GPU made the step only
// a little slower, and says the switch phase is not downtime.
TEST(MigrationReport, ExplainsTheSlowdownAndTheSwitchPhase) {
  MigrationScenarioResult r;
  r.scenario = "degraded-node-migration";
  r.passed = true;
  r.fault.set_fault_id("F1");
  r.before_fault_ms = 49.55;
  r.degraded_ms = 62.29;
  r.after_switch_ms = 48.59;
  r.full_speed = true;
  r.compute_ms = 10;
  r.slow_factor = 3;
  r.migration.set_migration_id("M1");
  r.migration.set_ready_unix_ns(1'000'000'000);
  r.migration.set_switched_unix_ns(2'213'000'000);
  r.switch_step = 300;
  std::ostringstream out;
  PrintMigrationReport(r, out);
  EXPECT_THAT(out.str(),
              ::testing::HasSubstr(
                  "the degraded GPU's compute went 10.0 -> 30.0 ms (3x, +20.0 "
                  "ms); the rest of its 49.55 ms step"));
  EXPECT_THAT(out.str(),
              ::testing::HasSubstr("switch (SWITCH_AT phase)    1213 ms "
                                   "(training runs on until the agreed "
                                   "step; not downtime)"));
}

}  // namespace
}  // namespace pitstop::sim
