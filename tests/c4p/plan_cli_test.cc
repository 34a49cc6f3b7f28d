// `pitstop plan` and `pitstop-plan-scale-bench` as a user runs them: what
// --help says, flags refused naming flag and value, and what --plan-out
// writes.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/c4p/fabric_io.h"
#include "tests/c4p/plan_cli_util.h"
#include "tests/c4p/tiny_simai.h"
#include "tests/harness/run_command.h"

namespace pitstop::c4p {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using ::pitstop::harness::RunCommand;

// Before, several flags showed no default at all (the CSV's assumed
// speeds, the placement, the QP choice, the ECMP seeds and hash).
TEST(PlanCliTest, HelpShowsTheDefaults) {
  const std::string pitstop = Binary("tools/pitstop/pitstop");
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  std::string out;
  ASSERT_EQ(RunCommand(pitstop + " plan --help", &out), 0) << out;
  for (const char* shown :
       {"--placement TEXT=packed", "--qps TEXT=auto", "--bytes TEXT=1G",
        "--seeds INT=100", "--hash TEXT=crc32", "=steady",
        "--gpus-per-host INT=8", "--nic-gbps FLOAT=400", "--aggs-per-pod INT=8",
        "--nvlink-gbps FLOAT=3600",
        // Before, the help said neither the range of --degrade's fraction
        // nor what --ranks 0 means, nor the exit codes.
        "0: the link is down", "0, the default: every GPU",
        "Exit code: 0 evaluated"}) {
    EXPECT_THAT(out, HasSubstr(shown)) << out;
  }
  // The generator's keys come from its real defaults: before, the help
  // wrote tors_per_pod=16 where the default is 64.
  const GeneratorOptions defaults;
  EXPECT_THAT(
      out, HasSubstr("tors_per_pod=" + std::to_string(defaults.tors_per_pod)));
  EXPECT_THAT(out, HasSubstr("hosts_per_tor=" +
                             std::to_string(defaults.hosts_per_tor)));
}

// Before, --placement-seed -1 wrapped to 2^64-1, and --seeds,
// --gpus-per-host, --aggs-per-pod, --cores-per-agg and gen:'s gpus had no
// upper bound (a typo ran for hours or aborted).
TEST(PlanCliTest, OutOfRangeCountsAndSeedsAreRefusedNamingTheFlag) {
  const std::string pitstop = Binary("tools/pitstop/pitstop");
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  const std::string csv = TempDir() + "/bounds.csv";
  std::ofstream(csv) << "ip,DSW,PSW,ASW\nh0,G0,P0,S0\nh1,G0,P0,S1\n";
  std::string out;
  for (const auto& [flags, said] :
       {std::pair<std::string, std::string>{
            std::string(kSmall) + " --placement-seed -1",
            "--placement-seed -1: a seed is 0 or more"},
        {std::string(kSmall) + " --seeds 10001",
         "--seeds 10001: draw 1..10000 ECMP seeds"},
        {csv + " --gpus-per-host 73",
         "--gpus-per-host 73: a host has at most 72 GPUs"},
        // Before: std::bad_alloc (exit 134), and minutes of silence.
        {csv + " --aggs-per-pod 2147483647",
         "--aggs-per-pod 2147483647: at most 512"},
        {csv + " --aggs-per-pod 1000000", "--aggs-per-pod 1000000: at most"},
        {csv + " --cores-per-agg 1000000",
         "--cores-per-agg 1000000: at most 512"},
        {"gen:leafspine,gpus=1000000000",
         "gpus=1000000000: allowed 1..131072"}}) {
    EXPECT_EQ(RunCommand(pitstop + " plan --topology " + flags, &out), 2)
        << flags << ": " << out;
    EXPECT_THAT(out, HasSubstr(said)) << flags;
  }
  EXPECT_EQ(RunCommand(pitstop + " plan --topology " + csv +
                           " --gpus-per-host 72 --seeds 1",
                       &out),
            0)
      << out;
}

// Before, --channels 0 silently meant "two per NIC".
TEST(PlanCliTest, ChannelsOutOfRangeAreRefusedNamingTheFlag) {
  const std::string pitstop = Binary("tools/pitstop/pitstop");
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  std::string out;
  for (const char* channels : {"0", "-2", "4096"}) {
    EXPECT_EQ(RunCommand(pitstop + " plan --topology " + kSmall +
                             " --channels " + channels,
                         &out),
              2)
        << out;
    EXPECT_THAT(out, HasSubstr("--channels")) << out;
    EXPECT_THAT(out, HasSubstr(channels)) << out;
  }
  EXPECT_EQ(RunCommand(pitstop + " plan --topology " + kSmall +
                           " --channels 4 -o json --seeds 2",
                       &out),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr("\"channels\": 4"));
}

// Before, `--nic-gbps inf` was accepted: every time on a NIC link was 0, so
// the plan and the bound ignored the NICs; and `--tor-uplink-gbps 1e-300`
// was planned.
TEST(PlanCliTest, ASpeedThatIsNotAFiniteNumberIsRefused) {
  const std::string pitstop = Binary("tools/pitstop/pitstop");
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  const std::string csv = TempDir() + "/hosts.csv";
  std::ofstream(csv) << "ip,DSW,PSW,ASW\nh0,G0,P0,S0\nh1,G0,P0,S1\n";
  constexpr char kRule[] =
      ": a link speed is a finite number of Gbps, at least 0.001 (1 Mb/s)";
  std::string out;
  for (const char* flag : {"--nic-gbps", "--tor-uplink-gbps",
                           "--agg-uplink-gbps", "--nvlink-gbps"}) {
    for (const char* value : {"inf", "0", "1e-300", "0.0009"}) {
      EXPECT_EQ(RunCommand(pitstop + " plan --topology " + csv + " " + flag +
                               " " + value,
                           &out),
                2)
          << flag << " " << value << ": " << out;
      EXPECT_THAT(out, HasSubstr(std::string(flag) + " " + value + kRule))
          << out;
    }
  }
  // The slowest link speed still runs.
  EXPECT_EQ(RunCommand(pitstop + " plan --topology " + csv +
                           " --tor-uplink-gbps 0.001 --seeds 1",
                       &out),
            0)
      << out;
  // The same for a generated fabric's keys.
  for (const char* value : {"inf", "1e-300"}) {
    EXPECT_EQ(RunCommand(
                  pitstop + " plan --topology " + kSmall + ",nic_gbps=" + value,
                  &out),
              2)
        << out;
    EXPECT_THAT(out, HasSubstr(std::string("nic_gbps=") + value + kRule))
        << out;
  }
}

// Before, --bytes 0.5 planned an all-reduce of half a byte.
TEST(PlanCliTest, AFractionalByteCountIsRefusedNamingTheFlag) {
  const std::string pitstop = Binary("tools/pitstop/pitstop");
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  std::string out;
  for (const auto& [bytes, said] :
       std::vector<std::pair<std::string, std::string>>{
           {"0.5",
            "--bytes '0.5' is 0.5 bytes: a size is a whole number of "
            "bytes, 1 or more"},
           {"0", "--bytes '0' is 0 bytes"},
           {"1e-300", "--bytes '1e-300' is 1e-300 bytes"},
           {"0.3K", "--bytes '0.3K' is 307.2 bytes"},
           {"-1G", "--bytes '-1G' is -1.07374e+09 bytes"},
           {"lots", "--bytes 'lots' is not a size"}}) {
    EXPECT_EQ(RunCommand(pitstop + " plan --topology " + kSmall +
                             " --seeds 1 --bytes " + bytes,
                         &out),
              2)
        << bytes << ": " << out;
    EXPECT_THAT(out, HasSubstr(said)) << out;
  }
  // A fraction of a unit that is a whole number of bytes runs.
  EXPECT_EQ(RunCommand(pitstop + " plan --topology " + kSmall +
                           " --seeds 1 -o json --bytes 1.5K",
                       &out),
            0)
      << out;
}

// Before, a directory failed only after the evaluation, as "cannot write
// DIR" without saying why.
TEST(PlanCliTest, PlanOutThatCannotBeAFileIsRefusedBeforePlanning) {
  const std::string pitstop = Binary("tools/pitstop/pitstop");
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  const std::string dir = TempDir();
  std::ofstream(dir + "/file") << "x";
  std::string out;
  for (const auto& [path, said] :
       std::vector<std::pair<std::string, std::string>>{
           {dir, "--plan-out " + dir +
                     ": is a directory (give a file name, "
                     "e.g. " +
                     dir + "/plan.json)"},
           {dir + "/", "is a directory"},
           {dir + "/none/plan.json", dir + "/none does not exist"},
           {dir + "/file/plan.json", dir + "/file is not a directory"}}) {
    EXPECT_EQ(RunCommand(pitstop + " plan --topology " + kSmall +
                             " --seeds 1 --plan-out " + path,
                         &out),
              2)
        << path << ": " << out;
    EXPECT_THAT(out, HasSubstr(said)) << out;
    // Refused before the evaluation: no report, no progress.
    EXPECT_THAT(out, Not(HasSubstr("all-reduce over"))) << out;
  }
}

// Before, --plan-out naming the fabric file (or a link to it) replaced the
// fabric with the plan's JSON, and exited 0.
TEST(PlanCliTest, PlanOutThatIsTheInputIsRefused) {
  const std::string pitstop = Binary("tools/pitstop/pitstop");
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  const std::string dir = TempDir();
  const std::string topo = dir + "/input.txt";
  const std::string text = TinySimAiText(TinySimAiLinks());
  std::ofstream(topo) << text;
  const std::string link = dir + "/link-to-input.json";
  std::filesystem::remove(link);
  std::filesystem::create_symlink(topo, link);
  std::string out;
  for (const std::string& path : {topo, link}) {
    EXPECT_EQ(RunCommand(pitstop + " plan --topology " + topo +
                             " --seeds 1 --plan-out " + path,
                         &out),
              2)
        << path << ": " << out;
    EXPECT_THAT(out,
                HasSubstr("--plan-out " + path + ": is the input file " + topo))
        << out;
  }
  EXPECT_EQ(ReadAll(topo), text) << "the fabric file was overwritten";
}

// Before, src_nic and dst_nic held the GPU's name ("host0/gpu3"), which
// --degrade and the live planner do not take.
TEST(PlanCliTest, PlanOutNamesTheNics) {
  const std::string pitstop = Binary("tools/pitstop/pitstop");
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  const std::string plan = TempDir() + "/plan.json";
  std::string out;
  ASSERT_EQ(RunCommand(pitstop + " plan --topology " + kSmall +
                           " --seeds 2 --plan-out " + plan,
                       &out),
            0)
      << out;
  std::stringstream text;
  text << std::ifstream(plan).rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("\"src_nic\": \"host0/nic0\""));
  EXPECT_THAT(text.str(), HasSubstr("\"dst_nic\": \"host1/nic0\""));
  EXPECT_THAT(text.str(), Not(HasSubstr("/gpu")));
}

