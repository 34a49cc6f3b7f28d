#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "src/c4p/fabric_io.h"
#include "src/c4p/ibnetdiscover.h"
#include "tests/c4p/shared_topology.h"
#include "tests/c4p/tiny_simai.h"

namespace pitstop::c4p {
namespace {

TEST(FabricTest, SimAiTiersAndRouting) {
  auto f = ParseSimAi(TinySimAiText(TinySimAiLinks()), "tiny.txt");
  ASSERT_TRUE(f.ok()) << f.status();
  auto fab = FabricFromSimAi(*f, "tiny.txt");
  ASSERT_TRUE(fab.ok()) << fab.status();
  EXPECT_EQ(fab->gpu_count(), 4);
  EXPECT_EQ(fab->hosts().size(), 2u);
  const int tor6 = fab->FindNode("tor6"), tor7 = fab->FindNode("tor7");
  ASSERT_GE(tor6, 0);
  ASSERT_GE(tor7, 0);
  EXPECT_EQ(fab->node(fab->FindNode("spine8")).kind, NodeKind::kAgg);
  // From ToR 6 to ToR 7: two spines, so two next hops.
  std::vector<int> hops;
  fab->NextHops(tor6, fab->tor_index(tor7), &hops);
  EXPECT_EQ(hops.size(), 2u);
  // GPU 0's NIC lands on tor6.
  const int g0 = fab->FindNode("host0/gpu0");
  ASSERT_EQ(fab->nic_uplinks(g0).size(), 1u);
  EXPECT_EQ(fab->tor_of_uplink(fab->nic_uplinks(g0)[0]), tor6);
  EXPECT_EQ(fab->LinkName(fab->nic_uplinks(g0)[0]), "host0/nic0->tor6");
}

TEST(FabricTest, FindLinksBySpec) {
  auto f = ParseSimAi(TinySimAiText(TinySimAiLinks()), "tiny.txt");
  ASSERT_TRUE(f.ok());
  auto fab = FabricFromSimAi(*f, "tiny.txt");
  ASSERT_TRUE(fab.ok());
  auto one = fab->FindLinks("tor6->spine8");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->size(), 1u);
  auto both = fab->FindLinks("tor6-spine8");
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->size(), 2u);
  auto nic = fab->FindLinks("host1/nic1");
  ASSERT_TRUE(nic.ok()) << nic.status();
  EXPECT_EQ(nic->size(), 2u);
  EXPECT_FALSE(fab->FindLinks("tor6-tor7").ok());
  EXPECT_FALSE(fab->FindLinks("nosuch").ok());
}

TEST(FabricTest, SimAiErrorsNameFileAndLine) {
  auto bad_link =
      ParseSimAi("10 2 2 4 1 H20\n4 5 6 7 8 9\n0 4 fast 1ms 0\n", "x.txt");
  ASSERT_FALSE(bad_link.ok());
  EXPECT_NE(bad_link.status().message().find("x.txt:3:"), std::string::npos)
      << bad_link.status();
  auto out_of_range =
      ParseSimAi("10 2 2 4 1 H20\n4 5 6 7 8 9\n0 42 100Gbps 1ms 0\n", "y.txt");
  ASSERT_FALSE(out_of_range.ok());
  EXPECT_NE(out_of_range.status().message().find("y.txt:3:"),
            std::string::npos);
  auto truncated = ParseSimAi(
      "10 2 2 4 12 H20\n4 5 6 7 8 9\n0 4 900Gbps 0.000025ms 0\n", "z.txt");
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().message().find("z.txt:1:"), std::string::npos);
  EXPECT_NE(truncated.status().message().find("declares 12"),
            std::string::npos);
}

