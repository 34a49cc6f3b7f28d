// Fabric::Finalize's check: a fabric that cannot carry a job is refused
// naming the element and the line; one that is merely unusual loads with a
// warning.
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "src/c4p/evaluate.h"
#include "src/c4p/fabric_io.h"
#include "src/c4p/ibnetdiscover.h"
#include "tests/c4p/shared_topology.h"
#include "tests/c4p/tiny_simai.h"

namespace pitstop::c4p {
namespace {

// The SimAI text with links replaced (line -> text, "" drops the line).
absl::StatusOr<Fabric> Tiny(
    const std::vector<std::pair<int, std::string>>& edits) {
  std::vector<std::string> links = TinySimAiLinks();
  for (const auto& [line, text] : edits) links[line - 3] = text;
  std::vector<std::string> kept;
  for (const std::string& l : links) {
    if (!l.empty()) kept.push_back(l);
  }
  const std::string text = TinySimAiText(kept);
  auto f = ParseSimAi(text, "tiny.txt");
  if (!f.ok()) return f.status();
  return FabricFromSimAi(*f, "tiny.txt");
}

void ExpectRefused(const absl::StatusOr<Fabric>& f,
                   const std::vector<std::string>& parts) {
  ASSERT_FALSE(f.ok());
  for (const std::string& p : parts) {
    EXPECT_NE(f.status().message().find(p), std::string::npos)
        << "'" << p << "' not in: " << f.status();
  }
}

TEST(FabricCheckTest, ZeroBandwidthIsRefusedNamingTheLinkAndLine) {
  ExpectRefused(Tiny({{12, "6 9 0Gbps 0.001ms 0"}}),
                {"tiny.txt:12:", "tor6->spine9", "bandwidth of 0"});
}

// Before, 1e-300Gbps was planned (a typo, or Gbps taken for bps).
TEST(FabricCheckTest, ASpeedBelowOneMbpsIsRefusedNamingTheLinkAndLine) {
  ExpectRefused(Tiny({{12, "6 9 1e-300Gbps 0.001ms 0"}}),
                {"tiny.txt:12:", "tor6->spine9", "bandwidth of 1e-300 Gbps",
                 "a link speed is a finite number of Gbps, at least 0.001 "
                 "(1 Mb/s)"});
  ExpectRefused(Tiny({{3, "0 4 0.0009Gbps 0.000025ms 0"}}),
                {"tiny.txt:3:", "bandwidth of 0.0009 Gbps"});
  EXPECT_TRUE(Tiny({{12, "6 9 0.001Gbps 0.001ms 0"}}).ok());
  // The NVLink speed of ibnetdiscover hosts is --nvlink-gbps's.
  const std::string ib = SharedTopologyText("ibnetdiscover_edr96.topo");
  if (ib.empty()) GTEST_SKIP() << "../shared/data/topology is absent";
  auto parsed = ParseIbnetdiscover(ib, "edr.topo");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  IbOptions o;
  o.nvlink_gbps = 1e-300;
  ExpectRefused(FabricFromIbnetdiscover(*parsed, "edr.topo", {}, o),
                {"--nvlink-gbps 1e-300: a link speed is"});
}

// Before, an empty or gzip-compressed file named .csv got the CSV reader's
// "expected a header", and one named otherwise a bare "unrecognised fabric
// format" that did not say why.
TEST(FabricCheckTest, AnEmptyOrCompressedFileIsRefusedSayingSo) {
  const std::string gzip("\x1F\x8B\x08\x08\x00\x00\x00\x00\x00\x03h.csv\0\xCB",
                         17);
  for (const auto& [name, text, said] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"empty.csv", "",
            "empty.csv: unrecognised fabric format: the file is empty"},
           {"empty.txt", "",
            "empty.txt: unrecognised fabric format: the file is empty"},
           {"blank.topo", " \n\r\n\t\n",
            "blank.topo: unrecognised fabric format: the file is blank"},
           {"bom.csv", "\xEF\xBB\xBF",
            "bom.csv: unrecognised fabric format: "
            "the file is empty"},
           {"hosts.csv", gzip,
            "hosts.csv: unrecognised fabric format: gzip-compressed data "
            "(decompress it first with gzip -d)"},
           {"fabric.txt.gz", gzip,
            "fabric.txt.gz: unrecognised fabric format: gzip-compressed"},
           {"fabric.zst", "\x28\xB5\x2F\xFD\x04\x58",
            "fabric.zst: unrecognised fabric format: zstd-compressed"},
           {"fabric.xz",
            std::string("\xFD"
                        "7zXZ\0\0\x04",
                        8),
            "fabric.xz: unrecognised fabric format: xz-compressed"}}) {
    const std::string path = ::testing::TempDir() + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    auto f = LoadFabric(path, ClosCsvOptions{});
    ExpectRefused(f, {said});
  }
}