// Two servers of two GPUs, rail ToRs 6 and 7; ToR 7 (line 8) has no
// uplinks. Each rail is connected, so the fabric loads; a job on 3 GPUs
// runs a ring from host0/nic1 to host1/nic0, which has no path. Before,
// `plan` exited 0 with a 1e30 s bound and NICs "host0/nic3089", and with
// --plan-out it crashed in Fabric::NicName.
TEST(PlanCliTest, AJobAcrossASwitchWithoutUplinksExits2NamingIt) {
  const std::string pitstop = Binary("tools/pitstop/pitstop");
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  const std::string topo = TempDir() + "/no_uplink.txt";
  // Lines 13 and 14 (tor7's uplinks) left out.
  const std::vector<std::string>& all = TinySimAiLinks();
  std::ofstream(topo) << TinySimAiText({all.begin(), all.end() - 2});
  for (const std::string& extra :
       {std::string(), " -o json --plan-out " + TempDir() + "/x.json"}) {
    std::string out;
    EXPECT_EQ(RunCommand(pitstop + " plan --topology " + topo +
                             " --ranks 3 --seeds 1" + extra,
                         &out),
              2)
        << out;
    EXPECT_THAT(out, HasSubstr("no_uplink.txt:8: switch tor7 has no uplink: "
                               "host0/nic1 below it cannot reach host1/nic0"))
        << out;
  }
}

