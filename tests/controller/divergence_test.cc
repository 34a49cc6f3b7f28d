// Silent divergence (NVIDIA/nccl#1730): one rank's completions stop while
// its peers go on, so only its own watchdog fires. Deterministic
// RankProgress inputs on a FakeClock.
#include <optional>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/controller/engine_test_base.h"

namespace pitstop::controller::testing {
namespace {

using ::testing::HasSubstr;

class DivergenceTest : public EngineTest {
 protected:
  void Report(const SimJob& job, int32_t rank, v1::CollFunc func, uint64_t enq,
              uint64_t done) {
    v1::RankProgress p = job.Progress(rank, enq, done);
    p.set_func(func);
    ASSERT_TRUE(engine_->AddProgress(job.HostOf(rank), p).ok());
  }
  // The one open fault (nullopt when none or several are open).
  std::optional<v1::Fault> OnlyOpen() const {
    std::optional<v1::Fault> open;
    for (const v1::Fault& f : Latest()) {
      if (f.state() == v1::FAULT_STATE_RESOLVED) continue;
      if (open) return std::nullopt;
      open = f;
    }
    return open;
  }
};

// Broadcasts go on for ranks 0, 1 and 3 (their completions advance from 20
// to 40) while rank 2's stop at 10 and its enqueued count keeps growing.
// Without the divergence rule a root collective had no stall rule: every
// member enqueued seq 11, so the verdict was a comm hang without suspect.
TEST_F(DivergenceTest, BroadcastRankWhoseCompletionsStopIsTheSuspect) {
  SimJob job(0xB1, 4, 2);
  job.Register(engine_.get());
  for (int32_t r = 0; r < 4; ++r) {
    Report(job, r, v1::COLL_FUNC_BROADCAST, r == 2 ? 15 : 22, r == 2 ? 10 : 20);
  }
  Cycle(absl::Seconds(3));
  for (int32_t r = 0; r < 4; ++r) {
    Report(job, r, v1::COLL_FUNC_BROADCAST, r == 2 ? 30 : 42, r == 2 ? 10 : 40);
  }
  Cycle(absl::Seconds(3));
  std::optional<v1::Fault> f = OnlyOpen();
  ASSERT_TRUE(f.has_value()) << faults_.size();
  EXPECT_EQ(f->fault_class(), v1::FAULT_CLASS_NON_COMM_HANG)
      << f->DebugString();
  EXPECT_EQ(SuspectGlobals(*f), std::set<int32_t>{2});
  EXPECT_EQ(f->suspects(0).level(), v1::SUSPECT_LEVEL_GPU);
  EXPECT_EQ(VictimGlobals(*f), (std::set<int32_t>{0, 1, 3}));
  EXPECT_EQ(f->seq_number(), 11u);
  const auto& values = f->evidence(0).values();
  EXPECT_EQ(values.at("outstanding/rank2"), 20);
  EXPECT_EQ(values.at("max_outstanding_others"), 2);
  EXPECT_EQ(values.at("members_completed_past"), 3);
  EXPECT_THAT(f->summary(), HasSubstr("silent divergence"));
  EXPECT_THAT(f->summary(), HasSubstr("up to 20 op(s) enqueued"));
}

// The all-reduce form (the issue's own report: "last enqueued work:
// 2398578, last completed work: 2398458" on rank 118 only): the fault
// carries each side's outstanding count, which is what tells it apart.
TEST_F(DivergenceTest, AllReduceDivergenceCarriesOutstandingCounts) {
  SimJob job(0xB2, 4, 4);
  job.Register(engine_.get());
  for (int32_t r = 0; r < 4; ++r) {
    Report(job, r, v1::COLL_FUNC_ALL_REDUCE, r == 1 ? 120 : 8, r == 1 ? 0 : 7);
  }
  Cycle(absl::Seconds(6));
  std::optional<v1::Fault> f = OnlyOpen();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->fault_class(), v1::FAULT_CLASS_NON_COMM_HANG);
  EXPECT_EQ(SuspectGlobals(*f), std::set<int32_t>{1});
  EXPECT_EQ(f->evidence(0).values().at("outstanding/rank1"), 120);
  EXPECT_EQ(f->evidence(0).values().at("max_outstanding_others"), 1);
}

// A broadcast root may finish before its receivers: one member past the
// others is not a majority, and the receivers still stuck with rank 2 are
// not blamed on rank 2 alone.
TEST_F(DivergenceTest, OneMemberAheadInABroadcastIsNoDivergence) {
  SimJob job(0xB3, 4, 2);
  job.Register(engine_.get());
  for (int32_t r = 0; r < 4; ++r) {
    Report(job, r, v1::COLL_FUNC_BROADCAST, 11, r == 0 ? 11 : 10);
  }
  Cycle(absl::Seconds(6));
  for (const v1::Fault& f : Latest()) {
    EXPECT_NE(f.fault_class(), v1::FAULT_CLASS_NON_COMM_HANG)
        << f.DebugString();
    EXPECT_EQ(SuspectGlobals(f).count(2), 0u) << f.DebugString();
  }
}

}  // namespace
}  // namespace pitstop::controller::testing
