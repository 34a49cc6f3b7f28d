// The planner's InfiniBand reader on a real ibnetdiscover output of an EDR
// fat tree (../shared/data/topology/ibnetdiscover_edr96.topo) and variants
// made of it: GUID maps, SHARP aggregation nodes, malformed lines, two
// subnets concatenated.
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

constexpr char kEdr96[] = "ibnetdiscover_edr96.topo";

TEST(PublishedFabricsTest, Edr96ReadsSwitchesHcasPortsAndSpeeds) {
  const std::string text = SharedTopologyText(kEdr96);
  SKIP_WITHOUT(text, kEdr96);
  auto f = LoadFabric(SharedTopology(kEdr96).string(), ClosCsvOptions{});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->hosts().size(), 96u);  // one HCA each
  EXPECT_EQ(f->gpu_count(), 96);
  EXPECT_EQ(f->tor_count(), 4);  // the 4 leaves
  int aggs = 0, fabric_cables = 0, nic_cables = 0;
  for (const FabricNode& n : f->nodes()) aggs += n.kind == NodeKind::kAgg;
  for (size_t l = 0; l < f->links().size(); l += 2) {
    fabric_cables += f->link(l).kind == LinkKind::kFabric;
    nic_cables += f->link(l).kind == LinkKind::kNic;
  }
  EXPECT_EQ(aggs, 2);                   // the 2 spines
  EXPECT_EQ(fabric_cables, 4 * 2 * 6);  // 6 cables per leaf-spine pair
  EXPECT_EQ(nic_cables, 96);
  // Hosts by node description, "controller mlx5_0" included.
  for (const char* h :
       {"node018", "gpu001", "bee01", "login01", "controller"}) {
    EXPECT_GE(f->FindNode(std::string(h) + "/gpu0"), 0) << h;
  }
  // node018's HCA is on port 1 of leaf ec8240 (line 11).
  auto up = f->FindLinks("node018/nic0");
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ(f->LinkName((*up)[0]), "node018/nic0[1]->S-ec0d9a0300ec8240[1]");
  EXPECT_EQ(f->link((*up)[0]).source_line, 11);
  EXPECT_EQ(f->link((*up)[0]).nominal_gbps, 100);  // 4xEDR
  // The one cable that trained at 4xDDR: 16 Gbps, named by its ports.
  auto ddr = f->FindLinks("S-ec0d9a0300ec8480[11]-S-ec0d9a0300ec8200[11]");
  ASSERT_TRUE(ddr.ok()) << ddr.status();
  ASSERT_EQ(ddr->size(), 2u);
  EXPECT_EQ(f->link((*ddr)[0]).nominal_gbps, 16);
  EXPECT_NE(AllWarnings(*f).find("S-ec0d9a0300ec8480[11]"), std::string::npos)
      << AllWarnings(*f);
  // Leaf to leaf: 2 spines x 6 parallel cables = 12 ECMP next hops.
  const int leaf_a = f->FindNode("S-ec0d9a0300ec8240");
  const int leaf_b = f->FindNode("S-ec0d9a0300ec8480");
  std::vector<int> hops;
  f->NextHops(leaf_a, f->tor_index(leaf_b), &hops);
  EXPECT_EQ(hops.size(), 12u);
}

// Every cable appears in the blocks of both its ends. Before, a cable that
// only one end lists (node018's HCA block without its port line) was read
// without a word; now it is read and warned, naming the line.
TEST(PublishedFabricsTest, Edr96CableListedFromOneEndIsWarnedNamingTheLine) {
  const std::string text = SharedTopologyText(kEdr96);
  SKIP_WITHOUT(text, kEdr96);
  auto whole = LoadFabric(SharedTopology(kEdr96).string(), ClosCsvOptions{});
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(AllWarnings(*whole).find("one end only"), std::string::npos)
      << AllWarnings(*whole);
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  bool cut = false;
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    if (absl::StartsWith(lines[i], "Ca\t1 \"H-506b4b03003fa9b6\"")) {
      // The HCA's port line after its block header.
      for (size_t k = i + 1; k < lines.size() && !lines[k].empty(); ++k) {
        if (absl::StartsWith(lines[k], "[1]")) {
          lines[k] = "";
          cut = true;
        }
      }
    }
  }
  ASSERT_TRUE(cut);
  auto ib = ParseIbnetdiscover(absl::StrJoin(lines, "\n"), "edr.topo");
  ASSERT_TRUE(ib.ok()) << ib.status();
  auto f = FabricFromIbnetdiscover(*ib, "edr.topo", {}, IbOptions{});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_NE(
      AllWarnings(*f).find("edr.topo:11: 1 cable is listed from one end only"),
      std::string::npos)
      << AllWarnings(*f);
  EXPECT_NE(AllWarnings(*f).find("H-506b4b03003fa9b6[1] (line 11)"),
            std::string::npos)
      << AllWarnings(*f);
}

