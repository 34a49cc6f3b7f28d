// What a new user's walkthrough found the fabric readers and the
// evaluation took without a word (issue #32): SimAI files listing a switch
// twice or with counts, latencies and error rates no file means, names with
// control characters or of a megabyte, a bad host-map name blamed on the
// fabric, link speeds past 100 Tb/s, and long phases with no progress.
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "src/c4p/evaluate.h"
#include "src/c4p/fabric_io.h"
#include "src/c4p/qps_auto.h"
#include "tests/c4p/generated_fabric.h"
#include "tests/c4p/tiny_simai.h"

namespace pitstop::c4p {
namespace {

// The tiny SimAI file with its first two lines replaced, read and built.
absl::Status TinyWithHead(const std::string& header,
                          const std::string& switches,
                          const std::vector<std::string>& links) {
  std::string text = header + "\n" + switches + "\n";
  for (const std::string& l : links) text += l + "\n";
  absl::StatusOr<SimAiFile> f = ParseSimAi(text, "tiny.txt");
  if (!f.ok()) return f.status();
  return FabricFromSimAi(*f, "tiny.txt").status();
}

void ExpectRefused(const absl::Status& s, const std::string& said) {
  EXPECT_FALSE(s.ok()) << said;
  EXPECT_NE(s.message().find(said), std::string::npos)
      << "'" << said << "' not in: " << s;
}

// Before, "4 4 6 7 8 9" made NVSwitch 5 a ToR.
TEST(InputLimitsTest, ASimAiSwitchListedTwiceIsRefusedNamingTheLine) {
  const std::string head = "10 2 2 4 12 H20";
  ExpectRefused(TinyWithHead(head, "4 4 6 7 8 9", TinySimAiLinks()),
                "tiny.txt:2: switch id 4 is listed twice");
  EXPECT_TRUE(TinyWithHead(head, "4 5 6 7 8 9", TinySimAiLinks()).ok());
}

// Before, a count past an int was an "unrecognised fabric format" and a
// negative one "-4 GPUs do not fill servers of 2".
TEST(InputLimitsTest, SimAiHeaderCountsAreNamed) {
  const std::vector<std::string>& links = TinySimAiLinks();
  ExpectRefused(TinyWithHead("10 2 2 -4 12 H20", "4 5 6 7 8 9", links),
                "tiny.txt:1: <switches> '-4' is not a count (0..2147483647)");
  ExpectRefused(TinyWithHead("99999999999 2 2 4 12 H20", "4 5", links),
                "tiny.txt:1: <nodes> '99999999999' is not a count");
  ExpectRefused(TinyWithHead("6 2 2 4 12 H20", "4 5", links),
                "tiny.txt:1: 6 nodes leave no GPUs after 2 NVSwitches");
  ExpectRefused(TinyWithHead("200000 2 2 4 12 H20", "4 5", links),
                "tiny.txt:1: 199994 GPUs: the planner takes at most 131072");
  // Read by content as SimAI's (before: "unrecognised fabric format").
  const std::string path = ::testing::TempDir() + "/overflow.txt";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("99999999999 2 2 4 12 H20\n4 5\n", f);
  std::fclose(f);
  ExpectRefused(LoadFabric(path, ClosCsvOptions{}).status(),
                "<nodes> '99999999999' is not a count");
}

// Before, -1ms got the generic "expected '<src> <dst> ...'" and a nan
// error rate was taken.
TEST(InputLimitsTest, ALatencyOrErrorRateNoCableHasIsRefusedNamingIt) {
  std::vector<std::string> links = TinySimAiLinks();
  const std::string head = "10 2 2 4 12 H20";
  links[4] = "0 6 200Gbps -1ms 0";
  ExpectRefused(TinyWithHead(head, "4 5 6 7 8 9", links),
                "tiny.txt:7: latency '-1ms': a latency is a finite number");
  for (const char* rate : {"nan", "-0.1", "2"}) {
    links[4] = absl::StrCat("0 6 200Gbps 0.001ms ", rate);
    ExpectRefused(TinyWithHead(head, "4 5 6 7 8 9", links),
                  absl::StrCat("tiny.txt:7: error rate '", rate,
                               "': a rate is a number in [0, 1]"));
  }
}

// Before, 1e300Gbps was planned: every time 0, the table "-nan" and "inf".
TEST(InputLimitsTest, ASpeedPastOneHundredTbpsIsRefused) {
  std::vector<std::string> links = TinySimAiLinks();
  links[9] = "6 9 1e300Gbps 0.001ms 0";
  ExpectRefused(TinyWithHead("10 2 2 4 12 H20", "4 5 6 7 8 9", links),
                "tiny.txt:12: link tor6->spine9 has a bandwidth of 1e+300 "
                "Gbps: a link speed is a finite number of Gbps, at least "
                "0.001 (1 Mb/s) and at most 100000 (100 Tb/s)");
  links[9] = "6 9 100000Gbps 0.001ms 0";
  EXPECT_TRUE(TinyWithHead("10 2 2 4 12 H20", "4 5 6 7 8 9", links).ok());
  ClosCsvOptions o;
  o.nic_gbps = 1e6;
  ExpectRefused(ParseClosCsv("ip,DSW,PSW,ASW\nh0,G,P,S\n", "t.csv", o).status(),
                "--nic-gbps 1e+06: a link speed");
  ExpectRefused(ParseGeneratorSpec("gen:leafspine,nic_gbps=1e300").status(),
                "nic_gbps=1e300: a link speed");
}

// Before, control characters went to the terminal raw and a 1 MB host name
// was taken.
TEST(InputLimitsTest, ANameWithAControlCharacterOrTooLongIsRefused) {
  auto csv = [](const std::string& host) {
    return ParseClosCsv("ip,DSW,PSW,ASW\nh0,G,P,S0\n\"" + host + "\",G,P,S1\n",
                        "t.csv", ClosCsvOptions{})
        .status();
  };
  ExpectRefused(csv("h\x1b[31mred"),
                "t.csv:3: host name 'h\\x1b[31mred' holds the control "
                "character 0x1B");
  ExpectRefused(csv(std::string(1 << 20, 'h')), "t.csv:3: host name 'hhhh");
  ExpectRefused(csv(std::string(1 << 20, 'h')),
                "is 1048576 bytes long: a name is at most 256 bytes");
  EXPECT_TRUE(csv(std::string(256, 'h')).ok());
  // A switch name as built joins up to three of the file's names.
  ExpectRefused(ParseClosCsv("ip,DSW,PSW,ASW\nh0,G,P,S0\nh1,G,P," +
                                 std::string(2000, 's') + "\n",
                             "t.csv", ClosCsvOptions{})
                    .status(),
                "t.csv:3: tor name 'P/sss");
}

// Before, a bad name in --ib-host-map was blamed on the fabric file's line
// of the HCA.
TEST(InputLimitsTest, ABadHostMapNameNamesTheMapAndItsLine) {
  ExpectRefused(
      ParseIbHostMap("0x1 good\n0x2 bad\x01name\n", "map.txt").status(),
      "map.txt:2: host name 'bad\\x01name' holds the control "
      "character 0x01");
  ExpectRefused(
      ParseIbHostMap("0x1 " + std::string(300, 'n') + "\n", "map.txt").status(),
      "map.txt:1: host name 'nnn");
  EXPECT_TRUE(ParseIbHostMap("0x1 node001\n", "map.txt").ok());
}

// Before, only the ECMP seeds reported progress: building the routing
// table of gen:leafspine,gpus=131072 and planning it were a minute of
// silence.
TEST(InputLimitsTest, BuildingPlanningAndPinningReportProgress) {
  auto spec = ParseGeneratorSpec("gen:leafspine,gpus=64,hosts_per_tor=2");
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::vector<std::pair<int, int>> built;
  auto fab =
      GenerateFabric(*spec, [&built](const char* step, int done, int total) {
        if (std::string(step) == "routing table, ToRs") {
          built.emplace_back(done, total);
        }
      });
  ASSERT_TRUE(fab.ok()) << fab.status();
  ASSERT_EQ(built.size(), static_cast<size_t>(fab->tor_count()) + 1);
  EXPECT_EQ(built.front(), std::make_pair(0, fab->tor_count()));
  EXPECT_EQ(built.back(), std::make_pair(fab->tor_count(), fab->tor_count()));
  EvalOptions o;
  o.seeds = 1;
  std::vector<std::string> last_of;  // the last step reported of each kind
  o.on_plan_step = [&last_of](const char* step, int done, int total) {
    const std::string s = absl::StrCat(step, " ", done, "/", total);
    if (!last_of.empty() && last_of.back().rfind(step, 0) == 0) {
      last_of.back() = s;
    } else {
      last_of.push_back(s);
    }
  };
  auto r = Evaluate(&*fab, o);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string all = absl::StrJoin(last_of, "\n");
  const std::string flows = std::to_string(r->flows);
  EXPECT_NE(all.find("routing flows " + flows + "/" + flows), std::string::npos)
      << all;
  EXPECT_NE(all.find("pinning source ports " + flows + "/" + flows),
            std::string::npos)
      << all;
}

// Before, the "already degraded ... (given twice)" warning of the 1-QP
// evaluation was lost when --qps auto chose more QPs (the final evaluation
// degrades each link once).
TEST(InputLimitsTest, AutoQpsKeepsTheDegradedTwiceWarning) {
  Fabric fab = Gen("gen:leafspine,gpus=256,rail=0,hosts_per_tor=4");
  EvalOptions o;
  o.placement = Placement::kScattered;
  o.seeds = 1;
  o.pin_ports = false;
  o.degrade = {{"tor0-spine0", 0.25}, {"tor0-spine0", 0.25}};
  QpsChoice c;
  auto r = EvaluateAutoQps(&fab, o, &c);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_GT(c.qps, 1) << c.why;
  const std::string all = absl::StrJoin(r->warnings, "\n");
  EXPECT_NE(all.find("(given twice): the later share, 0.25, applies"),
            std::string::npos)
      << all;
}

// With a rail ToR down, ECMP keeps the rail's NICs on their only port
// (the re-plan moves them to the host's other NICs): ECMP never completes
// and its busiest link is down. Before, a 1e30 s stand-in divided by the
// bound printed a utilisation of 1.7e+32.
TEST(InputLimitsTest, AnEcmpLinkThatIsDownIsInfinitelyBusyNot1e32) {
  Fabric fab = Gen("gen:leafspine,gpus=32,hosts_per_tor=2");
  EvalOptions o;
  o.seeds = 2;
  o.pin_ports = false;
  o.degrade = {{"tor0.0", 0}};
  auto r = Evaluate(&fab, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(std::isinf(r->after.ecmp.max_link_util))
      << r->after.ecmp.max_link_util;
  EXPECT_TRUE(std::isinf(r->after.ecmp.completion_s_p99));
  EXPECT_TRUE(std::isfinite(r->after.planned.max_link_util));
  EXPECT_LT(r->after.planned.max_link_util, 10);
}

}  // namespace
}  // namespace pitstop::c4p