TEST(FabricTest, ClosCsvBuildsThreeTiersAndSaysWhatItAssumed) {
  const std::string csv =
      "ip,DSW,PSW,ASW\n"
      "10.0.0.1,dsw0,psw0,asw0\n"
      "10.0.0.2,dsw0,psw0,asw0\n"
      "10.0.0.3,dsw0,psw0,asw1\n"
      "10.0.1.1,dsw0,psw1,asw2\n";
  ClosCsvOptions o;
  o.gpus_per_host = 2;
  o.aggs_per_pod = 4;
  o.cores_per_agg = 2;
  auto fab = ParseClosCsv(csv, "c.csv", o);
  ASSERT_TRUE(fab.ok()) << fab.status();
  EXPECT_EQ(fab->gpu_count(), 8);
  // Link specs whose names hold '-'.
  ClosCsvOptions dashed = o;
  auto d = ParseClosCsv(
      "ip,DSW,PSW,ASW\n10.0.0.1,DSW-0,PSW-0,ASW-0\n10.0.0.2,DSW-0,PSW-1,"
      "ASW-1\n",
      "d.csv", dashed);
  ASSERT_TRUE(d.ok()) << d.status();
  auto l = d->FindLinks("PSW-0/ASW-0-PSW-0/agg1");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->size(), 2u);
  auto one = d->FindLinks("PSW-1/ASW-1->PSW-1/agg0");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->size(), 1u);
  EXPECT_FALSE(d->FindLinks("PSW-0/ASW-0-PSW-1/agg1").ok());  // not cabled
  auto unknown = d->FindLinks("PSW-0/ASW-0-nosuch");
  ASSERT_FALSE(unknown.ok());
  EXPECT_FALSE(fab->assumptions().empty());
  const int asw0 = fab->FindNode("psw0/asw0"),
            asw2 = fab->FindNode("psw1/asw2");
  ASSERT_GE(asw0, 0);
  // asw0 -> asw2 crosses pods: up to an agg (4 choices), then a core.
  EXPECT_EQ(fab->Distance(asw0, fab->tor_index(asw2)), 4);
  std::vector<int> hops;
  fab->NextHops(asw0, fab->tor_index(asw2), &hops);
  EXPECT_EQ(hops.size(), 4u);
}

TEST(FabricTest, ClosCsvErrorsNameFileAndLine) {
  ClosCsvOptions o;
  auto no_header = ParseClosCsv("10.0.0.1,a,b,c\n", "h.csv", o);
  ASSERT_FALSE(no_header.ok());
  EXPECT_NE(no_header.status().message().find("h.csv:1:"), std::string::npos);
  // Nothing left to place: refused.
  auto short_row = ParseClosCsv("ip,DSW,PSW,ASW\n1,d,p0\n", "s.csv", o);
  ASSERT_FALSE(short_row.ok());
  EXPECT_NE(short_row.status().message().find("s.csv:1:"), std::string::npos)
      << short_row.status();
}

// In Alibaba's published data an ASW name is scoped by its PSW group: the
// same name under two groups is two switches, not an error.
TEST(FabricTest, ClosCsvScopesAswNamesByTheirPswGroup) {
  ClosCsvOptions o;
  o.gpus_per_host = 1;
  auto f = ParseClosCsv("ip,DSW,PSW,ASW\n1,d,p0,a0\n2,d,p1,a0\n", "m.csv", o);
  ASSERT_TRUE(f.ok()) << f.status();
  const int a = f->FindNode("p0/a0"), b = f->FindNode("p1/a0");
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  EXPECT_NE(a, b);
  EXPECT_EQ(f->FindNode("a0"), -1);
  // Two ToRs in two pods: four hops apart.
  EXPECT_EQ(f->Distance(a, f->tor_index(b)), 4);
  // A PSW name under two DSWs is two pods, named DSW/PSW.
  auto g = ParseClosCsv("ip,DSW,PSW,ASW\n1,d0,p,a\n2,d1,p,a\n", "g.csv", o);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_GE(g->FindNode("d0/p/a"), 0);
  EXPECT_GE(g->FindNode("d1/p/agg0"), 0);
}

