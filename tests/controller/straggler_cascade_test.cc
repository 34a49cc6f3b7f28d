// A rank late to one communicator because another communicator it is in
// got slow (cascade without a global synchronisation) is a victim of the
// comm-slow fault, not a straggler; and a rank late to one communicator
// because it waited in another for that one's straggler (a slow GPU's
// node-mate in its DP all-reduce) is a victim of the straggler.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/controller/engine_test_base.h"

namespace pitstop::controller::testing {
namespace {

constexpr uint64_t kBase = 1'000'000;
constexpr double kFast = 10e9;

class StragglerCascadeTest : public EngineTest {
 protected:
  // D: ring of globals 0..7 on node0..3; C: globals 2..5 (node1, node2).
  StragglerCascadeTest() : dp_(0xD1, 8, 2), tp_(0xC1, 4, 2, "job1", 2) {}
  void SetUp() override {
    EngineTest::SetUp();
    dp_.Register(engine_.get());
    tp_.Register(engine_.get());
    for (int w = 0; w < 4; ++w) Window(false, 0);
  }
  // One window: 10 collectives in each comm. `slow`: D's link 3 -> 4 runs
  // at a fifth of the speed and D's collectives take 1.5x; C's rank 1
  // (global 3) arrives `late_ns` after the others.
  void Window(bool slow, uint64_t late_ns) {
    for (int i = 0; i < 10; ++i, ++seq_) {
      const std::vector<uint64_t> d =
          JitteredDurations(8, slow ? kBase * 3 / 2 : kBase, seq_);
      for (int32_t r = 0; r < 8; ++r) {
        v1::CollectiveSummary s = dp_.Summary(r, seq_, d[r]);
        dp_.AddRingConnections(&s, slow && r == 3 ? kFast / 5 : kFast,
                               slow && r == 4 ? kFast / 5 : kFast);
        ASSERT_TRUE(engine_->AddSummary(dp_.HostOf(r), s).ok());
      }
      const std::vector<uint64_t> t = JitteredDurations(4, kBase, seq_);
      for (int32_t r = 0; r < 4; ++r) {
        const uint64_t dur = r == 1 ? t[r] : t[r] + late_ns;
        ASSERT_TRUE(
            engine_->AddSummary(tp_.HostOf(r), tp_.Summary(r, seq_, dur)).ok());
      }
    }
    Cycle(absl::Seconds(1));
  }
  std::vector<v1::Fault> OfClass(v1::FaultClass c) const {
    std::vector<v1::Fault> out;
    for (const v1::Fault& f : Latest()) {
      if (f.fault_class() == c) out.push_back(f);
    }
    return out;
  }
  SimJob dp_, tp_;
};

TEST_F(StragglerCascadeTest, LatenessMatchingASlowCommIsAVictim) {
  // D adds 0.5 ms per collective; global 3 is 0.5 ms late in C.
  for (int w = 0; w < 6; ++w) Window(true, kBase / 2);
  EXPECT_TRUE(OfClass(v1::FAULT_CLASS_NON_COMM_SLOW).empty())
      << OfClass(v1::FAULT_CLASS_NON_COMM_SLOW)[0].summary();
  const std::vector<v1::Fault> slow = OfClass(v1::FAULT_CLASS_COMM_SLOW);
  ASSERT_EQ(slow.size(), 1u);
  bool consequence = false;
  for (const v1::Evidence& e : slow[0].evidence()) {
    if (e.comm_hash() == 0xC1 && e.values().count("straggler_lateness_ns")) {
      consequence = true;
      EXPECT_NEAR(e.values().at("straggler_lateness_ns"), kBase / 2,
                  kBase / 10);
      EXPECT_THAT(e.text(), ::testing::HasSubstr("a victim"));
    }
  }
  EXPECT_TRUE(consequence) << slow[0].DebugString();
}

TEST_F(StragglerCascadeTest, LatenessFarBeyondTheSlowdownIsAStraggler) {
  // 4 ms late: far more than the 0.5 ms D adds; a straggler of its own.
  for (int w = 0; w < 6; ++w) Window(true, 4 * kBase);
  const std::vector<v1::Fault> s = OfClass(v1::FAULT_CLASS_NON_COMM_SLOW);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(SuspectGlobals(s[0]), std::set<int32_t>{3});
}

// A slow GPU (global 3) makes its node-mate (global 2) wait in their TP
// all-reduce T, so global 2 arrives late to its DP all-reduce D by the same
// time: one straggler fault (global 3) with global 2 as its victim, not a
// second straggler.
class NodeMateTest : public EngineTest {
 protected:
  // D: globals 0, 1 (node0) and 2 (node1); T: globals 2, 3 (node1).
  NodeMateTest() : dp_(0xD2, 3, 2, "job1", 0), tp_(0xC2, 2, 2, "job1", 2) {}
  void SetUp() override {
    EngineTest::SetUp();
    dp_.Register(engine_.get());
    tp_.Register(engine_.get());
    for (int w = 0; w < 4; ++w) Window(0, 0);
  }
  // One window of 10 steps: T, then D. Global 3 is `late_ns` late to T;
  // global 2 is `mate_late_ns` late to D.
  void Window(uint64_t late_ns, uint64_t mate_late_ns) {
    for (int i = 0; i < 10; ++i, ++seq_) {
      const std::vector<uint64_t> t = JitteredDurations(2, kBase, seq_);
      for (int32_t r = 0; r < 2; ++r) {
        const uint64_t dur = r == 1 ? t[r] : t[r] + late_ns;
        ASSERT_TRUE(
            engine_->AddSummary(tp_.HostOf(r), tp_.Summary(r, seq_, dur)).ok());
      }
      const std::vector<uint64_t> d = JitteredDurations(3, kBase, seq_);
      for (int32_t r = 0; r < 3; ++r) {
        const uint64_t dur = r == 2 ? d[r] : d[r] + mate_late_ns;
        ASSERT_TRUE(
            engine_->AddSummary(dp_.HostOf(r), dp_.Summary(r, seq_, dur)).ok());
      }
    }
    Cycle(absl::Seconds(1));
  }
  std::vector<v1::Fault> Stragglers() const {
    std::vector<v1::Fault> out;
    for (const v1::Fault& f : Latest()) {
      if (f.fault_class() == v1::FAULT_CLASS_NON_COMM_SLOW) out.push_back(f);
    }
    return out;
  }
  SimJob dp_, tp_;
};

TEST_F(NodeMateTest, ANodeMateWaitingForTheStragglerIsItsVictim) {
  for (int w = 0; w < 6; ++w) Window(kBase / 2, kBase / 2);
  const std::vector<v1::Fault> s = Stragglers();
  ASSERT_EQ(s.size(), 1u) << s[0].summary() << " / " << s.back().summary();
  EXPECT_EQ(SuspectGlobals(s[0]), std::set<int32_t>{3});
  bool victim = false;
  for (const v1::Evidence& e : s[0].evidence()) {
    if (e.comm_hash() == 0xD2 && e.values().count("straggler_lateness_ns")) {
      victim = true;
      EXPECT_THAT(e.text(), ::testing::HasSubstr("a victim"));
    }
  }
  EXPECT_TRUE(victim) << s[0].DebugString();
}

TEST_F(NodeMateTest, LatenessFarBeyondTheWaitIsAStragglerOfItsOwn) {
  // Global 2 is 4 ms late to D while it waits 0.5 ms in T: slow itself.
  for (int w = 0; w < 6; ++w) Window(kBase / 2, 4 * kBase);
  std::set<int32_t> suspects;
  for (const v1::Fault& f : Stragglers()) {
    for (int32_t g : SuspectGlobals(f)) suspects.insert(g);
  }
  EXPECT_EQ(suspects, (std::set<int32_t>{2, 3}));
}

// Second order (a pipeline layout): global 5 is slow in T {4, 5}; global 4
// waits there and is late in D {2, 3, 4}; global 2 waits in D and is late
// in P {1, 2}. Both are victims of global 5's fault.
class VictimChainTest : public EngineTest {
 protected:
  VictimChainTest()
      : t_(0xC3, 2, 2, "job1", 4),
        d_(0xD3, 3, 2, "job1", 2),
        p_(0xB3, 2, 2, "job1", 1) {}
  void SetUp() override {
    EngineTest::SetUp();
    for (SimJob* j : {&t_, &d_, &p_}) j->Register(engine_.get());
    for (int w = 0; w < 4; ++w) Window(0);
  }
  // In each comm one member arrives `late_ns` late: T's global 5, D's
  // global 4, P's global 2 (the others' durations are longer by that).
  void Window(uint64_t late_ns) {
    for (int i = 0; i < 10; ++i, ++seq_) {
      Feed(t_, 2, 1, late_ns);
      Feed(d_, 3, 2, late_ns);
      Feed(p_, 2, 1, late_ns);
    }
    Cycle(absl::Seconds(1));
  }
  void Feed(const SimJob& j, int32_t n, int32_t late_rank, uint64_t late_ns) {
    const std::vector<uint64_t> d = JitteredDurations(n, kBase, seq_);
    for (int32_t r = 0; r < n; ++r) {
      const uint64_t dur = r == late_rank ? d[r] : d[r] + late_ns;
      ASSERT_TRUE(
          engine_->AddSummary(j.HostOf(r), j.Summary(r, seq_, dur)).ok());
    }
  }
  SimJob t_, d_, p_;
};

TEST_F(VictimChainTest, AVictimsVictimFoldsIntoTheSameRoot) {
  for (int w = 0; w < 6; ++w) Window(kBase / 2);
  std::vector<v1::Fault> s;
  for (const v1::Fault& f : Latest()) {
    if (f.fault_class() == v1::FAULT_CLASS_NON_COMM_SLOW) s.push_back(f);
  }
  ASSERT_EQ(s.size(), 1u) << s[0].summary() << " / " << s.back().summary();
  EXPECT_EQ(SuspectGlobals(s[0]), std::set<int32_t>{5});
  std::set<uint64_t> folded;
  for (const v1::Evidence& e : s[0].evidence()) {
    if (e.values().count("straggler_lateness_ns")) folded.insert(e.comm_hash());
  }
  EXPECT_EQ(folded, (std::set<uint64_t>{0xD3, 0xB3}));
}

// A chain through a slow communicator (the simulator's concurrent case):
// D (globals 0..3) is slow; global 3 is late in C (globals 2..5) by the
// time D adds, a victim of D; global 5 waits in C for it and so is late
// in E (globals 5..7) by as much. Global 5 is not in D: only the
// remembered C straggler connects it, so it must fold under D's fault.
class SlowCommChainTest : public EngineTest {
 protected:
  SlowCommChainTest()
      : d_(0xD3, 4, 2, "job1", 0),
        c_(0xC3, 4, 2, "job1", 2),
        e_(0xE3, 3, 2, "job1", 5) {}
  void SetUp() override {
    EngineTest::SetUp();
    d_.Register(engine_.get());
    c_.Register(engine_.get());
    e_.Register(engine_.get());
    for (int w = 0; w < 4; ++w) Window(false);
  }
  // One window of 10 steps. `slow`: D's link 1 -> 2 (node0 -> node1) at a
  // fifth of the speed and its collectives 1.5x; global 3 half a
  // collective late in C; global 5 as late in E.
  void Window(bool slow) {
    const uint64_t late = slow ? kBase / 2 : 0;
    for (int i = 0; i < 10; ++i, ++seq_) {
      const std::vector<uint64_t> d =
          JitteredDurations(4, slow ? kBase * 3 / 2 : kBase, seq_);
      for (int32_t r = 0; r < 4; ++r) {
        v1::CollectiveSummary s = d_.Summary(r, seq_, d[r]);
        d_.AddRingConnections(&s, slow && r == 1 ? kFast / 5 : kFast,
                              slow && r == 2 ? kFast / 5 : kFast);
        ASSERT_TRUE(engine_->AddSummary(d_.HostOf(r), s).ok());
      }
      const std::vector<uint64_t> c = JitteredDurations(4, kBase, seq_);
      for (int32_t r = 0; r < 4; ++r) {
        const uint64_t dur = r == 1 ? c[r] : c[r] + late;  // global 3
        ASSERT_TRUE(
            engine_->AddSummary(c_.HostOf(r), c_.Summary(r, seq_, dur)).ok());
      }
      const std::vector<uint64_t> e = JitteredDurations(3, kBase, seq_);
      for (int32_t r = 0; r < 3; ++r) {
        const uint64_t dur = r == 0 ? e[r] : e[r] + late;  // global 5
        ASSERT_TRUE(
            engine_->AddSummary(e_.HostOf(r), e_.Summary(r, seq_, dur)).ok());
      }
    }
    Cycle(absl::Seconds(1));
  }
  SimJob d_, c_, e_;
};

TEST_F(SlowCommChainTest, AWaitersLatenessFoldsThroughTheVictimStraggler) {
  for (int w = 0; w < 6; ++w) Window(true);
  std::vector<v1::Fault> slow;
  for (const v1::Fault& f : Latest()) {
    EXPECT_NE(f.fault_class(), v1::FAULT_CLASS_NON_COMM_SLOW) << f.summary();
    if (f.fault_class() == v1::FAULT_CLASS_COMM_SLOW) slow.push_back(f);
  }
  ASSERT_EQ(slow.size(), 1u);
  bool chain = false;
  for (const v1::Evidence& ev : slow[0].evidence()) {
    chain |= ev.comm_hash() == 0xE3 &&
             ev.text().find("a victim") != std::string::npos;
  }
  EXPECT_TRUE(chain) << slow[0].DebugString();
}

}  // namespace
}  // namespace pitstop::controller::testing
