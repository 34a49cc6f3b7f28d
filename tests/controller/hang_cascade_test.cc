// Hangs that cascade across communicators: ranks outside a stuck comm
// wait for its members in another comm (e.g. the step's global
// all-reduce); that wait is a consequence, folded into the first fault.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/controller/engine_test_base.h"

namespace pitstop::controller::testing {
namespace {

class HangCascadeTest : public EngineTest {
 protected:
  // World-like comm W: globals 0..n_world-1; DP-like comm D: globals 4..7.
  // Two ranks per host in both, so hosts and pids agree.
  void Setup(int32_t n_world) {
    world_ = std::make_unique<SimJob>(0xE0, n_world, 2);
    dp_ = std::make_unique<SimJob>(0xD0, 4, 2, "job1", 4);
    world_->Register(engine_.get());
    dp_->Register(engine_.get());
  }
  void Report(const SimJob& job, int32_t rank, uint64_t enq, uint64_t done) {
    v1::RankProgress p = job.Progress(rank, enq, done);
    if (enq > done) {
      p.set_oldest_incomplete_seq(done + 1);
      p.set_oldest_incomplete_age_ns(1);
    }
    ASSERT_TRUE(engine_->AddProgress(job.HostOf(rank), p).ok());
  }
  // W ranks 0..3 entered seq 5; ranks 4.. (members of D) never did.
  void WorldWaitsForDp() {
    for (int32_t r = 0; r < world_->n_ranks(); ++r) {
      Report(*world_, r, r < 4 ? 5 : 4, 4);
    }
  }
  std::vector<v1::Fault> OpenFaults() const {
    std::vector<v1::Fault> out;
    for (const v1::Fault& f : Latest()) {
      if (f.state() != v1::FAULT_STATE_RESOLVED) out.push_back(f);
    }
    return out;
  }
  static bool HasConsequence(const v1::Fault& f, uint64_t comm) {
    for (const v1::Evidence& e : f.evidence()) {
      if (e.comm_hash() == comm && e.values().count("consequence_seq")) {
        return true;
      }
    }
    return false;
  }

