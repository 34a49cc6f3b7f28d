// `pitstop replay` on the real data (label "data"): every Flight Recorder
// scenario and the Kineto pair go through the export path, real agents and
// a real controller on loopback, and must give the verdict `pitstop analyze`
// gives (and the ground truth for FR). Skips loudly when ../shared/data is
// absent.
#include <dirent.h>
#include <stdlib.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/importers/analysis.h"
#include "src/importers/importer.h"
#include "src/importers/replay.h"
#include "tests/importers/fr_test_util.h"

namespace pitstop::importers {
namespace {

std::string DataDir() {
  const char* src = std::getenv("PITSTOP_SOURCE_DIR");
  return std::string(src != nullptr ? src : ".") + "/../shared/data";
}

bool Exists(const std::string& p) { return std::ifstream(p).good(); }

std::vector<int32_t> Absent(const ImportedJob& job) {
  std::vector<int32_t> out;
  for (const ImportedRank& r : job.ranks) {
    if (r.absent) out.push_back(r.global_rank);
  }
  return out;
}

void ExpectSameVerdict(const std::vector<std::string>& paths) {
  auto job = ImportPaths(paths, ImportOptions());
  ASSERT_TRUE(job.ok()) << job.status();
  auto offline = AnalyzeJob(*job, AnalysisOptions());
  ASSERT_TRUE(offline.ok()) << offline.status();
  ReplayOptions ro;
  ro.settle = absl::Seconds(3);
  auto live = ReplayJob(*job, ro);
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_GT(live->records_sent, 0u);
  Verdict v = VerdictFromFaults(live->faults, Absent(*job));
  EXPECT_EQ(v.fault_class, offline->verdict.fault_class)
      << v1::FaultClass_Name(v.fault_class);
  EXPECT_EQ(v.suspects, offline->verdict.suspects);
  EXPECT_EQ(v.victims, offline->verdict.victims);
  EXPECT_FALSE(v.suspects.empty());
}

// Made-up dumps (no data needed): 5 of 96 ranks dumped, rank 2 stuck. The
// 91 absent ranks end cleanly (no process-died), and a speed far beyond
// what pacing can honour is clamped with a note, keeping the verdict.
TEST(ReplayMadeUp, AbsentRanksNeverDieAndHugeSpeedIsClamped) {
  char tmpl[] = "/tmp/pitstop-rpl-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  for (int r = 0; r < 5; ++r) {
    std::ofstream(absl::StrCat(dir, "/_dump_", r, ".json"))
        << FrDoc(5, r == 2 ? 7 : 8, AllRanks(96)).dump();
  }
  auto job = ImportPaths({dir}, ImportOptions());
  std::system(("rm -rf " + dir).c_str());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(Absent(*job).size(), 91u);
  ReplayOptions ro;
  ro.settle = absl::Seconds(3);
  ro.speed = 1e9;
  auto live = ReplayJob(*job, ro);
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_LE(live->speed, kMaxReplaySpeed);
  EXPECT_THAT(live->speed_note, ::testing::HasSubstr("clamped"));
  for (const v1::Fault& f : live->faults) {
    EXPECT_NE(f.fault_class(), v1::FAULT_CLASS_PROCESS_DIED) << f.summary();
  }
  Verdict v = VerdictFromFaults(live->faults, Absent(*job));
  EXPECT_EQ(v.fault_class, v1::FAULT_CLASS_NON_COMM_HANG);
  EXPECT_EQ(v.suspects, std::vector<int32_t>{2});
}

TEST(ReplayData, FlightRecorderScenariosMatchAnalyze) {
  std::string root = DataDir() + "/flight-recorder";
  std::vector<std::string> dirs;
  if (DIR* d = opendir(root.c_str())) {
    while (struct dirent* e = readdir(d)) {
      std::string dir = root + "/" + e->d_name;
      if (e->d_name[0] != '.' && Exists(dir + "/fault_injection.log")) {
        dirs.push_back(dir);
      }
    }
    closedir(d);
  }
  if (dirs.empty())
    GTEST_SKIP() << "SKIPPED: real data absent (" << root << ")";
  for (const std::string& dir : dirs) {
    SCOPED_TRACE(dir);
    ExpectSameVerdict({dir});
  }
}

TEST(ReplayData, KinetoPairMatchesAnalyze) {
  std::string r0 = DataDir() + "/kineto/trace_filter__sampled_rank-0.json.gz";
  std::string r1 = DataDir() + "/kineto/trace_filter__sampled_rank-1.json.gz";
  if (!Exists(r0) || !Exists(r1)) {
    GTEST_SKIP() << "SKIPPED: real data absent (" << r0 << ")";
  }
  ExpectSameVerdict({r0, r1});
}

}  // namespace
}  // namespace pitstop::importers