// The planner reads link speeds: the DDR cable carries less than any of
// its EDR siblings between the same two switches.
TEST(PublishedFabricsTest, Edr96PlanLoadsTheDdrCableLess) {
  const std::string text = SharedTopologyText(kEdr96);
  SKIP_WITHOUT(text, kEdr96);
  auto f = LoadFabric(SharedTopology(kEdr96).string(), ClosCsvOptions{});
  ASSERT_TRUE(f.ok()) << f.status();
  auto gpus = PlaceJob(*f, 96, Placement::kScattered, 7);
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  RingSpec spec;
  spec.channels = 16;
  int channels = 0;
  std::vector<Flow> flows = BuildRingFlows(*f, *gpus, spec, &channels);
  Planner planner(&*f, &flows, PlannerOptions{});
  const FlowPlan plan = planner.Plan(1);
  const std::vector<double> bytes = Planner::LinkBytes(*f, flows, plan);
  auto siblings = f->FindLinks("S-ec0d9a0300ec8480->S-ec0d9a0300ec8200");
  ASSERT_TRUE(siblings.ok()) << siblings.status();
  ASSERT_EQ(siblings->size(), 6u);
  double ddr = -1, edr_max = 0;
  for (int l : *siblings) {
    if (f->link(l).nominal_gbps == 16) {
      ddr = bytes[l];
    } else {
      edr_max = std::max(edr_max, bytes[l]);
    }
  }
  ASSERT_GE(ddr, 0);
  EXPECT_GT(edr_max, 0);
  EXPECT_LT(ddr, edr_max);
}

TEST(PublishedFabricsTest, Edr96HostsFromAGuidMap) {
  const std::string text = SharedTopologyText(kEdr96);
  SKIP_WITHOUT(text, kEdr96);
  auto ib = ParseIbnetdiscover(text, kEdr96);
  ASSERT_TRUE(ib.ok()) << ib.status();
  // The controller's HCA by its node GUID, node018's by its port GUID.
  auto map = ParseIbHostMap(
      "# guid host\n0x506b4b030043f9e2 ctl01\n506b4b03003fa9b6 n18\n", "m");
  ASSERT_TRUE(map.ok()) << map.status();
  auto f = FabricFromIbnetdiscover(*ib, kEdr96, *map, IbOptions{});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_GE(f->FindNode("ctl01/gpu0"), 0);
  EXPECT_GE(f->FindNode("n18/gpu0"), 0);
  EXPECT_EQ(f->FindNode("controller/gpu0"), -1);
  auto bad = ParseIbHostMap("0x12 a\nzz b\n", "hosts.map");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("hosts.map:2:"), std::string::npos);
}

// A host with two HCAs (the map gives the controller's HCA to node018's
// host too) has two NICs, and the ring's channels use both. Before, the
// channel count and rails came from the first host (one HCA): every channel
// of the two-HCA host went through its nic0 and nic1 carried nothing.
TEST(PublishedFabricsTest, Edr96HostWithTwoHcasUsesBoth) {
  const std::string text = SharedTopologyText(kEdr96);
  SKIP_WITHOUT(text, kEdr96);
  auto ib = ParseIbnetdiscover(text, kEdr96);
  ASSERT_TRUE(ib.ok()) << ib.status();
  auto map =
      ParseIbHostMap("0x506b4b030043f9e2 n18\n506b4b03003fa9b6 n18\n", "m");
  ASSERT_TRUE(map.ok()) << map.status();
  auto f = FabricFromIbnetdiscover(*ib, kEdr96, *map, IbOptions{});
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->hosts().size(), 95u);
  int channels = 0;
  const std::vector<Flow> flows =
      BuildRingFlows(*f, f->GpusInOrder(), RingSpec{}, &channels);
  EXPECT_EQ(channels, 4);  // two per NIC of the host with the most
  Planner planner(&*f, &flows, PlannerOptions{});
  const std::vector<double> bytes =
      Planner::LinkBytes(*f, flows, planner.Plan(1));
  for (const char* nic : {"n18/nic0", "n18/nic1"}) {
    auto links = f->FindLinks(nic);
    ASSERT_TRUE(links.ok()) << links.status();
    double sent = 0;
    for (int l : *links) sent += bytes[l];
    EXPECT_GT(sent, 0) << nic << " carries nothing";
  }
}