  std::unique_ptr<SimJob> world_, dp_;
};

TEST_F(HangCascadeTest, WaitInWorldCommForCommHungRanksIsFolded) {
  Setup(8);
  // The world comm's wait starts 3 s before D's hang is seen: it reaches
  // its timeout first and must still not become a fault of its own.
  WorldWaitsForDp();
  Cycle(absl::Seconds(3));
  for (int32_t r = 0; r < 4; ++r) Report(*dp_, r, 10, 9);
  for (int i = 0; i < 4; ++i) Cycle(absl::Seconds(2));

  EXPECT_EQ(Latest().size(), 1u);
  for (const v1::Fault& f : faults_) {
    EXPECT_NE(f.comm_hash(), 0xE0u) << "world-comm fault: " << f.summary();
  }
  const std::vector<v1::Fault> open = OpenFaults();
  ASSERT_EQ(open.size(), 1u);
  const v1::Fault& f = open[0];
  EXPECT_EQ(f.fault_class(), v1::FAULT_CLASS_COMM_HANG);
  EXPECT_EQ(f.comm_hash(), 0xD0u);
  EXPECT_TRUE(HasConsequence(f, 0xE0)) << f.DebugString();
  const std::set<int32_t> victims = VictimGlobals(f);
  for (int32_t g = 0; g < 8; ++g) EXPECT_TRUE(victims.count(g)) << g;
}

TEST_F(HangCascadeTest, WaitInOtherCommForCrashedCommIsFoldedIntoTheDeath) {
  // W holds globals 0..4: the dead process (global 5) is not in it, its
  // member global 4 is stuck in D waiting for the dead one.
  Setup(5);
  WorldWaitsForDp();
  for (int32_t r = 0; r < 4; ++r) {
    if (r != 1) Report(*dp_, r, 10, 9);
  }
  v1::RankLifecycle died;
  died.set_kind(v1::RankLifecycle::KIND_DIED);
  died.set_job_id("job1");
  died.set_pid(dp_->PidOf(1));
  died.set_global_rank(5);
  ASSERT_TRUE(engine_->AddLifecycle(dp_->HostOf(1), died).ok());
  for (int i = 0; i < 4; ++i) Cycle(absl::Seconds(3));

  for (const v1::Fault& f : faults_) {
    EXPECT_EQ(f.fault_class(), v1::FAULT_CLASS_PROCESS_DIED) << f.summary();
  }
  const std::vector<v1::Fault> open = OpenFaults();
  ASSERT_EQ(open.size(), 1u);
  EXPECT_EQ(SuspectGlobals(open[0]), std::set<int32_t>{5});
  EXPECT_TRUE(HasConsequence(open[0], 0xE0)) << open[0].DebugString();
  const std::set<int32_t> victims = VictimGlobals(open[0]);
  for (int32_t g : {0, 1, 2, 3, 4, 6, 7}) EXPECT_TRUE(victims.count(g)) << g;
}

// A rank missing from W that is busy nowhere else is W's own fault.
TEST_F(HangCascadeTest, MissingRankNotBlockedElsewhereIsStillBlamed) {
  Setup(8);
  WorldWaitsForDp();
  for (int32_t r = 0; r < 4; ++r) Report(*dp_, r, 9, 9);  // D idle
  Cycle(absl::Seconds(6));
  const std::vector<v1::Fault> open = OpenFaults();
  ASSERT_EQ(open.size(), 1u);
  EXPECT_EQ(open[0].fault_class(), v1::FAULT_CLASS_NON_COMM_HANG);
  EXPECT_EQ(open[0].comm_hash(), 0xE0u);
  EXPECT_EQ(SuspectGlobals(open[0]), (std::set<int32_t>{4, 5, 6, 7}));
}

// A rank that stopped before its next collective (global 5) leaves its
// TP-mate (global 4) waiting in their TP all-reduce T; global 4 is then
// missing from W. W's hang is a consequence of T's, which names global 5:
// one fault, not a second one blaming the waiting node-mate.
TEST_F(HangCascadeTest, WaitBehindANonCommHangElsewhereIsFolded) {
  Setup(5);
  SimJob tp(0xC0, 2, 2, "job1", 4);  // globals 4, 5 (node2)
  tp.Register(engine_.get());
  WorldWaitsForDp();     // W: 0..3 entered seq 5, global 4 not
  Report(tp, 0, 10, 9);  // global 4 entered seq 10 of T
  Report(tp, 1, 9, 9);   // global 5 never did
  Cycle(absl::Seconds(6));
  const std::vector<v1::Fault> open = OpenFaults();
  ASSERT_EQ(open.size(), 1u)
      << open[0].summary() << " / " << open.back().summary();
  EXPECT_EQ(open[0].fault_class(), v1::FAULT_CLASS_NON_COMM_HANG);
  EXPECT_EQ(open[0].comm_hash(), 0xC0u);
  EXPECT_EQ(SuspectGlobals(open[0]), std::set<int32_t>{5});
  EXPECT_TRUE(HasConsequence(open[0], 0xE0)) << open[0].DebugString();
  for (const v1::Fault& f : faults_) {
    EXPECT_NE(f.comm_hash(), 0xE0u) << "world-comm fault: " << f.summary();
  }
}

// Global 5 stopped before D's next all-reduce: D misses only it (its
// mates 4, 6, 7 wait there), and W misses 4..7: the three blocked in D and
// the stopped one itself. W is D's hang seen from farther away: one fault
// naming global 5, W folded into it (the full benchmark's
// non_comm_hang 4x4 seed 1 raised W on its own, naming the DP ring).
TEST_F(HangCascadeTest, StoppedRankMissingFromAWiderCommIsOneFault) {
  Setup(8);
  WorldWaitsForDp();  // W: 0..3 entered seq 5, 4..7 not
  for (int32_t r = 0; r < 4; ++r) Report(*dp_, r, r == 1 ? 9 : 10, 9);
  for (int i = 0; i < 3; ++i) Cycle(absl::Seconds(3));
  const std::vector<v1::Fault> open = OpenFaults();
  ASSERT_EQ(open.size(), 1u)
      << open[0].summary() << " / " << open.back().summary();
  EXPECT_EQ(open[0].fault_class(), v1::FAULT_CLASS_NON_COMM_HANG);
  EXPECT_EQ(open[0].comm_hash(), 0xD0u);
  EXPECT_EQ(SuspectGlobals(open[0]), std::set<int32_t>{5});
  EXPECT_TRUE(HasConsequence(open[0], 0xE0)) << open[0].DebugString();
  for (const v1::Fault& f : faults_) {
    EXPECT_NE(f.comm_hash(), 0xE0u) << "world-comm fault: " << f.summary();
  }
  const std::set<int32_t> victims = VictimGlobals(open[0]);
  for (int32_t g : {0, 1, 2, 3, 4, 6, 7}) EXPECT_TRUE(victims.count(g)) << g;
}

}  // namespace
}  // namespace pitstop::controller::testing
