// Which injected faults the job's traffic can show (src/sim/observability.h):
// one no connection crosses is "not observable", said with why, and scored
// neither found nor missed; one a ring crosses is still expected and found.
#include "src/sim/observability.h"

#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/sim/bench.h"
#include "src/sim/model.h"
#include "src/sim/report.h"
#include "src/sim/scenario.h"
#include "src/sim/score.h"
#include "tests/sim/dp_scenario.h"

namespace pitstop::sim {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kSecond = 1'000'000'000;

// 4 nodes x 1 GPU, one DP ring 0 -> 1 -> 2 -> 3 -> 0 (one rank per node,
// each on mlx5_0): node0's ring neighbours are node1 and node3.
Scenario Ring4() { return DpScenario(4, 1, 2); }

FaultSpec Link(FaultKind kind, int node, int peer, double at_s = 1) {
  FaultSpec f;
  f.kind = kind;
  f.at_s = at_s;
  f.node = node;
  f.peer_node = peer;
  f.factor = 4;
  return f;
}

FaultSpec Nic(int node, int nic) {
  FaultSpec f;
  f.kind = FaultKind::kSlowNic;
  f.at_s = 1;
  f.node = node;
  f.nic = nic;
  f.factor = 4;
  return f;
}

// COMM_SLOW on a node pair, first seen at `seen_s`.
ObservedFault SlowPair(const std::string& a, const std::string& b,
                       double seen_s) {
  ObservedFault o;
  o.fault.set_fault_id("F1");
  o.fault.set_fault_class(v1::FAULT_CLASS_COMM_SLOW);
  v1::Suspect* s = o.fault.add_suspects();
  s->set_level(v1::SUSPECT_LEVEL_LINK);
  s->set_host(a);
  s->set_peer_host(b);
  o.first_seen_ns = static_cast<int64_t>(seen_s * kSecond);
  return o;
}

TEST(ObservabilityTest, JobConnectionsAreEachMembersRingSuccessor) {
  auto plan = BuildPlan(Ring4());
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::vector<RingConnection> conns = JobConnections(*plan);
  ASSERT_EQ(conns.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(conns[i].src, i);
    EXPECT_EQ(conns[i].dst, (i + 1) % 4);
  }
}

// A slow link between two nodes that are neighbours in no ring is not
// observable (with the nodes the one does exchange data with) and is not
// scored; the link the ring crosses is expected and found, and the run
// passes on it alone.
TEST(ObservabilityTest, SlowLinkNoRingCrossesIsNotObservableNotAMiss) {
  Scenario s = Ring4();
  s.faults = {Link(FaultKind::kSlowLink, 0, 2),
              Link(FaultKind::kSlowLink, 0, 1)};
  auto plan = BuildPlan(s);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::string& why = plan->truths[0].not_observable;
  EXPECT_THAT(why, HasSubstr("no ring connection joins node0 and node2"));
  EXPECT_THAT(why, HasSubstr("only with node1, node3 (rings of dp0)"));
  EXPECT_EQ(plan->truths[1].not_observable, "");

  const RunScore score = ScoreRun(*plan, {SlowPair("node1", "node0", 2.5)});
  ASSERT_EQ(score.truths.size(), 2u);
  EXPECT_FALSE(score.truths[0].scored);
  EXPECT_FALSE(score.truths[0].detected);
  EXPECT_THAT(score.truths[0].note, HasSubstr("not observable"));
  EXPECT_TRUE(score.truths[1].scored);
  EXPECT_TRUE(score.truths[1].detected);
  EXPECT_TRUE(score.truths[1].localised);
  EXPECT_TRUE(score.false_faults.empty());
  EXPECT_TRUE(score.ok());
  // A fault pitstop raises on the pair nothing crosses is a false fault.
  const RunScore blamed = ScoreRun(*plan, {SlowPair("node0", "node2", 2.5)});
  EXPECT_EQ(blamed.false_faults.size(), 1u);
  EXPECT_FALSE(blamed.ok());
}

// The report says it, in text and in `-o json`: the unobservable link with
// its reason and unscored, the crossed one expected and found, PASS.
TEST(ObservabilityTest, TheReportSaysWhichFaultsAreNotObservableAndWhy) {
  Scenario s = Ring4();
  s.name = "unobservable-link";
  s.faults = {Link(FaultKind::kSlowLink, 0, 2),
              Link(FaultKind::kSlowLink, 0, 1)};
  RunResult r;
  auto plan = BuildPlan(s);
  ASSERT_TRUE(plan.ok()) << plan.status();
  r.plan = *std::move(plan);
  r.faults = {SlowPair("node0", "node1", 2.5)};
  r.score = ScoreRun(r.plan, r.faults);

  std::ostringstream text;
  PrintReport(r, ReportOptions{}, text);
  EXPECT_THAT(text.str(),
              HasSubstr("[not observable: no ring connection joins node0 and "
                        "node2"));
  EXPECT_THAT(text.str(), HasSubstr("slow_link: FOUND and localised (F1"));
  EXPECT_THAT(text.str(), Not(HasSubstr("MISSED")));
  EXPECT_THAT(text.str(), HasSubstr("verdict: PASS"));

  const nlohmann::json j = ReportJson(r, ReportOptions{});
  EXPECT_EQ(j["scenario"], "unobservable-link");
  EXPECT_EQ(j["verdict"], "PASS");
  ASSERT_EQ(j["injected"].size(), 2u);
  const nlohmann::json& unobs = j["injected"][0];
  EXPECT_EQ(unobs["state"], "not_observable");
  EXPECT_EQ(unobs["scored"], false);
  EXPECT_FALSE(unobs.contains("detected"));
  EXPECT_THAT(unobs["not_observable"].get<std::string>(),
              HasSubstr("node0's ranks exchange data only with node1, node3"));
  const nlohmann::json& crossed = j["injected"][1];
  EXPECT_EQ(crossed["state"], "expected");
  EXPECT_EQ(crossed["expected_class"], "COMM_SLOW");
  EXPECT_EQ(crossed["detected"], true);
  EXPECT_EQ(crossed["localised"], true);
  EXPECT_EQ(crossed["fault_id"], "F1");
  EXPECT_TRUE(j["false_faults"].empty());
}

// The benchmark's score: the unobservable injection is listed as such,
// never as a miss, and recall counts only what the job could show.
TEST(ObservabilityTest,
     TheBenchmarkScoresNotObservableAsNeitherFoundNorMissed) {
  Scenario s = Ring4();
  s.faults = {Link(FaultKind::kSlowLink, 0, 2),
              Link(FaultKind::kSlowLink, 0, 1)};
  auto plan = BuildPlan(s);
  ASSERT_TRUE(plan.ok()) << plan.status();
  RunResult r;
  r.plan = *std::move(plan);
  r.faults = {SlowPair("node0", "node1", 2.5)};
  r.score = ScoreRun(r.plan, r.faults);
  Scenario alone = Ring4();
  alone.faults = {Link(FaultKind::kSlowLink, 1, 3)};
  auto alone_plan = BuildPlan(alone);
  ASSERT_TRUE(alone_plan.ok()) << alone_plan.status();
  RunResult nothing;  // pitstop raised nothing: right, nothing crossed it
  nothing.plan = *std::move(alone_plan);
  nothing.score = ScoreRun(nothing.plan, nothing.faults);

  BenchTally tally;
  tally.Add(BenchCase{"two links 4x1", "4x1", s, "two links"}, r);
  tally.Add(BenchCase{"slow_link 4x1 (node1 -> node3)", "4x1", alone, ""},
            nothing);
  const std::string md = tally.Markdown(1);
  EXPECT_THAT(md, HasSubstr("| two links | 4x1 | 1 | 1/1 | 1/1 | 0 |"));
  EXPECT_THAT(md, HasSubstr("| slow_link | 4x1 | 1 | - | - | 0 |"));
  EXPECT_THAT(md, HasSubstr("**Recall**: 1/1 = 100.0% of injected faults "
                            "raised with the right class (2 more not "
                            "observable, not counted: listed below)"));
  EXPECT_THAT(md, HasSubstr("**Localisation**: 1/1 = 100.0%"));
  EXPECT_THAT(md, HasSubstr("Not observable (no traffic crossed them"));
  EXPECT_THAT(md, HasSubstr("- two links 4x1: injected slow_link at 1 s on "
                            "node0 <-> node2; no ring connection joins"));
  EXPECT_THAT(md, HasSubstr("- slow_link 4x1 (node1 -> node3): injected"));
  EXPECT_THAT(md, Not(HasSubstr("Misses")));
}

// docs/detection-quality.md: every case the benchmark draws is observable,
// so its tables are unchanged by the rule.
TEST(ObservabilityTest, EveryBenchmarkCaseIsObservable) {
  for (const BenchCase& c : BenchCases(/*quick=*/false)) {
    auto plan = BuildPlan(c.scenario);
    ASSERT_TRUE(plan.ok()) << c.label << ": " << plan.status();
    for (const FaultTruth& t : plan->truths) {
      EXPECT_EQ(t.not_observable, "") << c.label << ": " << t.Describe();
    }
  }
}

// A comm hang needs a connection sending from node to peer_node; the ring
// sends 0 -> 1 but never 1 -> 0 or 0 -> 2.
TEST(ObservabilityTest, CommHangOnAConnectionNoRingHasIsNotObservable) {
  Scenario s = Ring4();
  s.faults = {Link(FaultKind::kCommHang, 1, 0),
              Link(FaultKind::kCommHang, 0, 1)};
  auto plan = BuildPlan(s);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->truths[0].not_observable,
              HasSubstr("no ring connection sends from node1 to node0: "
                        "node1's ranks send across nodes only to node2"));
  EXPECT_EQ(plan->truths[1].not_observable, "");
  EXPECT_TRUE(plan->truths[1].happened);
  const RunScore score = ScoreRun(*plan, {});
  EXPECT_FALSE(score.truths[0].scored);
  EXPECT_TRUE(score.truths[1].scored);
}