// Names are written into -o json, --plan-out and the controller's stored
// plans, all JSON: a name that is not UTF-8 (a Latin-1 byte, binary junk in
// a field) made them throw, and pitstop plan abort. It is refused where it
// is read, naming the line and the name's bytes.
TEST(FabricCheckTest, ANameThatIsNotUtf8IsRefusedNamingTheLine) {
  const std::string csv =
      "ip,DSW,PSW,ASW\nh1,G1,P1,S1\nh2,G1,P1,S2\nh3,G1,P1,S\xff\n";
  auto f = ParseClosCsv(csv, "t.csv", ClosCsvOptions{});
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("t.csv:4:"), std::string::npos)
      << f.status();
  EXPECT_NE(f.status().message().find("P1/S\\xff"), std::string::npos)
      << f.status();
  EXPECT_NE(f.status().message().find("not valid UTF-8"), std::string::npos)
      << f.status();
  // Text a reader quotes in a warning (two HCAs sharing a Latin-1
  // description, named by their ids) is escaped, not refused.
  std::string ib = SharedTopologyText("ibnetdiscover_edr96.topo");
  if (!ib.empty()) {
    ib = absl::StrReplaceAll(ib, {{"\"node018 HCA-1\"", "\"n\xe9ud HCA-1\""},
                                  {"\"node017 HCA-1\"", "\"n\xe9ud HCA-1\""}});
    auto parsed = ParseIbnetdiscover(ib, "edr.topo");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    auto fab = FabricFromIbnetdiscover(*parsed, "edr.topo", {}, IbOptions{});
    ASSERT_TRUE(fab.ok()) << fab.status();
    const std::string w = absl::StrJoin(fab->warnings(), "\n");
    EXPECT_NE(w.find("n\\xe9ud HCA-1"), std::string::npos) << w;
  }
  // UTF-8 beyond ASCII is a name like any other.
  auto ok = ParseClosCsv("ip,DSW,PSW,ASW\nh\xc3\xa9,G1,P1,S1\nh2,G1,P1,S2\n",
                         "t.csv", ClosCsvOptions{});
  EXPECT_TRUE(ok.ok()) << ok.status();
}

TEST(FabricCheckTest, HostWithoutUplinkIsRefusedNamingTheHost) {
  // host1's GPUs 2 and 3 lose their NIC cables (lines 9, 10).
  ExpectRefused(Tiny({{9, ""}, {10, ""}}),
                {"tiny.txt:5:", "host host1 has no network uplink"});
  // Only GPU 3 loses its NIC: the ring cannot leave through rail 1 there.
  ExpectRefused(Tiny({{10, ""}}), {"host host1", "host1/gpu1 has no NIC"});
}

TEST(FabricCheckTest, ToRWithoutUplinkIsRefusedNamingTheSwitch) {
  // Both hosts' rail-1 NICs on tor7: tor7 needs no uplink for them.
  EXPECT_TRUE(Tiny({{13, ""}, {14, ""}}).ok());
  // host1's rail-1 NIC on tor6: host0's (on tor7) cannot reach it.
  ExpectRefused(Tiny({{10, "3 6 200Gbps 0.001ms 0"}, {13, ""}, {14, ""}}),
                {"tiny.txt:8:", "switch tor7 has no uplink",
                 "host0/nic1 below it cannot reach host1/nic1"});
}

// A job on 3 of the 4 GPUs: host1 has only its rail-0 GPU, so the ring's
// rail-1 channel goes from host0/nic1 (on tor7) to host1/nic0 (on tor6).
// With tor7's uplinks gone the fabric loads (each rail is connected within
// itself) but that hop has no path: before, the plan held a NIC id out of
// range ("host0/nic3089"), the bound was 1e30 s and --plan-out crashed.
TEST(FabricCheckTest, AJobWhoseRingCrossesToASwitchWithoutUplinksIsRefused) {
  absl::StatusOr<Fabric> f = Tiny({{13, ""}, {14, ""}});
  ASSERT_TRUE(f.ok()) << f.status();
  EvalOptions o;
  o.ranks = 3;
  o.seeds = 1;
  absl::StatusOr<EvalReport> r = Evaluate(&*f, o);
  ASSERT_FALSE(r.ok());
  for (const char* part :
       {"tiny.txt:8:", "switch tor7 has no uplink", "host0/nic1", "host1/nic0",
        "the job cannot run there",
        "channel 1's network hop from rank 0 to rank 2"}) {
    EXPECT_NE(r.status().message().find(part), std::string::npos)
        << "'" << part << "' not in: " << r.status();
  }
  // The whole fabric (each ring stays on its rail) still runs.
  o.ranks = 4;
  EXPECT_TRUE(Evaluate(&*f, o).ok());
  // The live planner's connections are checked the same way.
  absl::StatusOr<std::vector<Flow>> live =
      FlowsFromConnections(*f, {0, 1, 2}, {{1, 2, 1, 1e6}}, 1);
  ASSERT_FALSE(live.ok());
  EXPECT_NE(live.status().message().find("switch tor7 has no uplink"),
            std::string::npos)
      << live.status();
  EXPECT_TRUE(FlowsFromConnections(*f, {0, 1, 2}, {{0, 2, 0, 1e6}}, 1).ok());
}

