#include "src/sim/model.h"

#include <algorithm>
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "src/sim/bench.h"
#include "src/sim/scenario.h"
#include "tests/sim/dp_scenario.h"

namespace pitstop::sim {
namespace {

Scenario Base() { return DpScenario(2, 2, 2); }

// Send connection throughput (bytes / transfer time) of every op of `rank`
// that starts after `after_ns`, keyed by the receiving global rank.
std::map<int, double> SendThroughput(const Plan& p, int rank, int64_t from_ns,
                                     int64_t to_ns) {
  std::map<int, double> out;
  for (const OpPlan& op : p.ranks[rank].ops) {
    if (op.api_ns < from_ns || op.api_ns >= to_ns) continue;
    for (const ConnPlan& c : op.conns) {
      if (!c.is_send) continue;
      out[c.peer_global] = c.bytes / double(c.stop_ns - c.progress_ns);
    }
  }
  return out;
}

TEST(ModelTest, RanksOfACollectiveEndTogetherAndTheLastWaitsLeast) {
  Scenario s = Base();
  s.compute_jitter = 0.05;
  auto plan = BuildPlan(s);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->comms.size(), 1u);
  const size_t n_ops = plan->ranks[0].ops.size();
  ASSERT_GT(n_ops, 10u);
  for (size_t k = 0; k < n_ops; ++k) {
    int64_t end = plan->ranks[0].ops[k].end_ns();
    int64_t latest_api = 0, shortest = INT64_MAX;
    int latest = -1, shortest_rank = -2;
    for (int r = 0; r < 4; ++r) {
      const OpPlan& op = plan->ranks[r].ops[k];
      EXPECT_EQ(op.end_ns(), end);
      EXPECT_EQ(op.seq, k);
      if (op.api_ns > latest_api) latest_api = op.api_ns, latest = r;
      if (end - op.kernel_start_ns < shortest) {
        shortest = end - op.kernel_start_ns, shortest_rank = r;
      }
    }
    EXPECT_EQ(latest, shortest_rank);
  }
}

TEST(ModelTest, SlowNicSlowsOnlyTheConnectionsThatCrossIt) {
  Scenario s = Base();
  FaultSpec f;
  f.kind = FaultKind::kSlowNic;
  f.at_s = 1;
  f.node = 1;
  f.nic = 0;  // used by rank 2 (node1 GPU0)
  f.factor = 4;
  s.faults = {f};
  auto plan = BuildPlan(s);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Ring 0 -> 1 -> 2 -> 3 -> 0: 1 -> 2 crosses into node1 on mlx5_0 (slow);
  // 3 -> 0 crosses on mlx5_1 at both ends (unaffected).
  constexpr int64_t kOnset = 1'000'000'000;
  const auto before = SendThroughput(*plan, 1, 0, kOnset);
  const auto after1 = SendThroughput(*plan, 1, kOnset, kNever);
  const auto after3 = SendThroughput(*plan, 3, kOnset, kNever);
  const auto before3 = SendThroughput(*plan, 3, 0, kOnset);
  ASSERT_EQ(after1.count(2), 1u);
  EXPECT_NEAR(after1.at(2) * 4, before.at(2), before.at(2) * 0.05);
  // Rank 3 -> 0 uses mlx5_1 on both ends: unaffected.
  EXPECT_NEAR(after3.at(0), before3.at(0), before3.at(0) * 0.01);
  ASSERT_EQ(plan->truths.size(), 1u);
  EXPECT_EQ(plan->truths[0].expected_class, "COMM_SLOW");
  EXPECT_EQ(plan->truths[0].host, "node1");
  EXPECT_EQ(plan->truths[0].nic, "mlx5_0");
}

TEST(ModelTest, NonCommHangBlocksPeersInsideTheNextCollective) {
  Scenario s = Base();
  FaultSpec f;
  f.kind = FaultKind::kNonCommHang;
  f.at_s = 1;
  f.rank = 3;
  s.faults = {f};
  auto plan = BuildPlan(s);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const OpPlan& last0 = plan->ranks[0].ops.back();
  EXPECT_EQ(last0.end_ns(), kNever);
  EXPECT_LT(plan->ranks[3].ops.size(), plan->ranks[0].ops.size());
  EXPECT_NE(plan->ranks[3].ops.back().end_ns(), kNever);
  EXPECT_TRUE(plan->truths[0].happened);
  EXPECT_GE(plan->truths[0].onset_ns, 1'000'000'000);
}

TEST(ModelTest, MismatchGivesOneRankASmallerCollectiveThatNobodyCompletes) {
  Scenario s = Base();
  FaultSpec f;
  f.kind = FaultKind::kMismatch;
  f.at_s = 1;
  f.rank = 2;
  s.faults = {f};
  auto plan = BuildPlan(s);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const OpPlan& odd = plan->ranks[2].ops.back();
  const OpPlan& other = plan->ranks[0].ops.back();
  EXPECT_EQ(odd.seq, other.seq);
  EXPECT_EQ(odd.bytes * 2, other.bytes);
  EXPECT_EQ(odd.end_ns(), kNever);
  EXPECT_EQ(other.end_ns(), kNever);
  EXPECT_EQ(plan->ranks[2].ops.size(), plan->ranks[0].ops.size());
  EXPECT_TRUE(plan->truths[0].happened);
  EXPECT_EQ(plan->truths[0].expected_class, "MISMATCH");
  EXPECT_EQ(plan->truths[0].rank, 2);
}

TEST(ModelTest, CommHangStallsOneConnectionOnly) {
  Scenario s = Base();
  FaultSpec f;
  f.kind = FaultKind::kCommHang;
  f.at_s = 1;
  f.node = 0;
  f.peer_node = 1;
  s.faults = {f};
  auto plan = BuildPlan(s);
  ASSERT_TRUE(plan.ok()) << plan.status();
  int stalled = 0;
  for (const RankPlan& r : plan->ranks) {
    const OpPlan& op = r.ops.back();
    EXPECT_EQ(op.end_ns(), kNever);
    for (const ConnPlan& c : op.conns) stalled += c.stop_ns == kNever;
  }
  EXPECT_EQ(stalled, 2);  // the send at rank 1 and the recv at rank 2
  EXPECT_EQ(plan->truths[0].rank, 1);
}

TEST(ModelTest, SameScenarioSamePlan) {
  Scenario s = Base();
  s.compute_jitter = 0.1;
  auto a = BuildPlan(s);
  auto b = BuildPlan(s);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->ranks[2].ops.size(), b->ranks[2].ops.size());
  for (size_t i = 0; i < a->ranks[2].ops.size(); ++i) {
    EXPECT_EQ(a->ranks[2].ops[i].api_ns, b->ranks[2].ops[i].api_ns);
  }
}

// The built-in scenarios demonstrate detection: every link or NIC fault
// they inject is crossed by some connection (else it would score nothing).
TEST(ScenarioTest, BuiltinsInjectOnlyObservableFaults) {
  for (const std::string& name : BuiltinScenarioNames()) {
    auto s = BuiltinScenario(name);
    ASSERT_TRUE(s.ok()) << name << ": " << s.status();
    if (s->duration_s > 600) continue;  // the soak: minutes of planning
    auto plan = BuildPlan(*s);
    ASSERT_TRUE(plan.ok()) << name << ": " << plan.status();
    for (const FaultTruth& t : plan->truths) {
      EXPECT_EQ(t.not_observable, "") << name << ": " << t.Describe();
    }
  }
}

TEST(ScenarioTest, BuiltinsParseAndRoundTrip) {
  for (const std::string& name : BuiltinScenarioNames()) {
    auto s = BuiltinScenario(name);
    ASSERT_TRUE(s.ok()) << name << ": " << s.status();
    auto again = ParseScenario(ScenarioToYaml(*s), "roundtrip");
    ASSERT_TRUE(again.ok()) << name << ": " << again.status();
    EXPECT_EQ(again->faults.size(), s->faults.size());
    EXPECT_EQ(again->step.size(), s->step.size());
    EXPECT_EQ(again->world_size(), s->world_size());
    EXPECT_EQ(again->fabric, s->fabric);
    EXPECT_EQ(again->link_marks.size(), s->link_marks.size());
    EXPECT_EQ(again->measure_nics, s->measure_nics);
  }
  // ci-replan carries a live flow plan with operator marks.
  auto r = BuiltinScenario("ci-replan");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->fabric.empty());
  ASSERT_EQ(r->link_marks.size(), 2u);
  EXPECT_EQ(r->link_marks[0].link, "spine0");
  EXPECT_FALSE(r->measure_nics);
  // Marks without a fabric are refused.
  auto bad = ParseScenario(
      "name: x\nplanning:\n  marks: [{at_s: 1, link: spine0}]\n", "p.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("planning.fabric"), std::string::npos);
}

TEST(ScenarioTest, ALongerSoakRepeatsItsDeceptiveNormals) {
  auto soak = BuiltinScenario("soak");
  ASSERT_TRUE(soak.ok()) << soak.status();
  const size_t once = soak->faults.size();
  const double period = soak->duration_s;
  ASSERT_GT(once, 0u);
  EXPECT_EQ(ExtendScenario(&*soak, 6 * period), 6);
  EXPECT_EQ(soak->duration_s, 6 * period);
  ASSERT_EQ(soak->faults.size(), 6 * once);
  // The last copy is the first shifted by five periods, all inside the run.
  for (size_t i = 0; i < once; ++i) {
    EXPECT_EQ(soak->faults[5 * once + i].kind, soak->faults[i].kind);
    EXPECT_DOUBLE_EQ(soak->faults[5 * once + i].at_s,
                     soak->faults[i].at_s + 5 * period);
  }
  for (const FaultSpec& f : soak->faults) EXPECT_LT(f.at_s, 6 * period);
  EXPECT_TRUE(ValidateScenario(*soak).ok());
  // A scenario with a real fault keeps it once.
  auto straggler = BuiltinScenario("straggler");
  ASSERT_TRUE(straggler.ok()) << straggler.status();
  const size_t faults = straggler->faults.size();
  EXPECT_EQ(ExtendScenario(&*straggler, 10 * straggler->duration_s), 1);
  EXPECT_EQ(straggler->faults.size(), faults);
}

// The benchmark's concurrent and subtle cases (issue #12) are there and
// valid: two faults on two nodes at once, a half-bandwidth node pair, noisy
// compute, a checkpoint longer than the hang timeout, a pipeline layout.
TEST(BenchTest, CasesAreValidAndIncludeConcurrentAndSubtleFaults) {
  for (bool quick : {true, false}) {
    std::map<std::string, int> rows;
    for (const BenchCase& c : BenchCases(quick)) {
      EXPECT_TRUE(ValidateScenario(c.scenario).ok())
          << c.label << ": " << ValidateScenario(c.scenario);
      if (c.row.empty()) continue;
      ++rows[c.row];
      if (c.row == "concurrent") {
        ASSERT_EQ(c.scenario.faults.size(), 2u) << c.label;
        const FaultSpec& gpu = c.scenario.faults[0];
        const FaultSpec& nic = c.scenario.faults[1];
        EXPECT_EQ(gpu.kind, FaultKind::kSlowGpu);
        EXPECT_EQ(nic.kind, FaultKind::kSlowNic);
        EXPECT_NE(gpu.rank / c.scenario.gpus_per_node, nic.node) << c.label;
      } else if (c.row == "slow_link /2") {
        ASSERT_EQ(c.scenario.faults.size(), 1u);
        EXPECT_EQ(c.scenario.faults[0].factor, 2);
      } else if (c.row == "checkpoint 12 s") {
        ASSERT_EQ(c.scenario.faults.size(), 1u);
        EXPECT_EQ(c.scenario.faults[0].kind, FaultKind::kCheckpointPause);
        EXPECT_GT(c.scenario.faults[0].pause_s, 5);  // the hang floor
      } else if (c.row == "pipeline layout") {
        EXPECT_EQ(c.scenario.pp, 2);
      }
    }
    const int sizes = quick ? 1 : 2;
    EXPECT_EQ(rows["concurrent"], sizes);
    EXPECT_EQ(rows["slow_link /2"], sizes);
    EXPECT_EQ(rows["noisy compute"], sizes);
    EXPECT_EQ(rows["slow_gpu, noisy compute"], sizes);
    EXPECT_EQ(rows["checkpoint 12 s"], sizes);
    EXPECT_EQ(rows["pipeline layout"], 1);
  }
}

TEST(ScenarioTest, ErrorsNameFileLineAndKey) {
  auto s =
      ParseScenario("name: x\ncluster:\n  nodes: 2\n  gpus: 4\n", "f.yaml");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("f.yaml:4"), std::string::npos)
      << s.status();
  EXPECT_NE(s.status().message().find("gpus"), std::string::npos);
  auto bad_rank = ParseScenario(
      "faults:\n  - {kind: slow_gpu, rank: 99, factor: 2}\n", "g.yaml");
  ASSERT_FALSE(bad_rank.ok());
  EXPECT_NE(bad_rank.status().message().find("rank"), std::string::npos);
}

}  // namespace
}  // namespace pitstop::sim