TEST(ObservabilityTest, NicsNoConnectionBetweenNodesUsesAreNotObservable) {
  Scenario s = Ring4();
  s.faults = {Nic(1, 1), Nic(1, 0)};  // every rank uses mlx5_0
  auto plan = BuildPlan(s);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->truths[0].not_observable,
              HasSubstr("node1's mlx5_1: no GPU of node1 has it as its rail "
                        "NIC"));
  EXPECT_EQ(plan->truths[1].not_observable, "");

  // TP inside each node only: mlx5_0 of node1 is rank 2's, whose ring
  // (tp1) never leaves the node.
  Scenario tp = Ring4();
  tp.nodes = 2;
  tp.gpus_per_node = 2;
  tp.tp = 2;
  tp.dp = 2;
  tp.step = {PhaseSpec{true, 100, Group::kTp, "", 0},
             PhaseSpec{false, 0, Group::kTp, "AllReduce", 16 << 20}};
  tp.eval_step = tp.step;
  tp.faults = {Nic(1, 0)};
  auto tp_plan = BuildPlan(tp);
  ASSERT_TRUE(tp_plan.ok()) << tp_plan.status();
  EXPECT_THAT(tp_plan->truths[0].not_observable,
              HasSubstr("rank 2, whose rail NIC it is, reach no other node "
                        "(tp1 stay inside the node)"));
}

