#include "src/c4p/bound.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/c4p/fabric_io.h"
#include "src/c4p/planner.h"
#include "tests/c4p/generated_fabric.h"

namespace pitstop::c4p {
namespace {

double Seconds(double bytes, double gbps) { return bytes * 8 / (gbps * 1e9); }

Flow NetworkFlow(int id, int src, int dst, double bytes) {
  Flow f;
  f.id = id;
  f.src_gpu = src;
  f.dst_gpu = dst;
  f.bytes = bytes;
  f.network = true;
  return f;
}

// The busiest link of a plan, in seconds at its capacity.
double PlanTime(const Fabric& fab, const std::vector<Flow>& flows,
                const FlowPlan& plan) {
  const std::vector<double> bytes = Planner::LinkBytes(fab, flows, plan);
  double worst = 0;
  for (size_t l = 0; l < bytes.size(); ++l) {
    if (fab.link(l).kind == LinkKind::kNvLink) continue;
    worst = std::max(worst, Seconds(bytes[l], fab.link(l).gbps));
  }
  return worst;
}

// Three flows leave a ToR with two uplinks: spread perfectly they need 1.5
// flows' time, whole ones put two on one uplink.
TEST(BoundTest, WholeFlowsThatDoNotDivideEvenlyOverACut) {
  Fabric fab =
      Gen("gen:leafspine,gpus=6,gpus_per_host=1,hosts_per_tor=3,"
          "tor_uplinks=2");
  std::vector<Flow> flows;
  for (int h = 0; h < 3; ++h) {
    flows.push_back(NetworkFlow(
        h, fab.FindNode("host" + std::to_string(h) + "/gpu0"),
        fab.FindNode("host" + std::to_string(h + 3) + "/gpu0"), 1e9));
  }
  const double one = Seconds(1e9, 400);
  EXPECT_DOUBLE_EQ(CutBound(fab, flows, 0.95), 1.5 * one);
  EXPECT_DOUBLE_EQ(WholeFlowBound(fab, flows, 0.95), 2 * one);
  // The planner reaches it (and no plan can do better).
  Planner planner(&fab, &flows, PlannerOptions{});
  EXPECT_DOUBLE_EQ(PlanTime(fab, flows, planner.Plan(1)), 2 * one);
}

// One NIC of a host whose NICs are exactly full drops to a quarter: its
// flows may move to the host's other NICs, so the host's cut holds all the
// host's flows over its NICs' remaining capacity, not only the degraded
// NIC's flows (which left the bound at the healthy value).
TEST(BoundTest, ADegradedNicsHostCutHoldsAllTheHostsFlows) {
  Fabric fab = Gen("gen:leafspine,gpus=16");  // 2 hosts x 8 NICs of 400
  auto place = PlaceJob(fab, 16, Placement::kPacked, 1);
  ASSERT_TRUE(place.ok());
  std::vector<Flow> flows = BuildRingFlows(fab, *place, RingSpec{}, nullptr);
  const double b = flows[0].bytes;
  const double healthy = CutBound(fab, flows, 0.95);
  EXPECT_DOUBLE_EQ(healthy, Seconds(2 * b, 400));  // two channels per NIC
  EXPECT_DOUBLE_EQ(WholeFlowBound(fab, flows, 0.95), healthy);
  auto nic = fab.FindLinks("host0/nic0");
  ASSERT_TRUE(nic.ok()) << nic.status();
  for (int l : *nic) fab.SetCapacity(l, fab.link(l).nominal_gbps * 0.25);
  // 16 flows over 7 x 400 + 100 Gbps.
  EXPECT_NEAR(CutBound(fab, flows, 0.95) / healthy, 3200.0 / 2900, 1e-9);
  // Whole: 14 flows two per healthy NIC; the last two either three on one
  // NIC (1.5x) or one on the quarter NIC (2x each).
  EXPECT_NEAR(WholeFlowBound(fab, flows, 0.95) / healthy, 1.5, 1e-9);
}

// An oversubscribed fabric in the published CSV layout: three hosts, each
// in its own PSW group behind 3 uplinks (8 NICs of 400 Gbps below, 2.67:1).
// The ring's 16 channels leave every pod over 3 links: 5.33 flows each
// spread perfectly, 6 on one of them with whole flows. The plan stops
// there (the repair used to spend its whole budget looking for 5.33).
TEST(BoundTest, OversubscribedCsvFabricIsPlannedToTheWholeFlowBound) {
  ClosCsvOptions o;
  o.aggs_per_pod = 3;
  o.cores_per_agg = 1;
  auto fab = ParseClosCsv(
      "ip,DSW,PSW,ASW\nh0,G0,P0,S0\nh1,G0,P1,S0\n"
      "h2,G0,P2,S0\n",
      "over.csv", o);
  ASSERT_TRUE(fab.ok()) << fab.status();
  auto place = PlaceJob(*fab, fab->gpu_count(), Placement::kPacked, 1);
  ASSERT_TRUE(place.ok());
  std::vector<Flow> flows = BuildRingFlows(*fab, *place, RingSpec{}, nullptr);
  const double b = flows[0].bytes;
  EXPECT_NEAR(CutBound(*fab, flows, 0.95), Seconds(16 * b, 3 * 400), 1e-12);
  EXPECT_NEAR(WholeFlowBound(*fab, flows, 0.95), Seconds(6 * b, 400), 1e-12);
  Planner planner(&*fab, &flows, PlannerOptions{});
  EXPECT_NEAR(PlanTime(*fab, flows, planner.Plan(1)), Seconds(6 * b, 400),
              1e-12);
}

}  // namespace
}  // namespace pitstop::c4p
