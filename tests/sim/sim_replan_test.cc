// End to end, the live flow plan (docs/planning.md): the ci-replan scenario
// runs 8 emulated ranks on 4 agents and a controller started with --fabric;
// node0 <-> node1 slows mid-run. The controller must plan the job's flows
// once the connections are learned, re-plan when the COMM_SLOW verdict
// names the slow connection (an epoch whose flows crossed its path), and
// every agent must ack the newest epoch it was sent (it acks after writing
// its tuner table, which the test reads back); after the operator marks
// both spines degraded, each table caps the job's communicator.
#include <iostream>
#include <string>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "src/sim/runner.h"
#include "src/sim/scenario.h"
#include "tests/c4p/shared_topology.h"

namespace pitstop::sim {
namespace {

// Progress on stderr, and a drain long enough for the last directive's ack
// (it comes with an agent's batch).
RunOptions ReplanRunOptions() {
  RunOptions opts;
  opts.progress = [](const std::string& line) { std::cerr << line << "\n"; };
  opts.progress_period_s = 5;
  opts.drain_s = 3;
  return opts;
}

TEST(SimReplan, LinkDegradesAndTheControllerReplansLive) {
  auto s = BuiltinScenario("ci-replan");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_FALSE(s->fabric.empty());
  auto r = RunScenario(*s, ReplanRunOptions());
  ASSERT_TRUE(r.ok()) << r.status();
  for (const std::string& e : (*r)->rank_errors) ADD_FAILURE() << e;
  const RunResult& run = **r;

  // The slow link was found (the trigger of the re-plan).
  bool comm_slow = false;
  for (const ObservedFault& f : run.faults) {
    comm_slow |= f.fault.fault_class() == v1::FAULT_CLASS_COMM_SLOW;
  }
  EXPECT_TRUE(comm_slow) << "no COMM_SLOW verdict";

  // A first plan from the learned connections, then a re-plan after the
  // onset that moved flows.
  ASSERT_FALSE(run.plan_epochs.empty()) << "the controller made no plan";
  EXPECT_GT(run.plan_epochs.front().network_flows, 0u);
  // After the onset, a re-plan triggered by the verdict: the marked path
  // was crossed by the connection's flow, and the flow moved off the
  // suspect links (the other spine is healthy until the operator's marks).
  const double onset_s = s->faults[0].at_s;
  bool replanned_after_onset = false;
  uint32_t moved_off = 0;
  for (const PlanEpoch& e : run.plan_epochs) {
    if (e.at_s >= onset_s && e.at_s < s->link_marks[0].at_s &&
        e.crossing_flows > 0) {
      replanned_after_onset = true;
      moved_off += e.moved_off_degraded;
      std::cerr << "re-plan after the onset: epoch " << e.epoch << ", "
                << e.crossing_flows << " crossing, " << e.moved_flows
                << " moved, " << e.moved_off_degraded
                << " off every degraded link\n";
    }
  }
  EXPECT_GE(run.final_plan.epoch(), 3u);
  EXPECT_TRUE(replanned_after_onset) << "no re-plan between onset and marks";
  EXPECT_GE(moved_off, 1u)
      << "the verdict's re-plan moved no flow off the suspect links";

  // Every host of the job got and acked the newest epoch sent to it; its
  // table exists (written before the ack) and names no other epoch.
  ASSERT_EQ(run.final_plan.hosts_size(), s->nodes);
  for (const v1::FlowPlanHost& h : run.final_plan.hosts()) {
    EXPECT_GT(h.epoch_sent(), 0u) << h.host();
    EXPECT_EQ(h.epoch_acked(), h.epoch_sent()) << h.host();
  }
  // After the operator marked both spines, every inter-node path is
  // degraded: each agent's table caps the job's communicator.
  bool marked_epoch = false;
  for (const PlanEpoch& e : run.plan_epochs) {
    marked_epoch |= e.at_s >= s->link_marks[0].at_s && e.crossing_flows > 0;
  }
  EXPECT_TRUE(marked_epoch) << "no re-plan after the operator's marks";
  ASSERT_EQ(run.tuner_tables.size(), static_cast<size_t>(s->nodes));
  for (const TunerTableView& t : run.tuner_tables) {
    EXPECT_EQ(t.error, "") << t.host;
    EXPECT_FALSE(t.entries.empty()) << t.host;
    for (const tuner::Steering& e : t.entries) {
      EXPECT_LE(e.plan_epoch, run.final_plan.epoch()) << t.host;
      EXPECT_GT(e.max_channels, 0) << t.host;
    }
  }
}

// The live planner on a fabric read from each format (issue 32): a
// healthy 4-node job whose ring crosses the fabric's switches, an operator
// marks a switch (or switch link) degraded mid-run. The first plan carries
// the connections' bytes (no deep profiling runs in a healthy job: their
// size comes from the collective, flow_inputs.h), so the re-plan moves
// flows off the degraded links: the bytes planned on them drop.
struct FabricCase {
  const char* name;
  const char* file;  // in ../shared/data/topology
  int gpus_per_node;
  const char* mark;  // `pitstopctl links --degrade` spec
};

void PrintTo(const FabricCase& c, std::ostream* os) { *os << c.name; }

class SimReplanOnFabric : public ::testing::TestWithParam<FabricCase> {};

constexpr double kMarkAtS = 7;

std::string ScenarioYaml(const FabricCase& c, const std::string& fabric) {
  return absl::StrFormat(
      R"(name: replan-%s
seed: 5
duration_s: 11
cluster: {nodes: 4, gpus_per_node: %d, nics_per_node: %d}
planning:
  fabric: "%s"
  measure_nics: false
  marks: [{at_s: %g, link: "%s", share: 0.25}]
job:
  tp: 1
  channels: 1
  steps_per_proxy_op: 2
  step:
    - compute_ms: 100
    - collective: {group: dp, func: AllReduce, bytes: 32MiB}
)",
      c.name, c.gpus_per_node, c.gpus_per_node, fabric, kMarkAtS, c.mark);
}

TEST_P(SimReplanOnFabric, OperatorMarkMovesFlowsOffTheDegradedLinks) {
  const FabricCase& c = GetParam();
  const std::string fabric = c4p::SharedTopology(c.file).string();
  if (c4p::SharedTopologyText(c.file).empty()) {
    GTEST_SKIP() << "../shared/data/topology is absent (no " << c.file << ")";
  }
  auto s = ParseScenario(ScenarioYaml(c, fabric), c.name);
  ASSERT_TRUE(s.ok()) << s.status();
  auto r = RunScenario(*s, ReplanRunOptions());
  ASSERT_TRUE(r.ok()) << r.status();
  for (const std::string& e : (*r)->rank_errors) ADD_FAILURE() << e;
  const RunResult& run = **r;

  // A plan before the mark, with every network flow sized.
  const PlanEpoch* before = nullptr;
  const PlanEpoch* after = nullptr;
  for (const PlanEpoch& e : run.plan_epochs) {
    if (e.at_s < kMarkAtS) before = &e;
    if (e.at_s >= kMarkAtS && e.crossing_flows > 0 && after == nullptr) {
      after = &e;
    }
  }
  ASSERT_NE(before, nullptr) << "no plan before the operator's mark";
  EXPECT_GT(before->network_flows, 0u);
  ASSERT_NE(after, nullptr) << "no re-plan of flows crossing " << c.mark;
  ASSERT_FALSE(after->degraded_links.empty());
  // Bytes on the degraded links: planned there before, fewer after.
  double on_before = 0, on_after = 0;
  for (const std::string& l : after->degraded_links) {
    auto b = before->link_bytes.find(l);
    if (b != before->link_bytes.end()) on_before += b->second;
    auto a = after->link_bytes.find(l);
    if (a != after->link_bytes.end()) on_after += a->second;
  }
  std::cerr << c.name << ": epoch " << after->epoch << ", "
            << after->crossing_flows << " crossing, " << after->moved_flows
            << " moved, " << after->moved_off_degraded
            << " off every degraded link; bytes on the degraded links "
            << on_before << " -> " << on_after << "\n";
  EXPECT_GT(on_before, 0) << "the plan put no bytes on " << c.mark;
  EXPECT_LT(on_after, on_before);
  EXPECT_GE(after->moved_off_degraded, 1u);
  // Every host got and acked the newest epoch.
  ASSERT_EQ(run.final_plan.hosts_size(), s->nodes);
  for (const v1::FlowPlanHost& h : run.final_plan.hosts()) {
    EXPECT_GE(h.epoch_sent(), after->epoch) << h.host();
    EXPECT_EQ(h.epoch_acked(), h.epoch_sent()) << h.host();
  }
}

// node0..node3 are: the published slice's first four hashed hosts (two
// pods: their ring crosses P12/agg0 -> core0.0 -> P8/agg0); the EDR fat
// tree's first four hosts by node description (bee01, bee02, controller,
// gpu001; one HCA each); host0..host3 of the dual-plane file.
INSTANTIATE_TEST_SUITE_P(
    Formats, SimReplanOnFabric,
    ::testing::Values(
        FabricCase{"published_three_tier", "lingjun_topo_slice.csv", 2,
                   "P12/S2-P12/agg0"},
        FabricCase{"ibnetdiscover", "ibnetdiscover_edr96.topo", 1,
                   "S-ec0d9a0300ec81e0"},
        FabricCase{"simai_dual_plane",
                   "AlibabaHPN_64g_8gps_DualToR_DualPlane_200Gbps_H100.txt", 2,
                   "tor72"}),
    [](const ::testing::TestParamInfo<FabricCase>& i) {
      return std::string(i.param.name);
    });

}  // namespace
}  // namespace pitstop::sim