// Rows that cannot place a host are left out and reported by line; the
// file is not refused.
TEST(FabricTest, ClosCsvLeavesOutIncompleteRowsNamingTheirLines) {
  ClosCsvOptions o;
  o.gpus_per_host = 1;
  auto f = ParseClosCsv(
      "ip,DSW,PSW,ASW\n"
      "1,d,p,a\n"  // 2
      "2,d,p\n"    // 3: a column short
      "3,d,,a\n"   // 4: no PSW
      "1,d,p,a\n"  // 5: the same row again
      "4,d,p,a\n"  // 6
      "5,d,p,a\n"  // 7: host 5 placed twice ...
      "5,d,p,b\n"  // 8: ... at another ASW
      ",d,p,a\n",  // 9: no ip
      "i.csv", o);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->hosts().size(), 2u);  // 1 and 4
  EXPECT_EQ(f->hosts()[0].name, "1");
  EXPECT_EQ(f->hosts()[1].name, "4");
  std::string all;
  for (const std::string& w : f->warnings()) all += w + "\n";
  EXPECT_NE(all.find("1 row left out, with fewer than the header's 4 "
                     "columns: line 3"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("incomplete (an empty DSW, PSW or ASW): line 4"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("repeating an earlier row: line 5"), std::string::npos)
      << all;
  EXPECT_NE(all.find("at two different switches: lines 7, 8"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("without an ip: line 9"), std::string::npos) << all;
}

// Two exports concatenated (`cat pod_a.csv pod_b.csv`): the second header is
// not a host. Before, it was read as host "ip" on ToR "PSW/ASW" in a pod
// "PSW" under a DSW "DSW", silently.
TEST(FabricTest, ClosCsvRepeatedHeaderIsNotAHost) {
  ClosCsvOptions o;
  o.gpus_per_host = 1;
  auto f = ParseClosCsv(
      "ip,DSW,PSW,ASW\n"
      "1,d,p,a\n"
      "2,d,p,b\n"
      "IP, DSW, PSW, ASW\r\n"  // 4: the next file's header
      "3,d,q,a\n",
      "cat.csv", o);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->hosts().size(), 3u);
  for (const FabricHost& h : f->hosts()) EXPECT_NE(h.name, "ip");
  EXPECT_LT(f->FindNode("PSW/ASW"), 0);
  std::string all;
  for (const std::string& w : f->warnings()) all += w + "\n";
  EXPECT_NE(all.find("cat.csv: 1 row left out, repeating the header: line 4"),
            std::string::npos)
      << all;
  // A second header in another column order would misread every row after
  // it: refused, naming both lines.
  auto g = ParseClosCsv("ip,DSW,PSW,ASW\n1,d,p,a\nASW,ip,PSW,DSW\nb,2,p,d\n",
                        "mixed.csv", o);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("mixed.csv:3: a header in another "
                                      "column order than line 1's"),
            std::string::npos)
      << g.status();
}

// Names are scoped by their parent and joined with '/': before, ASW `A/B`
// under PSW `X` and ASW `B` under PSW `X/A` were both ToR `X/A/B`, two
// switches under one name (--degrade and the live planner found the first).
// A part holding a '/' is now quoted.
TEST(FabricTest, ClosCsvNamesWithASlashStayTwoSwitches) {
  ClosCsvOptions o;
  o.gpus_per_host = 1;
  auto f =
      ParseClosCsv("ip,DSW,PSW,ASW\nh0,d,X,A/B\nh1,d,X/A,B\nh2,d,\"\"\"q\",C\n",
                   "slash.csv", o);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->tor_count(), 3);
  const int a = f->FindNode("X/\"A/B\""), b = f->FindNode("\"X/A\"/B");
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  EXPECT_NE(a, b);
  EXPECT_EQ(f->FindNode("X/A/B"), -1);
  EXPECT_GE(f->FindNode("\"X/A\"/agg0"), 0);
  EXPECT_GE(f->FindNode("\"\"\"q\"/C"), 0);  // PSW `"q`: its quote doubled
  // What quoting cannot tell apart (an ASW named like the aggregation
  // switches its reader adds) is refused, naming the line.
  auto g =
      ParseClosCsv("ip,DSW,PSW,ASW\nh0,d,P,S0\nh1,d,P,agg0\n", "agg.csv", o);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find(
                "agg.csv:3: two elements are named 'P/agg0' (the agg from "
                "line 2 and the tor from this line)"),
            std::string::npos)
      << g.status();
}

// Many planes and uplinks: before, plane 1's spine 10 and plane 11's spine 0
// were both "spinep110".
TEST(FabricTest, GeneratedPlanesNameEverySwitchOnce) {
  auto o = ParseGeneratorSpec(
      "gen:leafspine,gpus=2,gpus_per_host=1,hosts_per_tor=2,planes=12,"
      "tor_uplinks=11");
  ASSERT_TRUE(o.ok()) << o.status();
  auto f = GenerateFabric(*o);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_NE(f->FindNode("spine10p1"), f->FindNode("spine0p11"));
  EXPECT_GE(f->FindNode("spine0p11"), 0);
}