// A link the ring crosses but only after the job stopped: the collective
// that meets it never moves data (an application desync at the same time),
// so nothing can show it. Before, the stuck collective's connections
// counted as crossing it and the link was expected, then scored missed.
TEST(ObservabilityTest, SlowLinkAfterTheJobStoppedIsNotObservable) {
  Scenario s = Ring4();
  FaultSpec desync;
  desync.kind = FaultKind::kMismatch;
  desync.at_s = 1;
  desync.rank = 2;
  s.faults = {desync, Link(FaultKind::kSlowLink, 0, 1)};
  auto plan = BuildPlan(s);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(plan->truths[0].happened);
  EXPECT_EQ(plan->truths[0].not_observable, "");
  EXPECT_THAT(plan->truths[1].not_observable,
              HasSubstr("the job starts no transfer after t="));
  EXPECT_THAT(plan->truths[1].not_observable, HasSubstr("before it begins"));
  EXPECT_FALSE(ScoreRun(*plan, {}).truths[1].scored);

  // One that begins after the run.
  Scenario late = Ring4();
  late.faults = {Link(FaultKind::kSlowLink, 0, 1, 10)};
  auto late_plan = BuildPlan(late);
  ASSERT_TRUE(late_plan.ok()) << late_plan.status();
  EXPECT_THAT(late_plan->truths[0].not_observable,
              HasSubstr("it starts at 10 s, after the run's 3 s"));
}

// Bad input is still refused with a clear error, before any plan: a link
// or NIC that does not exist.
TEST(ObservabilityTest, FaultsOnLinksOrNodesThatDoNotExistAreErrors) {
  auto peer = ParseScenario(
      "cluster: {nodes: 2, gpus_per_node: 2}\nfaults:\n"
      "  - {kind: slow_link, at_s: 1, node: 0, peer_node: 5, factor: 2}\n",
      "p.yaml");
  ASSERT_FALSE(peer.ok());
  EXPECT_THAT(peer.status().message(), HasSubstr("p.yaml:3"));
  EXPECT_THAT(peer.status().message(),
              HasSubstr("peer_node must be another node in [0, 2)"));
  auto same = ParseScenario(
      "cluster: {nodes: 2, gpus_per_node: 2}\nfaults:\n"
      "  - {kind: comm_hang, at_s: 1, node: 1, peer_node: 1}\n",
      "q.yaml");
  ASSERT_FALSE(same.ok());
  EXPECT_THAT(same.status().message(), HasSubstr("q.yaml:3"));
  auto nic = ParseScenario(
      "cluster: {nodes: 2, gpus_per_node: 2, nics_per_node: 2}\nfaults:\n"
      "  - {kind: slow_nic, at_s: 1, node: 1, nic: 2, factor: 2}\n",
      "n.yaml");
  ASSERT_FALSE(nic.ok());
  EXPECT_THAT(nic.status().message(), HasSubstr("n.yaml:3"));
  EXPECT_THAT(nic.status().message(), HasSubstr("nic must be in [0, 2)"));
}

}  // namespace
}  // namespace pitstop::sim