// With SHARP enabled, every Switch-IB 2 / Quantum switch lists its
// aggregation node (the in-switch reduction engine) as a Ca on an internal
// port, all with the description "Mellanox Technologies Aggregation Node"
// (as in public ibnetdiscover outputs of Quantum fabrics: `Ca 1 "H-..." #
// "Mellanox Technologies Aggregation Node"` on port 41 of an MQM8700).
// They are neither hosts nor GPUs, and a spine with one is still a spine.
std::string WithAggregationNodes(const std::string& text) {
  std::vector<std::string> out, switches;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const std::string l(line);
    out.push_back(l);
    if (!absl::StartsWith(l, "Switch\t")) continue;
    const std::string guid = l.substr(l.find("\"S-") + 3, 16);
    switches.push_back(guid);
    // The aggregation node's GUID and its port's: the switch's, re-prefixed.
    out.push_back(absl::StrCat("[37]\t\"H-0002c9", guid.substr(6), "\"[1](2c8",
                               guid.substr(6),
                               ") \t\t# \"Mellanox "
                               "Technologies Aggregation Node\" lid ",
                               900 + switches.size(), " 4xEDR"));
  }
  for (size_t i = 0; i < switches.size(); ++i) {
    const std::string an = "0002c9" + switches[i].substr(6);
    for (const std::string& l :
         {std::string("vendid=0x2c9"), std::string("devid=0xcf09"),
          absl::StrCat("caguid=0x", an),
          absl::StrCat("Ca\t1 \"H-", an,
                       "\"\t\t# \"Mellanox Technologies Aggregation Node\""),
          absl::StrCat("[1](2c8", switches[i].substr(6), ") \t\"S-",
                       switches[i], "\"[37]\t\t# lid ", 901 + i,
                       " lmc 0 \"SwitchIB Mellanox Technologies\" lid 1 "
                       "4xEDR"),
          std::string()}) {
      out.push_back(l);
    }
  }
  return absl::StrJoin(out, "\n");
}

TEST(PublishedFabricsTest, Edr96SharpAggregationNodesAreNotHosts) {
  const std::string text = SharedTopologyText(kEdr96);
  SKIP_WITHOUT(text, kEdr96);
  auto ib = ParseIbnetdiscover(WithAggregationNodes(text), "sharp.topo");
  ASSERT_TRUE(ib.ok()) << ib.status();
  auto f = FabricFromIbnetdiscover(*ib, "sharp.topo", {}, IbOptions{});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->hosts().size(), 96u);
  EXPECT_EQ(f->gpu_count(), 96);
  EXPECT_EQ(f->tor_count(), 4);  // the spines stay spines
  int aggs = 0;
  for (const FabricNode& n : f->nodes()) aggs += n.kind == NodeKind::kAgg;
  EXPECT_EQ(aggs, 2);
  EXPECT_NE(AllWarnings(*f).find("6 SHARP aggregation node(s)"),
            std::string::npos)
      << AllWarnings(*f);
}

// A map written on Windows (CRLF, a byte order mark) names the same hosts;
// a GUID given two different hosts is refused naming both lines; a GUID
// that is no HCA's node or port GUID (a typo) is warned, naming its line.
TEST(PublishedFabricsTest, Edr96GuidMapFromWindowsDuplicatesAndTypos) {
  const std::string text = SharedTopologyText(kEdr96);
  SKIP_WITHOUT(text, kEdr96);
  auto ib = ParseIbnetdiscover(text, kEdr96);
  ASSERT_TRUE(ib.ok()) << ib.status();
  auto map = ParseIbHostMap(
      "\xef\xbb\xbf"
      "0x506b4b030043f9e2 ctl01\r\n506b4b03003fa9b6 n18\r\n"
      "0x506b4b03deadbeef n99\r\n",
      "m");
  ASSERT_TRUE(map.ok()) << map.status();
  auto f = FabricFromIbnetdiscover(*ib, kEdr96, *map, IbOptions{});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_GE(f->FindNode("ctl01/gpu0"), 0);
  EXPECT_GE(f->FindNode("n18/gpu0"), 0);
  EXPECT_NE(AllWarnings(*f).find("m:3: GUID 0x506b4b03deadbeef"),
            std::string::npos)
      << AllWarnings(*f);
  auto dup = ParseIbHostMap("0x12 a\n0x12 a\n0x0012 b\n", "hosts.map");
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("hosts.map:3:"), std::string::npos)
      << dup.status();
  EXPECT_NE(dup.status().message().find("line 1"), std::string::npos)
      << dup.status();
}