// Before, a CSV flag given with another format was silently ignored.
TEST(PlanCliTest, CsvFlagsWithAnotherFormatAreWarned) {
  const std::string pitstop = Binary("tools/pitstop/pitstop");
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  std::string out;
  ASSERT_EQ(RunCommand(pitstop + " plan --topology " + kSmall +
                           " --aggs-per-pod 4 --nic-gbps 100 --seeds 1",
                       &out),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr("warning: --nic-gbps, --aggs-per-pod ignored: "
                             "they describe a three-tier CSV"))
      << out;
  ASSERT_EQ(
      RunCommand(pitstop + " plan --topology " + kSmall + " --seeds 1", &out),
      0)
      << out;
  EXPECT_THAT(out, Not(HasSubstr("ignored"))) << out;
}

// Before, `--help` was read as a fabric file: "cannot open".
TEST(PlanCliTest, ScaleBenchHelpPrintsItsUsage) {
  const std::string bench =
      Binary("tools/plan-scale-bench/pitstop-plan-scale-bench");
  if (bench.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  std::string out;
  EXPECT_EQ(RunCommand(bench + " --help", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("usage: pitstop-plan-scale-bench SPEC"));
  EXPECT_THAT(out, HasSubstr("--reps 5"));
  EXPECT_THAT(out, Not(HasSubstr("cannot open")));
  EXPECT_EQ(RunCommand(bench + " --placement scattered " + kSmall, &out), 2)
      << out;
  EXPECT_THAT(out, HasSubstr("usage:"));
  EXPECT_EQ(RunCommand(bench + " " + kSmall + " --reps 1", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("\"summary\": true"));
}

}  // namespace
}  // namespace pitstop::c4p
