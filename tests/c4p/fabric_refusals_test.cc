// What a later walkthrough found the fabric readers took without a word
// (issue #32): a byte order mark on a repeated CSV header, SimAI lines
// shorter or longer than they should be, two elements of one name, C1
// control characters in names, switches no host reaches in an
// ibnetdiscover dump and generator keys of the other kind.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/c4p/fabric_io.h"
#include "src/c4p/ibnetdiscover.h"
#include "tests/c4p/tiny_simai.h"

namespace pitstop::c4p {
namespace {

std::string Warnings(const Fabric& f) {
  std::string all;
  for (const std::string& w : f.warnings()) all += w + "\n";
  return all;
}

// A three-tier CSV of one GPU per host, read.
absl::StatusOr<Fabric> OneGpuCsv(const std::string& text,
                                 const std::string& source) {
  ClosCsvOptions o;
  o.gpus_per_host = 1;
  return ParseClosCsv(text, source, o);
}

void ExpectRefused(const absl::Status& s, const std::string& said) {
  EXPECT_FALSE(s.ok()) << said;
  EXPECT_NE(s.message().find(said), std::string::npos)
      << "'" << said << "' not in: " << s;
}

// `cat a.csv b.csv` of two exports that each start with a byte order mark:
// the second header is BOM + header. Before, it was read as host "\uFEFFip"
// on ToR "PSW/ASW" (a phantom host and pod, exit 0).
TEST(FabricRefusalsTest, ARepeatedHeaderWithAByteOrderMarkIsNotAHost) {
  auto f = OneGpuCsv(
      "ip,DSW,PSW,ASW\nh1,G0,P0,S1\nh2,G0,P0,S2\n"
      "\xEF\xBB\xBFip,DSW,PSW,ASW\nh3,G0,P0,S1\n",
      "ab.csv");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->hosts().size(), 3u);
  EXPECT_LT(f->FindNode("PSW/ASW"), 0);
  EXPECT_NE(
      Warnings(*f).find("ab.csv: 1 row left out, repeating the header: line 4"),
      std::string::npos)
      << Warnings(*f);
}

// A stray quote. Before, `S1"` named a ToR of its own, and a quote opened
// in an ip swallowed the rows after it up to the next quote (h6 and h7
// lost, only line 3 named).
TEST(FabricRefusalsTest, AStrayQuoteLeavesOutItsRowAndNoOther) {
  auto f = OneGpuCsv(
      "ip,DSW,PSW,ASW\nh1,G0,P0,S1\nh2,G0,P0,S1\"\nh3,G0,P0,S2\n", "q.csv");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->hosts().size(), 2u);
  EXPECT_LT(f->FindNode("P0/S1\""), 0);
  EXPECT_NE(Warnings(*f).find("quote inside an unquoted field at column 12: "
                              "line 3"),
            std::string::npos)
      << Warnings(*f);
  auto g = OneGpuCsv(
      "ip,DSW,PSW,ASW\nh1,G0,P0,S1\n\"h5,G0,P0,S1\nh6,G0,P0,S1\n"
      "h7,G0,P0,S2\nh8\",G0,P0,S2\n",
      "open.csv");
  ASSERT_TRUE(g.ok()) << g.status();
  std::vector<std::string> hosts;
  for (const auto& h : g->hosts()) hosts.push_back(h.name);
  EXPECT_EQ(hosts, (std::vector<std::string>{"h1", "h6", "h7"}));
  EXPECT_NE(Warnings(*g).find("line 3"), std::string::npos) << Warnings(*g);
  EXPECT_NE(Warnings(*g).find("line 6"), std::string::npos) << Warnings(*g);
}

// The tiny SimAI file with line 2 `switches` and link line `at` (0-based)
// replaced by `link`, read.
absl::Status TinySimAi(const std::string& switches, size_t at = 0,
                       const std::string& link = "") {
  std::vector<std::string> links = TinySimAiLinks();
  if (!link.empty()) links[at] = link;
  std::string text = TinySimAiText(links);
  const size_t l2 = text.find('\n') + 1;
  text.replace(l2, text.find('\n', l2) - l2, switches);
  return ParseSimAi(text, "tiny.txt").status();
}

