// The planner's readers on fabric descriptions as operators publish them
// (../shared/data/topology): Alibaba's three-tier topology data and
// SimAI's AlibabaHPN dual-plane fabric. InfiniBand discovery output:
// ibnetdiscover_fabrics_test.cc.
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "src/c4p/evaluate.h"
#include "src/c4p/fabric_io.h"
#include "src/c4p/flows.h"
#include "src/c4p/ibnetdiscover.h"
#include "src/c4p/planner.h"
#include "tests/c4p/shared_topology.h"

namespace pitstop::c4p {
namespace {

constexpr char kLingjun[] = "lingjun_topo_slice.csv";

TEST(PublishedFabricsTest, LingjunSliceLoadsWithAswNamesScopedByPsw) {
  const std::string text = SharedTopologyText(kLingjun);
  SKIP_WITHOUT(text, kLingjun);
  auto f = ParseClosCsv(text, kLingjun, ClosCsvOptions{});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->hosts().size(), 239u);  // one per data row
  EXPECT_EQ(f->gpu_count(), 239 * 8);
  // S2 under P8 (8 hosts) and S2 under P12 (4 hosts) are two switches.
  const int p8 = f->FindNode("P8/S2"), p12 = f->FindNode("P12/S2");
  ASSERT_GE(p8, 0);
  ASSERT_GE(p12, 0);
  EXPECT_NE(p8, p12);
  auto nics_below = [&](int tor) {
    int n = 0;
    for (int l : f->out_links(tor)) n += f->link(l).kind == LinkKind::kNic;
    return n;
  };
  EXPECT_EQ(nics_below(p8), 8 * 8);
  EXPECT_EQ(nics_below(p12), 4 * 8);
  EXPECT_EQ(f->tor_count(), 54);  // distinct (PSW, ASW) pairs of the file
  // Hosts keep their hashed ids; the first row is line 2.
  EXPECT_EQ(f->hosts()[0].name.size(), 64u);
  EXPECT_EQ(f->hosts()[0].source_line, 2);
}

TEST(PublishedFabricsTest, LingjunRowsMadeIncompleteAreLeftOutByLine) {
  std::string text = SharedTopologyText(kLingjun);
  SKIP_WITHOUT(text, kLingjun);
  // Line 5 loses its ASW, line 9 its last column, as in rows of the full
  // published file that lack a field.
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  lines[4] = lines[4].substr(0, lines[4].rfind(',') + 1);
  lines[8] = lines[8].substr(0, lines[8].rfind(','));
  auto f = ParseClosCsv(absl::StrJoin(lines, "\n"), kLingjun, ClosCsvOptions{});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->hosts().size(), 237u);
  const std::string w = AllWarnings(*f);
  EXPECT_NE(w.find("empty DSW, PSW or ASW): line 5"), std::string::npos) << w;
  EXPECT_NE(w.find("columns: line 9"), std::string::npos) << w;
}

// SimAI's AlibabaHPN dual-ToR dual-plane fabric (made by SimAI's generator
// with --dp): each NIC has two ports to two ToRs in two planes that never
// meet. The reader makes each GPU's NIC a two-port NIC; the plan uses both
// ports; when one port, or one plane's ToR, degrades, the re-plan moves the
// flows to the other.
constexpr char kDualPlane[] =
    "AlibabaHPN_64g_8gps_DualToR_DualPlane_200Gbps_H100.txt";

struct PortBytes {
  double first = 0, second = 0;
};

PortBytes NicPortBytes(const Fabric& f, const std::vector<double>& bytes,
                       int gpu) {
  const std::vector<int>& up = f.nic_uplinks(gpu);
  return {bytes[up[0]], bytes[up[1]]};
}

