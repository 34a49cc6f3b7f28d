// `pitstop plan` as a new user ran it (issue #32): --plan-out writes
// through a temporary file and replaces only an earlier plan unless
// --force; flags and fabrics past a documented limit are refused naming
// it; the table stays readable.
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/c4p/plan_cli_util.h"
#include "tests/c4p/tiny_simai.h"
#include "tests/harness/run_command.h"

namespace pitstop::c4p {
namespace {

namespace fs = std::filesystem;
using ::pitstop::harness::RunCommand;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// A fresh directory for one test.
std::string Scratch(const std::string& name) {
  const std::string dir = TempDir() + "/" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// The names in `dir`.
std::set<std::string> Names(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    out.insert(e.path().filename().string());
  }
  return out;
}

// Before, `--plan-out ''` ran and wrote nothing, without a word.
TEST(PlanCliOutputTest, AnEmptyPlanOutIsRefusedNamingTheFlag) {
  const std::string pitstop = Binary("tools/pitstop/pitstop");
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  std::string out;
  EXPECT_EQ(RunCommand(pitstop + " plan --topology " + kSmall +
                           " --seeds 1 --plan-out ''",
                       &out),
            2)
      << out;
  EXPECT_THAT(out, HasSubstr("--plan-out '': give a file name")) << out;
  EXPECT_THAT(out, Not(HasSubstr("all-reduce over"))) << out;
}

// Before, --plan-out truncated any file as a shell redirection does.
TEST(PlanCliOutputTest, AFileThatIsNotAPlanIsReplacedOnlyWithForce) {
  const std::string pitstop = Binary("tools/pitstop/pitstop");
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  const std::string dir = Scratch("not-a-plan");
  const std::string path = dir + "/notes.txt";
  std::ofstream(path) << "three weeks of notes\n";
  const std::string run =
      pitstop + " plan --topology " + kSmall + " --seeds 1 --plan-out " + path;
  std::string out;
  EXPECT_EQ(RunCommand(run, &out), 2) << out;
  EXPECT_THAT(out, HasSubstr("--plan-out '" + path +
                             "': exists and is not an earlier plan"))
      << out;
  EXPECT_THAT(out, HasSubstr("--force")) << out;
  EXPECT_EQ(ReadAll(path), "three weeks of notes\n");
  ASSERT_EQ(RunCommand(run + " --force", &out), 0) << out;
  EXPECT_THAT(ReadAll(path), StartsWith("{\n \"epoch\""));
  // An earlier plan (and an empty file) is replaced without --force.
  ASSERT_EQ(RunCommand(run, &out), 0) << out;
  std::ofstream(dir + "/empty.json").flush();
  ASSERT_EQ(RunCommand(pitstop + " plan --topology " + kSmall +
                           " --seeds 1 --plan-out " + dir + "/empty.json",
                       &out),
            0)
      << out;
  EXPECT_THAT(ReadAll(dir + "/empty.json"), StartsWith("{\n \"epoch\""));
  // Written through a temporary file: none is left behind.
  EXPECT_EQ(Names(dir), (std::set<std::string>{"notes.txt", "empty.json"}));
}

// Before, a link at the path (a dangling one too) was written through,
// creating or truncating its target.
TEST(PlanCliOutputTest, ALinkIsReplacedWithForceNeverWrittenThrough) {
  const std::string pitstop = Binary("tools/pitstop/pitstop");
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  const std::string dir = Scratch("links");
  std::ofstream(dir + "/target.txt") << "keep me\n";
  fs::create_symlink(dir + "/target.txt", dir + "/to-target.json");
  fs::create_symlink(dir + "/nowhere.txt", dir + "/dangling.json");
  const std::string run =
      pitstop + " plan --topology " + kSmall + " --seeds 1 --plan-out ";
  std::string out;
  for (const char* link : {"/to-target.json", "/dangling.json"}) {
    EXPECT_EQ(RunCommand(run + dir + link, &out), 2) << out;
    EXPECT_THAT(out, HasSubstr("is a symbolic link")) << out;
    ASSERT_EQ(RunCommand(run + dir + link + " --force", &out), 0) << out;
    EXPECT_FALSE(fs::is_symlink(dir + link)) << link;
    EXPECT_THAT(ReadAll(dir + link), StartsWith("{\n \"epoch\"")) << link;
  }
  EXPECT_EQ(ReadAll(dir + "/target.txt"), "keep me\n");
  EXPECT_FALSE(fs::exists(dir + "/nowhere.txt"));
  EXPECT_EQ(Names(dir), (std::set<std::string>{"target.txt", "to-target.json",
                                               "dangling.json"}));
}

// Before, a CSV of 160,000 GPUs ran a minute and more at 1.5 GB, and
// --aggs-per-pod 512 --cores-per-agg 512 (each within its own bound) as
// long, both without a word.
TEST(PlanCliOutputTest, AFabricPastTheSizeCapsIsRefusedNamingTheCap) {
  const std::string pitstop = Binary("tools/pitstop/pitstop");
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  const std::string dir = Scratch("caps");
  {
    std::ofstream csv(dir + "/big.csv");
    csv << "ip,DSW,PSW,ASW\n";
    for (int h = 0; h < 1821; ++h) {
      csv << "h" << h << ",G0,P" << h / 512 << ",S" << h / 16 << "\n";
    }
  }
  std::string out;
  EXPECT_EQ(RunCommand(pitstop + " plan --topology " + dir +
                           "/big.csv --gpus-per-host 72",
                       &out),
            2)
      << out;
  EXPECT_THAT(out, HasSubstr(dir + "/big.csv: 1821 hosts x 72 GPUs = 131112 "
                                   "GPUs: the planner takes at most 131072"))
      << out;
  std::ofstream(dir + "/small.csv") << "ip,DSW,PSW,ASW\nh0,G0,P0,S0\n"
                                       "h1,G0,P0,S1\n";
  EXPECT_EQ(RunCommand(pitstop + " plan --topology " + dir +
                           "/small.csv --aggs-per-pod 512 --cores-per-agg 512",
                       &out),
            2)
      << out;
  EXPECT_THAT(out, HasSubstr("--aggs-per-pod 512 x --cores-per-agg 512 = "
                             "262144 core switches: at most 16384"))
      << out;
  ASSERT_EQ(RunCommand(pitstop + " plan --help", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("x --aggs-per-pod at most 16384 core switches"));
  EXPECT_EQ(RunCommand(pitstop + " plan --topology " + dir +
                           "/small.csv --aggs-per-pod 128 --cores-per-agg "
                           "128 --seeds 1",
                       &out),
            0)
      << out;
}

// Before, 2^64 and more were clamped to 2^64-1 without a word, and --bytes
// had no upper bound (1e300 printed times of 1e+290 s).
TEST(PlanCliOutputTest, ASeedOrSizePastItsRangeIsRefusedNamingTheFlag) {
  const std::string pitstop = Binary("tools/pitstop/pitstop");
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  std::string out;
  for (const auto& [flags, said] :
       std::vector<std::pair<std::string, std::string>>{
           {"--placement-seed 18446744073709551616",
            "--placement-seed 18446744073709551616: a seed is a whole "
            "number, 0..18446744073709551615"},
           {"--placement-seed 1e3", "--placement-seed 1e3: a seed is a whole"},
           {"--bytes 1e300",
            "--bytes '1e300' is 1e+300 bytes: at most "
            "1099511627776 (1T"},
           {"--bytes 2T", "--bytes '2T' is 2.19902e+12 bytes: at most"}}) {
    EXPECT_EQ(RunCommand(pitstop + " plan --topology " + kSmall +
                             " --seeds 1 " + flags,
                         &out),
              2)
        << flags << ": " << out;
    EXPECT_THAT(out, HasSubstr(said)) << out;
  }
  for (const char* flags :
       {"--placement scattered --placement-seed 18446744073709551615",
        "--bytes 1T"}) {
    EXPECT_EQ(RunCommand(pitstop + " plan --topology " + kSmall +
                             " --seeds 1 " + flags,
                         &out),
              0)
        << flags << ": " << out;
  }
}

// Before, --degrade of a switch with 128 links printed them all on the
// table's one title line.
TEST(PlanCliOutputTest, ManyDegradedLinksAreSummarisedInTheTable) {
  const std::string pitstop = Binary("tools/pitstop/pitstop");
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  std::string out;
  ASSERT_EQ(RunCommand(pitstop + " plan --topology gen:leafspine,gpus=64 "
                                 "--seeds 1 --qps 1 --degrade spine0=0.5",
                       &out),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr("degraded: spine0->tor0.0, tor0.0->spine0, "))
      << out;
  EXPECT_THAT(out, HasSubstr(", ... (16 links; -o json lists them all)"))
      << out;
  EXPECT_THAT(out, Not(HasSubstr("nan"))) << out;
}

// Before, gen:...,gpus=1 said "--ranks 1" though no --ranks was given, and
// /dev/stdin (a pipe) was refused as "not a regular file".
TEST(PlanCliOutputTest, OneGpuIsNamedAndAFabricIsReadFromStdin) {
  const std::string pitstop = Binary("tools/pitstop/pitstop");
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  std::string out;
  EXPECT_EQ(RunCommand(pitstop + " plan --topology "
                                 "gen:leafspine,gpus=1,gpus_per_host=1",
                       &out),
            2)
      << out;
  EXPECT_THAT(out, HasSubstr(": 1 GPU: an all-reduce over fewer than 2 "
                             "ranks moves no data"))
      << out;
  EXPECT_THAT(out, Not(HasSubstr("--ranks 1"))) << out;
  const std::string topo = Scratch("stdin") + "/tiny.txt";
  std::ofstream(topo) << TinySimAiText(TinySimAiLinks());
  for (const char* name : {"-", "/dev/stdin"}) {
    EXPECT_EQ(RunCommand("cat " + topo + " | " + pitstop +
                             " plan --seeds 1 --topology " + name,
                         &out),
              0)
        << name << ": " << out;
    EXPECT_THAT(out, HasSubstr("SimAI file <stdin>: 2 host(s)")) << out;
  }
}

// Before, a named pipe (process substitution `<(zcat f.gz)`, mkfifo) was
// refused as "not a regular file (a FIFO)" while a pipe on standard input
// was read.
TEST(PlanCliOutputTest, AFabricIsReadFromANamedPipe) {
  const std::string pitstop = Binary("tools/pitstop/pitstop");
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  const std::string dir = Scratch("fifo");
  const std::string topo = dir + "/tiny.txt";
  std::ofstream(topo) << TinySimAiText(TinySimAiLinks());
  const std::string fifo = dir + "/fabric.pipe";
  std::string out;
  EXPECT_EQ(RunCommand("mkfifo " + fifo + " && { cat " + topo + " > " + fifo +
                           " & } && " + pitstop +
                           " plan --seeds 1 --topology " + fifo,
                       &out),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr("SimAI file " + fifo + ": 2 host(s)")) << out;
}

// Before, a failed write to standard output (a full disk) exited 0.
TEST(PlanCliOutputTest, AFailedWriteToStdoutExitsOne) {
  const std::string pitstop = Binary("tools/pitstop/pitstop");
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "SKIPPED: no /dev/full";
  for (const char* output : {"table", "json"}) {
    std::string out;
    EXPECT_EQ(RunCommand("(" + pitstop + " plan --topology " + kSmall +
                             " --seeds 1 -o " + output + " > /dev/full)",
                         &out),
              1)
        << output << ": " << out;
    EXPECT_THAT(out, HasSubstr("pitstop plan: cannot write the output: "))
        << out;
  }
}

}  // namespace
}  // namespace pitstop::c4p