// The header declares 2 NVSwitches and 4 switches: six ids. Before, a
// shorter line was taken and the NVSwitches left off it became ToRs.
TEST(FabricRefusalsTest, ASimAiSwitchLineShorterThanDeclaredIsRefused) {
  EXPECT_TRUE(TinySimAi("4 5 6 7 8 9").ok());
  ExpectRefused(TinySimAi("6 7 8 9"),
                "tiny.txt:2: header declares 6 switch ids, line has 4");
  ExpectRefused(TinySimAi("4"),
                "tiny.txt:2: header declares 6 switch ids, line has 1");
  ExpectRefused(TinySimAi(""),
                "tiny.txt:2: header declares 6 switch ids, line has 0");
}

// Before, words after a link's error rate were ignored.
TEST(FabricRefusalsTest, ASimAiLinkLineWithExtraWordsIsRefused) {
  EXPECT_TRUE(TinySimAi("4 5 6 7 8 9", 4, "0 6 200Gbps 0.001ms 0").ok());
  ExpectRefused(TinySimAi("4 5 6 7 8 9", 4, "0 6 200Gbps 0.001ms 0 7 8"),
                "tiny.txt:7: '7' after the error rate");
}

// Host P0's GPU 0 attaches as `P0/nic0`; pod P0's ASW nic0 is ToR
// `P0/nic0`. Before, both were taken under one name (--degrade found the
// ToR).
TEST(FabricRefusalsTest, AToRNamedAsAHostsNicIsRefused) {
  auto f = OneGpuCsv("ip,DSW,PSW,ASW\nh1,G0,P0,S1\nP0,G0,P0,nic0\n", "nic.csv");
  ExpectRefused(f.status(),
                "nic.csv:3: two elements are named 'P0/nic0' "
                "(the nic of host 'P0' from line 3 and the tor "
                "from line 3)");
  EXPECT_TRUE(
      OneGpuCsv("ip,DSW,PSW,ASW\nh1,G0,P0,S1\nP0,G0,P0,S2\n", "nic.csv").ok());
}

// A C1 control character (U+009B is a terminal's CSI) is refused like a C0
// one; before, `h\xC2\x9B31mred` was taken. U+00A0 and up stay names.
TEST(FabricRefusalsTest, ANameWithAC1ControlCharacterIsRefused) {
  auto csv = [](const std::string& host) {
    return ParseClosCsv("ip,DSW,PSW,ASW\nh0,G,P,S0\n\"" + host + "\",G,P,S1\n",
                        "t.csv", ClosCsvOptions{})
        .status();
  };
  ExpectRefused(csv("h\xC2\x9B"
                    "31mred"),
                "t.csv:3: host name 'h\\xc2\\x9b");
  ExpectRefused(csv("h\xC2\x9B"
                    "31mred"),
                "holds the control character U+009B: a name is printable "
                "text");
  ExpectRefused(csv("h\xC2\x80"), "holds the control character U+0080");
  EXPECT_TRUE(csv("h\xC2\xA0x\xC3\xBC").ok());
}

// Two HCAs on leaf S-01; switch S-02 without ports; S-03 and S-04 cabled
// only to each other.
constexpr char kIslands[] =
    "Switch\t4 \"S-01\"\t\t# \"leaf\" base port 0 lid 1 lmc 0\n"      // 1
    "[1]\t\"H-11\"[1](11) \t\t# \"h1 HCA-1\" lid 2 4xEDR\n"           // 2
    "[2]\t\"H-12\"[1](12) \t\t# \"h2 HCA-1\" lid 3 4xEDR\n"           // 3
    "\n"                                                              // 4
    "Switch\t36 \"S-02\"\t\t# \"lonely\" base port 0 lid 4 lmc 0\n"   // 5
    "\n"                                                              // 6
    "Switch\t4 \"S-03\"\t\t# \"islandA\" base port 0 lid 5 lmc 0\n"   // 7
    "[1]\t\"S-04\"[1]\t\t# \"islandB\" lid 6 4xEDR\n"                 // 8
    "\n"                                                              // 9
    "Switch\t4 \"S-04\"\t\t# \"islandB\" base port 0 lid 6 lmc 0\n"   // 10
    "[1]\t\"S-03\"[1]\t\t# \"islandA\" lid 5 4xEDR\n"                 // 11
    "\n"                                                              // 12
    "Ca\t1 \"H-11\"\t\t# \"h1 HCA-1\"\n"                              // 13
    "[1](11) \t\"S-01\"[1]\t\t# lid 2 lmc 0 \"leaf\" lid 1 4xEDR\n"   // 14
    "\n"                                                              // 15
    "Ca\t1 \"H-12\"\t\t# \"h2 HCA-1\"\n"                              // 16
    "[1](12) \t\"S-01\"[2]\t\t# lid 3 lmc 0 \"leaf\" lid 1 4xEDR\n";  // 17