TEST(PublishedFabricsTest, DualPlaneNicsUseBothPortsAndLeaveADegradedOne) {
  const std::string text = SharedTopologyText(kDualPlane);
  SKIP_WITHOUT(text, kDualPlane);
  auto f = LoadFabric(SharedTopology(kDualPlane).string(), ClosCsvOptions{});
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->gpu_count(), 64);
  const int g0 = f->FindNode("host0/gpu0");
  ASSERT_EQ(f->nic_uplinks(g0).size(), 2u);
  const int tor_a = f->tor_of_uplink(f->nic_uplinks(g0)[0]);
  const int tor_b = f->tor_of_uplink(f->nic_uplinks(g0)[1]);
  EXPECT_EQ(f->Distance(tor_a, f->tor_index(tor_b)), -1);  // two planes
  auto gpus = PlaceJob(*f, 64, Placement::kPacked, 1);
  ASSERT_TRUE(gpus.ok());
  int channels = 0;
  std::vector<Flow> flows = BuildRingFlows(*f, *gpus, RingSpec{}, &channels);
  Planner planner(&*f, &flows, PlannerOptions{});
  FlowPlan plan = planner.Plan(1);
  std::vector<double> bytes = Planner::LinkBytes(*f, flows, plan);
  // Every NIC sends on both ports (two channels per NIC, one per port).
  for (const FabricHost& h : f->hosts()) {
    for (int g : h.gpus) {
      const PortBytes p = NicPortBytes(*f, bytes, g);
      EXPECT_GT(p.first, 0) << f->node(g).name;
      EXPECT_EQ(p.first, p.second) << f->node(g).name;
    }
  }
  // host0/nic0's plane-A port at a quarter: its flow leaves it.
  const int port_a = f->nic_uplinks(g0)[0];
  std::vector<int> changed = {port_a, port_a ^ 1};
  for (int l : changed) f->SetCapacity(l, f->link(l).nominal_gbps * 0.25);
  Planner::ReplanStats stats;
  FlowPlan after = planner.Replan(plan, changed, 2, &stats);
  EXPECT_GT(stats.crossing, 0);
  EXPECT_GT(stats.moved, 0);
  bytes = Planner::LinkBytes(*f, flows, after);
  EXPECT_EQ(NicPortBytes(*f, bytes, g0).first, 0);
  // The whole plane-A ToR of rail 0 degraded: every flow on it moves to
  // plane B (its own rail-0 ToR).
  f->ResetCapacities();
  auto tor_links = f->FindLinks(f->node(tor_a).name);
  ASSERT_TRUE(tor_links.ok()) << tor_links.status();
  for (int l : *tor_links) f->SetCapacity(l, f->link(l).nominal_gbps * 0.25);
  FlowPlan plane = planner.Replan(plan, *tor_links, 3, &stats);
  bytes = Planner::LinkBytes(*f, flows, plane);
  for (int l : f->out_links(tor_a)) EXPECT_EQ(bytes[l], 0) << f->LinkName(l);
}

// The flows of `pitstop sim` on this file (4 nodes x 2 GPUs, one channel):
// rank 2h+1 (host h, rail 1) -> rank 2h+2 (host h+1, rail 0), planned
// through plane A (tor73 -> spine -> tor72). With tor72 (plane A, rail 0)
// at a quarter, each flow could reach its receiver's NIC over that NIC's
// plane-B port (tor81 -> spine -> tor80) or the receiver's rail-1 NIC
// inside tor73: equal bottleneck. It keeps the NIC and takes plane B (the
// other NIC would add an uncharged NVLink hop and change the NIC set).
TEST(PublishedFabricsTest, DualPlaneReceiverKeepsItsNicAndTakesPlaneB) {
  const std::string text = SharedTopologyText(kDualPlane);
  SKIP_WITHOUT(text, kDualPlane);
  auto f = LoadFabric(SharedTopology(kDualPlane).string(), ClosCsvOptions{});
  ASSERT_TRUE(f.ok()) << f.status();
  std::vector<Flow> flows;
  for (int h = 0; h < 4; ++h) {
    Flow fl;
    fl.id = h;
    fl.src_gpu = f->FindNode("host" + std::to_string(h) + "/gpu1");
    fl.dst_gpu = f->FindNode("host" + std::to_string((h + 1) % 4) + "/gpu0");
    fl.bytes = 56 << 20;
    fl.network = true;
    flows.push_back(fl);
  }
  Planner planner(&*f, &flows, PlannerOptions{});
  FlowPlan plan = planner.Plan(1);
  const int tor72 = f->FindNode("tor72");
  auto tor_links = f->FindLinks("tor72");
  ASSERT_TRUE(tor_links.ok()) << tor_links.status();
  for (int l : *tor_links) f->SetCapacity(l, f->link(l).nominal_gbps * 0.25);
  Planner::ReplanStats stats;
  FlowPlan after = planner.Replan(plan, *tor_links, 2, &stats);
  for (const Flow& fl : flows) {
    const PlannedPath& p = after.paths[fl.id];
    EXPECT_EQ(p.src_gpu, fl.src_gpu);
    EXPECT_EQ(p.dst_gpu, fl.dst_gpu);
    // Out of the sender's plane-B port, into the receiver's plane-B port.
    EXPECT_EQ(p.links.front(), f->nic_uplinks(fl.src_gpu)[1]);
    EXPECT_EQ(p.links.back(), f->nic_uplinks(fl.dst_gpu)[1] ^ 1);
    for (int l : p.links) EXPECT_NE(f->link(l).src, tor72) << f->LinkName(l);
  }
}

