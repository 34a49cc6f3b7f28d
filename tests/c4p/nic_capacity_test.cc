#include "src/c4p/nic_capacity.h"

#include "gtest/gtest.h"
#include "src/c4p/fabric_io.h"
#include "src/c4p/planner.h"

namespace pitstop::c4p {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// Bytes a NIC moves in `ns` at `gbps`.
uint64_t BytesAt(double gbps, uint64_t ns) {
  return static_cast<uint64_t>(gbps * ns / 8);
}

TEST(NicCapacityTest, LearnsASlowNicAndIgnoresSmallTransfers) {
  NicCapacityModel m;
  EXPECT_DOUBLE_EQ(m.Get("host0/nic0", 400).gbps, 400);  // unknown: nominal
  // Latency-bound transfers say nothing about bandwidth.
  for (int i = 0; i < 50; ++i) m.Observe("host0/nic0", 400, 4096, 50000);
  EXPECT_EQ(m.Get("host0/nic0", 400).samples, 0);
  for (int i = 0; i < 30; ++i) {
    m.Observe("host0/nic0", 400, BytesAt(100, 20000000), 20000000);
  }
  const auto e = m.Get("host0/nic0", 400);
  EXPECT_EQ(e.samples, 30);
  EXPECT_NEAR(e.gbps, 100, 5);
}

TEST(NicCapacityTest, WaitingForPeersAndIdleTimeDoNotLookLikeASlowNic) {
  NicCapacityModel m;
  // Mostly at line rate; every fourth collective waited for a straggler
  // (same bytes, four times the time).
  for (int i = 0; i < 40; ++i) {
    const uint64_t ns = (i % 4 == 3) ? 80000000 : 20000000;
    m.Observe("host1/nic2", 400, BytesAt(400, 20000000), ns);
  }
  EXPECT_GT(m.Get("host1/nic2", 400).gbps, 300);
  // A long quiet spell adds no samples and leaves the estimate.
  const double before = m.Get("host1/nic2", 400).gbps;
  EXPECT_DOUBLE_EQ(m.Get("host1/nic2", 400).gbps, before);
  // Recovery after a slow period is quick (samples above pull up fast).
  for (int i = 0; i < 20; ++i) {
    m.Observe("host1/nic2", 400, BytesAt(50, 20000000), 20000000);
  }
  EXPECT_LT(m.Get("host1/nic2", 400).gbps, 100);
  for (int i = 0; i < 6; ++i) {
    m.Observe("host1/nic2", 400, BytesAt(400, 20000000), 20000000);
  }
  EXPECT_GT(m.Get("host1/nic2", 400).gbps, 380);
}

TEST(NicCapacityTest, MeasuredCapacityMovesFlowsOffTheNic) {
  auto o = ParseGeneratorSpec("gen:leafspine,gpus=64,hosts_per_tor=4");
  ASSERT_TRUE(o.ok());
  auto fab = GenerateFabric(*o);
  ASSERT_TRUE(fab.ok());
  auto place = PlaceJob(*fab, 64, Placement::kPacked, 1);
  ASSERT_TRUE(place.ok());
  std::vector<Flow> flows = BuildRingFlows(*fab, *place, RingSpec{}, nullptr);
  Planner planner(&*fab, &flows, PlannerOptions{});
  FlowPlan plan = planner.Plan(1);
  NicCapacityModel m;
  for (int i = 0; i < 10; ++i) {
    m.Observe("host2/nic3", 400, BytesAt(40, 10000000), 10000000);
    m.Observe("host2/nic4", 400, BytesAt(400, 10000000), 10000000);
  }
  std::vector<int> changed = m.ApplyTo(&*fab);
  ASSERT_EQ(changed.size(), 2u);  // host2/nic3 up and down, not nic4
  const int gpu = fab->FindNode("host2/gpu3");
  EXPECT_NEAR(fab->link(fab->nic_uplinks(gpu)[0]).gbps, 40, 5);
  Planner::ReplanStats stats;
  FlowPlan re = planner.Replan(plan, changed, 2, &stats);
  EXPECT_GT(stats.moved, 0);
  for (const Flow& f : flows) {
    if (!f.network) continue;
    EXPECT_NE(re.paths[f.id].src_gpu, gpu);
    EXPECT_NE(re.paths[f.id].dst_gpu, gpu);
  }
  // Applying the same estimates again changes nothing.
  EXPECT_TRUE(m.ApplyTo(&*fab).empty());
}

}  // namespace
}  // namespace pitstop::c4p
