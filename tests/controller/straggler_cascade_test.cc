// A rank late to one communicator because another communicator it is in
// got slow (cascade without a global synchronisation) is a victim of the
// comm-slow fault, not a straggler.
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

}  // namespace
}  // namespace pitstop::controller::testing