TEST(FabricTest, GeneratedLeafSpineAndThreeTierHaveTheAskedShape) {
  auto ls = ParseGeneratorSpec("gen:leafspine,gpus=256,hosts_per_tor=8");
  ASSERT_TRUE(ls.ok()) << ls.status();
  auto a = GenerateFabric(*ls);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->gpu_count(), 256);
  EXPECT_EQ(a->hosts().size(), 32u);
  // Rail-optimised: host0/gpu3 and host9/gpu3 are on different segments'
  // rail-3 ToRs, two hops apart through a spine; 8 spines to choose from.
  const int g = a->FindNode("host0/gpu3"), h = a->FindNode("host9/gpu3");
  const int t0 = a->tor_of_uplink(a->nic_uplinks(g)[0]);
  const int t1 = a->tor_of_uplink(a->nic_uplinks(h)[0]);
  EXPECT_EQ(a->Distance(t0, a->tor_index(t1)), 2);
  std::vector<int> hops;
  a->NextHops(t0, a->tor_index(t1), &hops);
  EXPECT_EQ(hops.size(), 8u);

  auto tt = ParseGeneratorSpec(
      "gen:3tier,gpus=512,hosts_per_tor=4,tors_per_pod=8,planes=2,rail=0");
  ASSERT_TRUE(tt.ok()) << tt.status();
  auto b = GenerateFabric(*tt);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->gpu_count(), 512);
  const int x = b->FindNode("host0/gpu0"), y = b->FindNode("host63/gpu0");
  ASSERT_EQ(b->nic_uplinks(x).size(), 2u);  // two planes
  const int tx = b->tor_of_uplink(b->nic_uplinks(x)[0]);
  const int ty = b->tor_of_uplink(b->nic_uplinks(y)[0]);
  EXPECT_EQ(b->Distance(tx, b->tor_index(ty)), 4);
  // Planes do not meet.
  const int ty2 = b->tor_of_uplink(b->nic_uplinks(y)[1]);
  EXPECT_EQ(b->Distance(tx, b->tor_index(ty2)), -1);

  EXPECT_FALSE(ParseGeneratorSpec("gen:torus,gpus=8").ok());
  EXPECT_FALSE(ParseGeneratorSpec("gen:leafspine,gpus=x").ok());
  EXPECT_FALSE(ParseGeneratorSpec("gen:leafspine,colour=3").ok());
  EXPECT_FALSE(ParseGeneratorSpec("gen:leafspine,gpus=12").ok());
  GeneratorOptions odd;
  odd.gpus = 12;
  EXPECT_FALSE(GenerateFabric(odd).ok());
}

// Before, tor_uplinks=0 and agg_uplinks=0 silently meant the default,
// rail=2 meant 1, a repeated key took the last value, and planes=0,
// nic_gbps=0 or hosts_per_tor=0 got one message naming four keys at once.
TEST(FabricTest, GeneratorKeysAreRefusedNamingTheKeyAndItsRange) {
  for (const auto& [spec, said] :
       std::vector<std::pair<std::string, std::string>>{
           {"gen:leafspine,tor_uplinks=0", "tor_uplinks=0: allowed 1..512"},
           {"gen:3tier,agg_uplinks=0", "agg_uplinks=0: allowed 1..512"},
           {"gen:leafspine,rail=2", "rail=2: allowed 0..1"},
           {"gen:leafspine,gpus=64,gpus=128", "gpus is given twice"},
           {"gen:leafspine,planes=0", "planes=0: allowed 1..16"},
           {"gen:leafspine,hosts_per_tor=0", "hosts_per_tor=0: allowed 1..512"},
           {"gen:leafspine,nic_gbps=0",
            "nic_gbps=0: a link speed is a finite number of Gbps, at least "
            "0.001 (1 Mb/s)"},
           {"gen:leafspine,uplink_gbps=1e-300", "uplink_gbps=1e-300: a link"},
           {"gen:leafspine,gpus=1000000000",
            "gpus=1000000000: allowed 1..131072"},
           {"gen:leafspine,tor_uplinks=1000000", "tor_uplinks=1000000"},
           {"gen:leafspine,gpus=12",
            "gpus=12 is not a multiple of gpus_per_host=8"},
       }) {
    absl::StatusOr<GeneratorOptions> o = ParseGeneratorSpec(spec);
    ASSERT_FALSE(o.ok()) << spec;
    EXPECT_NE(o.status().message().find(said), std::string::npos)
        << spec << ": " << o.status();
  }
  auto rail0 = ParseGeneratorSpec("gen:leafspine,rail=0,tor_uplinks=4");
  ASSERT_TRUE(rail0.ok()) << rail0.status();
  EXPECT_FALSE(rail0->rail_optimised);
  EXPECT_EQ(rail0->tor_uplinks, 4);
  // In range key by key, too large together: refused before building.
  auto huge = ParseGeneratorSpec(
      "gen:3tier,gpus=131072,hosts_per_tor=1,tors_per_pod=1,"
      "tor_uplinks=512,agg_uplinks=512,planes=8");
  ASSERT_TRUE(huge.ok()) << huge.status();
  absl::StatusOr<Fabric> f = GenerateFabric(*huge);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("routing table"), std::string::npos)
      << f.status();
}