// Before, a repeated line became a second cable with the same name
// ("tor7->spine9" twice), which --degrade and the live planner cannot tell
// apart.
TEST(FabricCheckTest, ARepeatedSimAiLinkIsRefusedNamingBothLines) {
  std::vector<std::string> links = TinySimAiLinks();
  links.push_back("9 7 400Gbps 0.001ms 0");  // 15
  const std::string text = TinySimAiText(links);
  absl::StatusOr<SimAiFile> f = ParseSimAi(text, "tiny.txt");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find(
                "tiny.txt:15: a second link between 9 and 7 (the first is "
                "line 14)"),
            std::string::npos)
      << f.status();
}

TEST(FabricCheckTest, NicNameOfAnIdThatIsNotAGpuDoesNotIndexOutOfRange) {
  absl::StatusOr<Fabric> f = Tiny({});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->NicName(3), "host1/nic1");
  EXPECT_EQ(f->NicName(-1), "nic?-1");
  EXPECT_EQ(f->NicName(3089), "nic?3089");
  EXPECT_EQ(f->NicName(6), "nic?6");  // a ToR
}

TEST(FabricCheckTest, TiersWithNoPathBetweenThemAreRefused) {
  // Each ToR reaches only its own spine: rail 0 and rail 1 never meet, and
  // each host has both rails, so hosts still share a part: accepted.
  auto split = Tiny({{12, ""}, {13, ""}});
  EXPECT_TRUE(split.ok()) << split.status();
  // host0 only on ToR 6 and host1 only on ToR 7, and the ToRs on different
  // spines: no path between the hosts.
  ExpectRefused(
      Tiny({{8, "1 6 200Gbps 0.001ms 0"},
            {9, "2 7 200Gbps 0.001ms 0"},
            {12, ""},
            {13, ""}}),
      {"tiny.txt:9: no path between switch tor6 (host0/nic0, line 7)",
       "switch tor7 (host1/nic0)", "the tiers above them are not connected"});
}

TEST(FabricCheckTest, UnusualButUsableLoadsWithWarnings) {
  // One uplink at a quarter speed, and ToR 7 with less uplink capacity
  // than its NICs: both usable.
  auto f = Tiny({{14, "7 9 100Gbps 0.001ms 0"}});
  ASSERT_TRUE(f.ok()) << f.status();
  const std::string w = absl::StrJoin(f->warnings(), "\n");
  EXPECT_NE(w.find("1 of 4 tor-agg links do not run at the tier's 400 Gbps: "
                   "tor7->spine9 (line 14) at 100 Gbps"),
            std::string::npos)
      << w;
  auto healthy = Tiny({});
  ASSERT_TRUE(healthy.ok());
  EXPECT_TRUE(healthy->warnings().empty())
      << absl::StrJoin(healthy->warnings(), "\n");
  auto thin =
      Tiny({{13, "7 8 100Gbps 0.001ms 0"}, {14, "7 9 100Gbps 0.001ms 0"}});
  ASSERT_TRUE(thin.ok()) << thin.status();
  EXPECT_NE(absl::StrJoin(thin->warnings(), "\n")
                .find("1 of 2 ToRs have less uplink than downlink capacity "
                      "(up to 2.00:1 at tor7)"),
            std::string::npos)
      << absl::StrJoin(thin->warnings(), "\n");
}

// Cables down in a real fabric: a leaf whose spine cables are all gone.
TEST(FabricCheckTest, Edr96LeafWithItsUplinksDownIsRefusedNamingIt) {
  const std::string text = SharedTopologyText("ibnetdiscover_edr96.topo");
  if (text.empty()) {
    GTEST_SKIP() << "../shared/data/topology is absent";
  }
  // Leaf ec8480's ports 1-12 go to the spines (lines 53-64); drop them and
  // the spines' lines naming ec8480.
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  for (int i = 52; i < 64; ++i) lines[i] = "";
  for (std::string& l : lines) {
    if (!l.empty() && l[0] == '[' &&
        absl::StrContains(l, "\"S-ec0d9a0300ec8480\"")) {
      l = "";
    }
  }
  const std::string cut = absl::StrJoin(lines, "\n");
  auto ib = ParseIbnetdiscover(cut, "edr.topo");
  ASSERT_TRUE(ib.ok()) << ib.status();
  auto f = FabricFromIbnetdiscover(*ib, "edr.topo", {}, IbOptions{});
  ExpectRefused(f, {"edr.topo:52:", "switch S-ec0d9a0300ec8480 has no uplink"});
}

}  // namespace
}  // namespace pitstop::c4p