TEST(PublishedFabricsTest, Edr96MalformedInputNamesFileAndLine) {
  const std::string text = SharedTopologyText(kEdr96);
  SKIP_WITHOUT(text, kEdr96);
  auto expect_error = [](const std::string& t, const std::string& where) {
    auto r = ParseIbnetdiscover(t, "edr.topo");
    ASSERT_FALSE(r.ok()) << where;
    EXPECT_NE(r.status().message().find(where), std::string::npos)
        << r.status();
  };
  // An unknown speed on line 11, a garbled port line, a stray line.
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  expect_error(
      WithLine(text, 11, absl::StrReplaceAll(lines[10], {{"4xEDR", "4xZZZ"}})),
      "edr.topo:11: no link width and speed");
  expect_error(WithLine(text, 12, "[2]\t\"H-506b4b03003fa9aa\"(oops"),
               "edr.topo:12:");
  expect_error(WithLine(text, 13, "garbage"), "edr.topo:13:");
  // Cut after the switch blocks: the HCAs named there have no block.
  expect_error(text.substr(0, text.find("\nCa\t")), "has no block");
  // Two ends that disagree: node019's HCA says it is on port 2 (node020's),
  // the switch that it is on port 36.
  auto r = ParseIbnetdiscover(
      absl::StrReplaceAll(
          text, {{"\"S-ec0d9a0300ec8240\"[36]", "\"S-ec0d9a0300ec8240\"[2]"}}),
      "edr.topo");
  ASSERT_TRUE(r.ok()) << r.status();
  auto f = FabricFromIbnetdiscover(*r, "edr.topo", {}, IbOptions{});
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find(
                "edr.topo:239: H-506b4b03003fa98a[1] is cabled to "
                "S-ec0d9a0300ec8240[2] here but to S-ec0d9a0300ec8240[36] on "
                "line 46"),
            std::string::npos)
      << f.status();
}

// Two InfiniBand planes as operators describe them: ibnetdiscover run once
// per subnet, the outputs concatenated. Plane B is the real EDR output again
// with its switches' GUIDs changed (other switches) and every HCA cabled on
// port 2: each dual-port HCA then appears once per subnet, port 1 in the
// first, port 2 in the second. Before, the reader refused the second block
// ("H-... listed twice"); now the blocks merge, each port in its subnet's
// plane.
std::string PlaneB(const std::string& edr) {
  std::string b = absl::StrReplaceAll(edr, {{"ec0d9a03", "ec0d9b03"}});
  std::vector<std::string> lines = absl::StrSplit(b, '\n');
  for (std::string& l : lines) {
    if (absl::StartsWith(l, "Ca\t1 ")) l = "Ca\t2 " + l.substr(5);
    if (absl::StartsWith(l, "[1](")) l = "[2](" + l.substr(4);
    // Switch ports cabled to an HCA name its port: "H-<guid>"[1] -> [2].
    const size_t h = l.find("\"H-");
    const size_t q = h == std::string::npos ? h : l.find("\"[1]", h + 1);
    if (q != std::string::npos) l.replace(q, 4, "\"[2]");
  }
  return absl::StrJoin(lines, "\n");
}

TEST(PublishedFabricsTest, Edr96TwoSubnetsConcatenatedAreTwoPlanes) {
  const std::string text = SharedTopologyText(kEdr96);
  SKIP_WITHOUT(text, kEdr96);
  const std::string path = ::testing::TempDir() + "/edr96_two_planes.topo";
  std::ofstream(path, std::ios::binary) << text << "\n" << PlaneB(text);
  auto f = LoadFabric(path, ClosCsvOptions{});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->hosts().size(), 96u);
  const int nic = f->FindNode("node018/gpu0");
  ASSERT_GE(nic, 0);
  ASSERT_EQ(f->nic_uplinks(nic).size(), 2u);
  const int tor_a = f->tor_of_uplink(f->nic_uplinks(nic)[0]);
  const int tor_b = f->tor_of_uplink(f->nic_uplinks(nic)[1]);
  EXPECT_EQ(f->Distance(tor_a, f->tor_index(tor_b)), -1);  // two planes
  EXPECT_EQ(f->node(tor_a).name, "S-ec0d9a0300ec8240");
  EXPECT_EQ(f->node(tor_b).name, "S-ec0d9b0300ec8240");
  EvalOptions o;
  o.seeds = 4;
  auto two = Evaluate(&*f, o);
  auto one_file = LoadFabric(SharedTopology(kEdr96).string(), {});
  ASSERT_TRUE(one_file.ok()) << one_file.status();
  auto one = Evaluate(&*one_file, o);
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_TRUE(one.ok()) << one.status();
  // Twice the ports: half the bound, and the plan uses both planes.
  EXPECT_NEAR(two->healthy.bound.completion_s / one->healthy.bound.completion_s,
              0.5, 0.01);
  EXPECT_LE(two->healthy.planned.completion_s,
            two->healthy.bound.completion_s * 1.05);
  // The same subnet given twice is refused naming the repeat.
  std::ofstream(path, std::ios::binary) << text << "\n" << text;
  auto twice = LoadFabric(path, ClosCsvOptions{});
  ASSERT_FALSE(twice.ok());
  EXPECT_TRUE(absl::StrContains(twice.status().message(), "listed twice"))
      << twice.status();
}

}  // namespace
}  // namespace pitstop::c4p