TEST(FabricTest, SharedSimAiFilesLoad) {
  for (const char* name : {"Rail_Opti_SingleToR_16g_8gps_200Gbps_H20.txt",
                           "Rail_Opti_SingleToR_64gpu_8gps_200Gbps_H20.txt"}) {
    const auto path = SharedTopology(name);
    if (!std::filesystem::exists(path)) {
      GTEST_SKIP() << "../shared/data/topology is absent (" << path << ")";
    }
    auto fab = LoadFabric(path.string(), ClosCsvOptions{});
    ASSERT_TRUE(fab.ok()) << fab.status();
    EXPECT_GE(fab->gpu_count(), 8) << name;
    EXPECT_EQ(fab->gpu_count() % 8, 0) << name;
  }
}

// Writes `text` to a file of that name in the test's temporary directory.
std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

constexpr char kCsvRows[] =
    "h0,G0,P0,S0\nh1,G0,P0,S1\nh2,G0,P1,S0\nh3,G0,P1,S1\n";

TEST(LoadFabricTest, CsvWithAByteOrderMarkIsRead) {
  const std::string path = WriteTemp(
      "bom.csv", std::string("\xEF\xBB\xBFip,DSW,PSW,ASW\n") + kCsvRows);
  auto f = LoadFabric(path, ClosCsvOptions{});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->hosts().size(), 4u);
}

// Windows PowerShell's `>` and Excel's "Unicode text" write UTF-16 with a
// byte order mark. Before, the CSV was refused as "expected a header naming
// the columns" and a host map as "expected '<guid> <host>'": neither said
// why.
TEST(LoadFabricTest, Utf16FilesAreRefusedSayingSo) {
  std::string utf16 = "\xFF\xFE";
  for (char c : std::string("ip,DSW,PSW,ASW\r\n") + kCsvRows) {
    utf16 += c;
    utf16 += '\0';
  }
  auto f = LoadFabric(WriteTemp("ps.csv", utf16), ClosCsvOptions{});
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("ps.csv:1: UTF-16 text"),
            std::string::npos)
      << f.status();
  auto m = ParseIbHostMap(utf16, "map.txt");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("map.txt:1: UTF-16 text"),
            std::string::npos)
      << m.status();
}

// A host map given with a fabric that is not ibnetdiscover output names
// nothing: said, not silently dropped.
TEST(LoadFabricTest, AHostMapForAnotherFormatIsWarned) {
  const std::string csv =
      WriteTemp("hosts.csv", std::string("ip,DSW,PSW,ASW\n") + kCsvRows);
  IbOptions ib;
  ib.host_map = "guids.txt";
  auto f = LoadFabric(csv, ClosCsvOptions{}, ib);
  ASSERT_TRUE(f.ok()) << f.status();
  std::string all;
  for (const std::string& w : f->warnings()) all += w + "\n";
  EXPECT_NE(all.find("--ib-host-map guids.txt ignored"), std::string::npos)
      << all;
}

TEST(LoadFabricTest, CsvIsRecognisedByItsHeaderWhateverTheName) {
  const std::string path =
      WriteTemp("reordered.txt",
                "ASW,ip,PSW,DSW\nS0,h0,P0,G0\nS1,h1,P0,G0\nS0,h2,P1,G0\n");
  auto f = LoadFabric(path, ClosCsvOptions{});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->hosts().size(), 3u);
}

