// Scoring of simulator runs (src/sim/score.h): which observed faults an
// injection explains, and which are false.
#include "src/sim/score.h"

#include "gtest/gtest.h"

namespace pitstop::sim {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

// A slow GPU injected at 10 s on rank 5 (node1 GPU 1).
Plan SlowGpuPlan() {
  Plan plan;
  FaultTruth t;
  t.spec.kind = FaultKind::kSlowGpu;
  t.onset_ns = 10 * kSecond;
  t.expected_class = "NON_COMM_SLOW";
  t.rank = 5;
  t.host = "node1";
  t.gpu = 1;
  plan.truths.push_back(t);
  return plan;
}

ObservedFault Observed(const std::string& id, v1::FaultClass cls,
                       std::vector<int32_t> suspects, int64_t seen_ns) {
  ObservedFault o;
  o.fault.set_fault_id(id);
  o.fault.set_fault_class(cls);
  for (int32_t r : suspects) {
    v1::Suspect* s = o.fault.add_suspects();
    s->set_global_rank(r);
    s->set_host(r / 4 == 1 ? "node1" : "node0");
    s->set_gpu_index(r % 4);
  }
  o.first_seen_ns = seen_ns;
  return o;
}

TEST(ScoreTest, RightClassAndCulpritIsDetectedAndLocalised) {
  Plan plan = SlowGpuPlan();
  std::vector<ObservedFault> faults = {
      Observed("F1", v1::FAULT_CLASS_NON_COMM_SLOW, {5}, 13 * kSecond)};
  RunScore score = ScoreRun(plan, faults);
  ASSERT_EQ(score.truths.size(), 1u);
  EXPECT_TRUE(score.truths[0].detected);
  EXPECT_TRUE(score.truths[0].localised);
  EXPECT_EQ(score.truths[0].latency_ns, 3 * kSecond);
  EXPECT_TRUE(score.false_faults.empty());
  EXPECT_TRUE(score.ok());
}

// The right class blaming the wrong rank first is a false fault, even
// though the culprit is named further down its list.
TEST(ScoreTest, RightClassWrongFirstSuspectIsFalse) {
  Plan plan = SlowGpuPlan();
  std::vector<ObservedFault> faults = {
      Observed("F1", v1::FAULT_CLASS_NON_COMM_SLOW, {4, 5}, 13 * kSecond)};
  RunScore score = ScoreRun(plan, faults);
  EXPECT_TRUE(score.truths[0].detected);
  EXPECT_FALSE(score.truths[0].localised);
  ASSERT_EQ(score.false_faults.size(), 1u);
  EXPECT_EQ(score.false_faults[0]->fault.fault_id(), "F1");
  EXPECT_FALSE(score.ok());
}

TEST(ScoreTest, OtherClassBlamingTheCulpritFirstIsExplained) {
  Plan plan = SlowGpuPlan();
  std::vector<ObservedFault> faults = {
      Observed("F1", v1::FAULT_CLASS_NON_COMM_SLOW, {5}, 12 * kSecond),
      Observed("F2", v1::FAULT_CLASS_COMM_SLOW, {5}, 14 * kSecond),
      Observed("F3", v1::FAULT_CLASS_COMM_SLOW, {2}, 14 * kSecond)};
  RunScore score = ScoreRun(plan, faults);
  ASSERT_EQ(score.false_faults.size(), 1u);
  EXPECT_EQ(score.false_faults[0]->fault.fault_id(), "F3");
}

TEST(ScoreTest, SuspectlessFaultOfTheExpectedClassIsNotFalse) {
  Plan plan = SlowGpuPlan();
  std::vector<ObservedFault> faults = {
      Observed("F1", v1::FAULT_CLASS_NON_COMM_SLOW, {}, 12 * kSecond)};
  RunScore score = ScoreRun(plan, faults);
  EXPECT_TRUE(score.truths[0].detected);
  EXPECT_FALSE(score.truths[0].localised);
  EXPECT_TRUE(score.false_faults.empty());
}

TEST(ScoreTest, FaultsBeforeTheOnsetAreFalse) {
  Plan plan = SlowGpuPlan();
  std::vector<ObservedFault> faults = {
      Observed("F1", v1::FAULT_CLASS_NON_COMM_SLOW, {5}, 2 * kSecond)};
  RunScore score = ScoreRun(plan, faults);
  EXPECT_FALSE(score.truths[0].detected);
  ASSERT_EQ(score.false_faults.size(), 1u);
}

}  // namespace
}  // namespace pitstop::sim
