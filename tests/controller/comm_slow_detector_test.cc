// Comm-slow detection: a slow inter-node link localised from connection
// throughput; thin evidence asks for deep profiling; uniform slowness is
// context, not a fault.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/controller/engine_test_base.h"

namespace pitstop::controller::testing {
namespace {

constexpr uint64_t kBase = 1'000'000;
constexpr double kFast = 10e9;

class CommSlowTest : public EngineTest {
 protected:
  CommSlowTest() : job_(0xD1, 8, 2) {}  // node0..node3, ring 0->1->...->7->0
  void SetUp() override {
    EngineTest::SetUp();
    job_.Register(engine_.get());
    for (int w = 0; w < 4; ++w) Window(kBase, -1, true);
  }
  // One window of 10 collectives; if `slow_src` >= 0 the link slow_src ->
  // slow_src+1 runs at a fifth of the speed.
  void Window(uint64_t duration, int32_t slow_src, bool connections) {
    for (int i = 0; i < 10; ++i, ++seq_) {
      const std::vector<uint64_t> d = JitteredDurations(8, duration, seq_);
      for (int32_t r = 0; r < 8; ++r) {
        v1::CollectiveSummary s = job_.Summary(r, seq_, d[r]);
        if (connections) {
          const bool slow_send = r == slow_src;
          const bool slow_recv = slow_src >= 0 && r == (slow_src + 1) % 8;
          job_.AddRingConnections(&s, slow_send ? kFast / 5 : kFast,
                                  slow_recv ? kFast / 5 : kFast);
        }
        ASSERT_TRUE(engine_->AddSummary(job_.HostOf(r), s).ok());
      }
    }
    Cycle(absl::Seconds(1));
  }
  SimJob job_;
};

TEST_F(CommSlowTest, SlowLinkIsLocalisedToTheNodePair) {
  for (int w = 0; w < 3; ++w) Window(kBase * 3 / 2, 3, true);
  ASSERT_EQ(Latest().size(), 1u);
  const v1::Fault f = Latest()[0];
  EXPECT_EQ(f.fault_class(), v1::FAULT_CLASS_COMM_SLOW);
  ASSERT_EQ(f.suspects_size(), 1);
  const v1::Suspect& s = f.suspects(0);
  EXPECT_EQ(s.level(), v1::SUSPECT_LEVEL_LINK);
  EXPECT_EQ(s.host(), "node1");
  EXPECT_EQ(s.peer_host(), "node2");
  EXPECT_EQ(s.global_rank(), 3);
  EXPECT_EQ(s.peer_global_rank(), 4);
  EXPECT_NEAR(f.evidence(0).values().at("throughput_ratio/3>4"), 0.2, 0.01);
  // All ranks are victims; none is blamed as a straggler.
  EXPECT_EQ(f.victims_size(), 8);
  for (const v1::Fault& x : faults_) {
    EXPECT_NE(x.fault_class(), v1::FAULT_CLASS_NON_COMM_SLOW);
  }
}

TEST_F(CommSlowTest, SlownessWithoutConnectionDataAsksForDeepProfiling) {
  for (int w = 0; w < 3; ++w) Window(kBase * 2, -1, false);
  EXPECT_TRUE(faults_.empty());
  ASSERT_EQ(profiling_.size(), 4u);  // one request per node, once
  for (const ProfilingRequest& p : profiling_) {
    EXPECT_EQ(p.comm_hash, 0xD1u);
    EXPECT_EQ(p.event_mask, 0x4Eu | 0x10u | 0x80u);
  }
  // The deep data that comes back localises the slow link.
  for (int w = 0; w < 3; ++w) Window(kBase * 2, 5, true);
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_EQ(Latest()[0].suspects(0).host(), "node2");
  EXPECT_EQ(Latest()[0].suspects(0).peer_host(), "node3");
}

TEST_F(CommSlowTest, UniformJobWideSlowdownIsContext) {
  // Evaluation phase: every collective 2x slower, every connection alike.
  for (int w = 0; w < 6; ++w) Window(kBase * 2, -1, true);
  EXPECT_TRUE(faults_.empty()) << faults_[0].DebugString();
}

}  // namespace
}  // namespace pitstop::controller::testing