// Fields quoted as RFC 4180 writes them (a spreadsheet's export, Python's
// csv module around a name with a comma): before, the quotes stayed in the
// names (host '"10.0.0.1"', ToR '"P0"/"S0"') and a quoted header was not
// recognised as the CSV layout at all.
TEST(LoadFabricTest, CsvQuotedFieldsAreReadAsRfc4180) {
  const std::string path =
      WriteTemp("quoted.txt",
                "\"ip\", \"DSW\",\"PSW\",\"ASW\"\r\n"
                "\"10.0.0.1\",\"G0\",\"P0\",\"S0\"\r\n"  // 2
                "\"h,2\",G0,P0,\"S 1\"\n"                // 3: a comma, a space
                "\"h\"\"3\",G0,P0,S0\n"                  // 4: an escaped quote
                "\"h4,G0,P0,S1\n"                        // 5: not closed
                "\"h5\"x,G0,P0,S1\n");                   // 6: text after it
  ClosCsvOptions o;
  o.gpus_per_host = 1;
  auto f = LoadFabric(path, o);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->hosts().size(), 3u);
  EXPECT_EQ(f->hosts()[0].name, "10.0.0.1");
  EXPECT_EQ(f->hosts()[1].name, "h,2");
  EXPECT_EQ(f->hosts()[2].name, "h\"3");
  EXPECT_GE(f->FindNode("P0/S0"), 0);
  EXPECT_GE(f->FindNode("P0/S 1"), 0);
  std::string all;
  for (const std::string& w : f->warnings()) all += w + "\n";
  EXPECT_NE(all.find("with a quote at column 1 not closed on its line: "
                     "line 5"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("with text after a closing quote at column 5: line 6"),
            std::string::npos)
      << all;
}

// RFC 4180 lets a quoted field hold a line break. Before, the continuation
// line was read as a row of its own: a host named `1"`. Now the lines are
// one record: left out, named, when the break is in a name; read when it is
// in another column.
TEST(LoadFabricTest, CsvQuotedLineBreakIsOneRecordNotABogusHost) {
  const std::string path =
      WriteTemp("breaks.csv",
                "ip,DSW,PSW,ASW,note\n"
                "h0,G0,P0,S0,\n"                    // 2
                "\"h\n1\",G0,P0,S1,\n"              // 3-4: in the ip
                "h2,G0,P0,S1,\n"                    // 5
                "h3,G0,P0,S1,\"two\r\nlines\"\r\n"  // 6-7: in the note
                "h4,G0,P0,S0,\n");                  // 8
  ClosCsvOptions o;
  o.gpus_per_host = 1;
  auto f = LoadFabric(path, o);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->hosts().size(), 4u);
  for (const FabricHost& h : f->hosts()) {
    EXPECT_EQ(h.name.find('"'), std::string::npos) << h.name;
  }
  EXPECT_EQ(f->hosts()[1].name, "h2");
  EXPECT_EQ(f->hosts()[1].source_line, 5);
  EXPECT_EQ(f->hosts()[2].name, "h3");
  EXPECT_EQ(f->hosts()[3].source_line, 8);
  std::string all;
  for (const std::string& w : f->warnings()) all += w + "\n";
  EXPECT_NE(all.find("1 row left out, with a line break inside a quoted ip, "
                     "DSW, PSW or ASW (RFC 4180 allows one; a name cannot "
                     "hold it): line 3"),
            std::string::npos)
      << all;
}

TEST(LoadFabricTest, AnUnrecognisedFormatSaysSoAndListsTheFormats) {
  for (const auto& [name, text] :
       {std::pair<std::string, std::string>{"fabric.json",
                                            "{\"switches\": []}\n"},
        {"fabric.dot", "digraph fabric {\n  tor0 -> spine0;\n}\n"}}) {
    auto f = LoadFabric(WriteTemp(name, text), ClosCsvOptions{});
    ASSERT_FALSE(f.ok()) << name;
    const std::string m(f.status().message());
    EXPECT_NE(m.find(name + ":1: unrecognised fabric format"),
              std::string::npos)
        << m;
    for (const char* format : {"SimAI", "ip,DSW,PSW,ASW", "ibnetdiscover"}) {
      EXPECT_NE(m.find(format), std::string::npos) << m;
    }
  }
}

}  // namespace
}  // namespace pitstop::c4p
