// End to end: the CI version of the detection-quality benchmark. Each test
// runs a small built-in scenario (2 nodes x 4 ranks) through real rank
// processes (the plugin via the NCCL emulator harness), real agents and a
// real controller, and checks pitstop's verdict: the right suspect, and no
// false fault. Speed is not asserted (docs/detection-quality.md has it).
#include "gtest/gtest.h"
#include "src/sim/runner.h"
#include "src/sim/scenario.h"

namespace pitstop::sim {
namespace {

std::unique_ptr<RunResult> RunBuiltin(const std::string& name) {
  auto s = BuiltinScenario(name);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return nullptr;
  RunOptions opts;
  opts.progress = [](const std::string& line) { std::cerr << line << "\n"; };
  opts.progress_period_s = 5;
  auto r = RunScenario(*s, opts);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return nullptr;
  for (const std::string& e : (*r)->rank_errors) ADD_FAILURE() << e;
  return std::move(*r);
}

std::string Describe(const RunResult& r) {
  std::string out;
  for (const ObservedFault& f : r.faults) {
    out += ShortClassName(f.fault.fault_class()) + " " +
           (f.fault.suspects_size() ? DescribeSuspect(f.fault.suspects(0))
                                    : "(no suspect)") +
           "\n";
  }
  return out.empty() ? "no faults" : out;
}

TEST(SimEndToEnd, StragglerIsTheSlowGpu) {
  auto r = RunBuiltin("ci-straggler");
  ASSERT_NE(r, nullptr);
  ASSERT_EQ(r->score.truths.size(), 1u);
  const TruthScore& t = r->score.truths[0];
  EXPECT_TRUE(t.detected) << Describe(*r);
  EXPECT_TRUE(t.localised) << Describe(*r);
  EXPECT_TRUE(r->score.false_faults.empty()) << Describe(*r);
  // The suspect is rank 5 = node1 GPU 1.
  bool named = false;
  for (const ObservedFault& f : r->faults) {
    if (f.fault.fault_class() == v1::FAULT_CLASS_NON_COMM_SLOW &&
        f.fault.suspects_size() > 0) {
      named = named || (f.fault.suspects(0).global_rank() == 5 &&
                        f.fault.suspects(0).host() == "node1");
    }
  }
  EXPECT_TRUE(named) << Describe(*r);
}

TEST(SimEndToEnd, CrashedRankIsTheDeadProcess) {
  auto r = RunBuiltin("ci-crash");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->ranks_crashed, 1);
  ASSERT_EQ(r->score.truths.size(), 1u);
  EXPECT_TRUE(r->score.truths[0].detected) << Describe(*r);
  EXPECT_TRUE(r->score.truths[0].localised) << Describe(*r);
  EXPECT_TRUE(r->score.false_faults.empty()) << Describe(*r);
}

// The desync, end to end: the plugin records each rank's count, the
// agent reports the open op's size, the controller sees two sizes.
TEST(SimEndToEnd, DesyncIsAMismatchNamingTheOddRank) {
  auto r = RunBuiltin("ci-mismatch");
  ASSERT_NE(r, nullptr);
  ASSERT_EQ(r->score.truths.size(), 1u);
  EXPECT_TRUE(r->score.truths[0].detected) << Describe(*r);
  EXPECT_TRUE(r->score.truths[0].localised) << Describe(*r);
  EXPECT_TRUE(r->score.false_faults.empty()) << Describe(*r);
  bool named = false;
  for (const ObservedFault& f : r->faults) {
    named |= f.fault.fault_class() == v1::FAULT_CLASS_MISMATCH &&
             f.fault.suspects_size() == 1 &&
             f.fault.suspects(0).global_rank() == 6;
  }
  EXPECT_TRUE(named) << Describe(*r);
}

TEST(SimEndToEnd, CheckpointPauseRaisesNothing) {
  auto r = RunBuiltin("ci-clean");
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(r->faults.empty()) << Describe(*r);
  EXPECT_TRUE(r->score.ok());
}

// dlrover#1749: a checkpoint that pauses every rank for 8 s, longer than
// the hang timeout (5 s floor): all idle with nothing enqueued, no hang.
TEST(SimEndToEnd, CheckpointLongerThanTheHangTimeoutRaisesNothing) {
  auto r = RunBuiltin("ci-checkpoint");
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(r->faults.empty()) << Describe(*r);
  EXPECT_TRUE(r->score.ok());
}

}  // namespace
}  // namespace pitstop::sim