// Before, they were counted among the fabric's switches without a word.
TEST(FabricRefusalsTest, SwitchesNoHcaReachesAreLeftOutAndNamed) {
  auto file = ParseIbnetdiscover(kIslands, "islands.topo");
  ASSERT_TRUE(file.ok()) << file.status();
  auto f = FabricFromIbnetdiscover(*file, "islands.topo", {}, IbOptions{});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_NE(f->description.find("2 HCAs, 1 switches"), std::string::npos)
      << f->description;
  EXPECT_NE(Warnings(*f).find(
                "islands.topo:5: 3 switch(es) no HCA reaches left out (no "
                "ports, or cabled only to switches no HCA reaches): S-02 "
                "\"lonely\" (line 5), S-03 \"islandA\" (line 7), S-04 "
                "\"islandB\" (line 10)"),
            std::string::npos)
      << Warnings(*f);
  EXPECT_LT(f->FindNode("lonely"), 0);
}

// Before, tors_per_pod and agg_uplinks were ignored on a leaf/spine.
TEST(FabricRefusalsTest, AThreeTierKeyOnALeafSpineIsRefused) {
  for (const char* key : {"tors_per_pod=4", "agg_uplinks=2"}) {
    ExpectRefused(
        ParseGeneratorSpec(absl::StrCat("gen:leafspine,gpus=16,", key))
            .status(),
        " is a gen:3tier key");
    EXPECT_TRUE(
        ParseGeneratorSpec(absl::StrCat("gen:3tier,gpus=16,", key)).ok());
  }
}

// 16384 hosts each under its own ASW: the routing table is the ToRs times
// the nodes. Before, the advice was "fewer --aggs-per-pod or
// --cores-per-agg", which changes little.
TEST(FabricRefusalsTest, ARoutingTableTooLargeNamesTheToRs) {
  std::string csv = "ip,DSW,PSW,ASW\n";
  for (int i = 0; i < 16384; ++i) {
    absl::StrAppend(&csv, "h", i, ",G0,P0,S", i, "\n");
  }
  auto f = ParseClosCsv(csv, "manytors.csv", ClosCsvOptions{});
  ExpectRefused(f.status(),
                "(the routing table is 16384 ToRs x 163912 nodes, 163840 of "
                "them GPUs, hosts and ToRs: fewer ToRs (the hosts under "
                "fewer ASWs) or fewer hosts)");
  EXPECT_EQ(f.status().message().find("--aggs-per-pod"), std::string::npos)
      << f.status();
}

// infiniband-diags' node-name-map: `0x<guid> "name"`, the name in quotes
// (spaces and '#' in it), `0X` too. Before, refused as "expected '<guid>
// <host>'".
TEST(FabricRefusalsTest, AHostMapInNodeNameMapFormatIsRead) {
  auto map = ParseIbHostMap(
      "# node-name-map\n"
      "0x506b4b03003fa98a \"hostA\"\n"
      "0X506B4B03003FA9A2 \"host B #2\"  # a comment\r\n"
      "0x11 plain\n",
      "map.txt");
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->at(0x506b4b03003fa98aULL).host, "hostA");
  EXPECT_EQ(map->at(0x506b4b03003fa9a2ULL).host, "host B #2");
  EXPECT_EQ(map->at(0x11).host, "plain");
  ExpectRefused(ParseIbHostMap("0x1 \"open\n", "map.txt").status(),
                "map.txt:1: expected '<guid> <host>' or '<guid> \"<host>\"'");
  ExpectRefused(ParseIbHostMap("0x1 \"a\" b\n", "map.txt").status(),
                "map.txt:1: expected");
  ExpectRefused(ParseIbHostMap("0x1 \"\"\n", "map.txt").status(),
                "map.txt:1: expected");
}

}  // namespace
}  // namespace pitstop::c4p
