// Ranks of a node whose agent is gone (stream closed, or silent) are not
// judged by the hang detectors: their last progress is stale, not a verdict.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/controller/engine_test_base.h"

namespace pitstop::controller::testing {
namespace {

using ::testing::HasSubstr;

class NodeLostTest : public EngineTest {
 protected:
  void Report(const SimJob& job, int32_t rank, uint64_t enq, uint64_t done) {
    ASSERT_TRUE(
        engine_->AddProgress(job.HostOf(rank), job.Progress(rank, enq, done))
            .ok());
  }
  // node0 (ranks 0-3) keeps training for `seconds` s; node1 (ranks 4-7)
  // stopped reporting at 10 enqueued / 9 completed (its agent froze, its
  // ranks train on).
  void Run(const SimJob& job, int seconds) {
    for (int32_t r = 0; r < 8; ++r) Report(job, r, 10, 9);
    for (int s = 0; s < seconds; ++s) {
      for (int32_t r = 0; r < 4; ++r) Report(job, r, 11 + s, 10 + s);
      Cycle(absl::Seconds(1));
    }
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

// Without the agent-lost input the frozen view looks like node1's GPUs
// stalled (the reviewer's case); this shows the test can see that.
TEST_F(NodeLostTest, FrozenAgentLooksLikeAHangWhenNotReported) {
  SimJob job(0xD1, 8, 4);
  job.Register(engine_.get());
  Run(job, 14);
  EXPECT_TRUE(AnyFaultBlames("node1"));
}

TEST_F(NodeLostTest, RanksOfALostNodeAreNotBlamed) {
  SimJob job(0xD1, 8, 4);
  job.Register(engine_.get());
  engine_->NodeLost("node1");
  Run(job, 14);
  EXPECT_FALSE(AnyFaultBlames("node1"));
  EXPECT_TRUE(faults_.empty()) << faults_[0].summary();
  // The agent is back and reports where its ranks are: still nothing.
  engine_->NodeBack("node1");
  for (int32_t r = 0; r < 8; ++r) Report(job, r, 25, 24);
  Cycle(absl::Seconds(10));
  EXPECT_TRUE(faults_.empty()) << faults_[0].summary();
}

// A real hang among the reachable ranks is still found, and the fault says
// which node could not be judged.
TEST_F(NodeLostTest, HangElsewhereMentionsTheUnreachableNode) {
  SimJob job(0xD2, 8, 4);
  job.Register(engine_.get());
  engine_->NodeLost("node1");
  for (int32_t r = 0; r < 8; ++r) Report(job, r, r == 3 ? 9 : 10, 9);
  Cycle(absl::Seconds(6));
  ASSERT_EQ(Latest().size(), 1u);
  const v1::Fault f = Latest()[0];
  EXPECT_EQ(f.fault_class(), v1::FAULT_CLASS_NON_COMM_HANG);
  EXPECT_EQ(SuspectGlobals(f), (std::set<int32_t>{3}));
  EXPECT_THAT(f.summary(), HasSubstr("node1"));
  EXPECT_THAT(f.summary(), HasSubstr("unreachable"));
  EXPECT_EQ(f.evidence(0).values().at("members_on_unreachable_nodes"), 4);
}

}  // namespace
}  // namespace pitstop::controller::testing