// The dual-plane file with line 6 (`1 64 2880Gbps ...`: GPU 1's NVLink)
// deleted and the header's link count made 1151: host0/gpu1 is cut off from
// its NVSwitch. Its ring hops to and from its host's neighbours go over
// the NICs. Before, they were flows "inside one host": the planner routed
// them over the NICs anyway (no NVLink path) while the simulator and the
// bound, which skip such flows, never saw them; the plan balanced loads
// that were not there and came out 2.0x its bound (both channels of
// host0/nic0 on one port), with no warning. Now they are network flows
// everywhere: the load names the GPU and the plan meets the bound, which
// counts them.
TEST(PublishedFabricsTest, DualPlaneGpuWithoutNvLinkIsPlannedOverItsNic) {
  const std::string text = SharedTopologyText(kDualPlane);
  SKIP_WITHOUT(text, kDualPlane);
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  ASSERT_TRUE(absl::StartsWith(lines[5], "1 64 2880Gbps")) << lines[5];
  ASSERT_TRUE(absl::StartsWith(lines[0], "208 8 8 136 1152 ")) << lines[0];
  lines.erase(lines.begin() + 5);
  lines[0] = absl::StrReplaceAll(lines[0], {{" 1152 ", " 1151 "}});
  const std::string path = ::testing::TempDir() + "/no_nvlink_gpu1.txt";
  std::ofstream(path, std::ios::binary) << absl::StrJoin(lines, "\n");
  auto f = LoadFabric(path, ClosCsvOptions{});
  ASSERT_TRUE(f.ok()) << f.status();
  const std::string w = AllWarnings(*f);
  EXPECT_NE(w.find(path + ":6: host0/gpu1 has no NVLink to nvsw64"),
            std::string::npos)
      << w;
  auto healthy = LoadFabric(SharedTopology(kDualPlane).string(), {});
  ASSERT_TRUE(healthy.ok()) << healthy.status();
  EvalOptions o;
  o.seeds = 4;
  auto cut = Evaluate(&*f, o);
  auto whole = Evaluate(&*healthy, o);
  ASSERT_TRUE(cut.ok()) << cut.status();
  ASSERT_TRUE(whole.ok()) << whole.status();
  // 64 ranks, 16 channels: 14 channels hop gpu0 -> gpu1 and 14 gpu1 ->
  // gpu2, now on the NICs (28 more network flows than the intact file).
  EXPECT_EQ(cut->network_flows, whole->network_flows + 28);
  const double bound = cut->healthy.bound.completion_s;
  // The bound counts them: host0/gpu1's NIC sends 14 + 2 flows over two
  // ports where every intact NIC sends 2.
  EXPECT_NEAR(bound / whole->healthy.bound.completion_s, 8.0, 0.01);
  EXPECT_LE(cut->healthy.planned.completion_s, bound * 1.05);
  EXPECT_LE(cut->healthy.planned.max_link_util, 1.05);
}

}  // namespace
}  // namespace pitstop::c4p
