// Importer + analysis tests on the real files of ../shared/data (label
// "data"). Each test skips loudly when the folder is absent. Nothing here
// knows the scenarios: every folder under flight-recorder/ is checked
// against the fault_injection.log it carries, parsed at test time.
#include <dirent.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/importers/analysis.h"
#include "src/importers/importer.h"
#include "src/importers/input_file.h"
#include "src/importers/timeline.h"

namespace pitstop::importers {
namespace {

std::string DataDir() {
  const char* src = std::getenv("PITSTOP_SOURCE_DIR");
  return std::string(src != nullptr ? src : ".") + "/../shared/data";
}

bool Exists(const std::string& p) { return std::ifstream(p).good(); }

std::string Slurp(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::set<int32_t> Numbers(const std::string& list) {
  std::set<int32_t> out;
  std::regex num("[0-9]+");
  for (auto it = std::sregex_iterator(list.begin(), list.end(), num);
       it != std::sregex_iterator(); ++it) {
    out.insert(std::stoi(it->str()));
  }
  return out;
}

// Ground truth: "Fault ranks: [12, 14]" in fault_injection.log.
std::set<int32_t> FaultedRanks(const std::string& dir) {
  std::string text = Slurp(dir + "/fault_injection.log");
  std::smatch m;
  if (std::regex_search(text, m,
                        std::regex(R"(Fault ranks:\s*\[([0-9,\s]*)\])"))) {
    return Numbers(m[1]);
  }
  return {};
}

// The other analyzer's "Missing Ranks" column (last column of each row).
std::set<int32_t> PeerMissing(const std::string& dir) {
  std::istringstream in(Slurp(dir + "/peer_reference_output.txt"));
  std::string line;
  std::set<int32_t> out;
  while (std::getline(in, line)) {
    size_t bar = line.rfind('|');
    if (bar == std::string::npos || line.find("PGID") == 0) continue;
    for (int32_t r : Numbers(line.substr(bar + 1))) out.insert(r);
  }
  return out;
}

std::vector<std::string> Scenarios() {
  std::vector<std::string> out;
  std::string root = DataDir() + "/flight-recorder";
  DIR* d = opendir(root.c_str());
  if (d == nullptr) return out;
  while (struct dirent* e = readdir(d)) {
    std::string dir = root + "/" + e->d_name;
    if (e->d_name[0] != '.' && Exists(dir + "/fault_injection.log")) {
      out.push_back(dir);
    }
  }
  closedir(d);
  return out;
}

TEST(FlightRecorderData, EveryScenarioSuspectsExactlyTheFaultedRanks) {
  std::vector<std::string> scenarios = Scenarios();
  if (scenarios.empty()) {
    GTEST_SKIP() << "SKIPPED: real data absent (" << DataDir()
                 << "/flight-recorder has no scenario folders)";
  }
  for (const std::string& dir : scenarios) {
    SCOPED_TRACE(dir);
    std::set<int32_t> truth = FaultedRanks(dir);
    ASSERT_FALSE(truth.empty()) << "no 'Fault ranks' in fault_injection.log";
    auto job = ImportPaths({dir}, ImportOptions());
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->format, "flight-recorder");
    for (const ImportedRank& r : job->ranks) {
      for (const v1::CommunicatorInfo& c : r.comms) {
        ASSERT_LT(c.rank(), c.global_ranks_size());
        EXPECT_EQ(c.global_ranks(c.rank()), r.global_rank) << c.comm_name();
      }
    }
    auto result = AnalyzeJob(*job, AnalysisOptions());
    ASSERT_TRUE(result.ok()) << result.status();
    const Verdict& v = result->verdict;
    EXPECT_EQ(std::set<int32_t>(v.suspects.begin(), v.suspects.end()), truth);
    EXPECT_TRUE(v.fault_class == v1::FAULT_CLASS_NON_COMM_HANG ||
                v.fault_class == v1::FAULT_CLASS_COMM_HANG)
        << v1::FaultClass_Name(v.fault_class);
    // One hang fault names the collective and group that all the faulted
    // ranks block.
    bool named = false;
    for (const v1::Fault& f : result->faults) {
      std::set<int32_t> s;
      for (const v1::Suspect& x : f.suspects()) s.insert(x.global_rank());
      if (s == truth && f.func() != v1::COLL_FUNC_UNSPECIFIED &&
          f.seq_number() > 0 &&
          f.comm_name().find("(pg ") != std::string::npos) {
        named = true;
      }
    }
    EXPECT_TRUE(named) << "no fault names the hung collective of all suspects";
    EXPECT_FALSE(v.hung_collectives.empty());
    // Every other rank is a victim.
    std::set<int32_t> all;
    for (const ImportedRank& r : job->ranks) all.insert(r.global_rank);
    std::set<int32_t> covered(v.victims.begin(), v.victims.end());
    covered.insert(v.suspects.begin(), v.suspects.end());
    EXPECT_EQ(covered, all);
    for (int32_t s : v.suspects) {
      EXPECT_FALSE(std::count(v.victims.begin(), v.victims.end(), s));
    }
    // The other analyzer's missing ranks that are real faults are ours too.
    for (int32_t r : PeerMissing(dir)) {
      if (truth.count(r)) {
        EXPECT_TRUE(std::count(v.suspects.begin(), v.suspects.end(), r)) << r;
      }
    }
    // The timeline of the scenario is valid trace-event JSON.
    nlohmann::json tl = BuildTimeline(*job, result->faults);
    EXPECT_TRUE(
        ValidateTraceEvents(
            nlohmann::json::parse(tl.dump(
                -1, ' ', false, nlohmann::json::error_handler_t::replace)))
            .ok());
  }
}

TEST(FlightRecorderData, MissingDumpIsAWarningAndPartialAnalysis) {
  std::vector<std::string> scenarios = Scenarios();
  if (scenarios.empty()) {
    GTEST_SKIP() << "SKIPPED: real data absent (" << DataDir() << ")";
  }
  // All dumps but the highest-numbered one, named one by one.
  std::string dir = scenarios[0];
  std::vector<std::string> files;
  for (int r = 0; r < 1000; ++r) {
    std::string f = dir + "/_dump_" + std::to_string(r);
    if (Exists(f)) files.push_back(f);
  }
  ASSERT_GE(files.size(), 2u);
  std::string dropped = files.back();
  files.pop_back();
  auto job = ImportPaths(files, ImportOptions());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->missing_ranks.size(), 1u);
  EXPECT_EQ(job->missing_ranks[0], static_cast<int32_t>(files.size()));
  bool warned = false;
  for (const std::string& w : job->warnings) {
    warned |= w.find("no dump for rank(s) " + std::to_string(files.size())) !=
              std::string::npos;
  }
  EXPECT_TRUE(warned);
  EXPECT_TRUE(AnalyzeJob(*job, AnalysisOptions()).ok());
}

struct Kernel {
  double ts, dur;
  int64_t stream;
};

std::vector<Kernel> RawKernels(const std::string& path) {
  auto text = ReadInputFile(path);
  EXPECT_TRUE(text.ok()) << text.status();
  std::vector<Kernel> out;
  nlohmann::json doc = nlohmann::json::parse(*text);
  for (const auto& e : doc["traceEvents"]) {
    if (e.value("cat", "") == "kernel" &&
        e.value("name", "").rfind("nccl", 0) == 0) {
      out.push_back({e["ts"].get<double>(), e["dur"].get<double>(),
                     e["args"]["stream"].get<int64_t>()});
    }
  }
  return out;
}

TEST(KinetoData, PairSaysWhoWaitedForWhomAndTheLateRank) {
  std::string r0 = DataDir() + "/kineto/trace_filter__sampled_rank-0.json.gz";
  std::string r1 = DataDir() + "/kineto/trace_filter__sampled_rank-1.json.gz";
  if (!Exists(r0) || !Exists(r1)) {
    GTEST_SKIP() << "SKIPPED: real data absent (" << r0 << ")";
  }
  auto job = ImportPaths({r0, r1}, ImportOptions());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->world_size, 128);
  EXPECT_EQ(job->missing_ranks.size(), 126u);
  // Independent brute force: same stream, ends within 0.5 ms; the shorter
  // kernel started last and is the one the other waited for.
  std::vector<Kernel> k0 = RawKernels(r0), k1 = RawKernels(r1);
  std::map<double, int32_t> expected;  // rank-0 end -> late rank
  std::map<int32_t, int> late_count;
  for (const Kernel& a : k0) {
    for (const Kernel& b : k1) {
      if (a.stream == b.stream &&
          std::abs((a.ts + a.dur) - (b.ts + b.dur)) <= 500) {
        int32_t late = a.dur < b.dur ? 0 : 1;
        expected[a.ts + a.dur] = late;
        ++late_count[late];
      }
    }
  }
  ASSERT_GE(expected.size(), 3u);
  ASSERT_EQ(job->matched.size(), expected.size());
  for (const MatchedCollective& m : job->matched) {
    ASSERT_EQ(m.global_ranks, (std::vector<int32_t>{0, 1}));
    auto it = expected.find(m.end_us[0]);
    ASSERT_NE(it, expected.end());
    EXPECT_EQ(m.late_rank, it->second);
  }
  int32_t overall = late_count[1] > late_count[0] ? 1 : 0;
  auto result = AnalyzeJob(*job, AnalysisOptions());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->verdict.fault_class, v1::FAULT_CLASS_NON_COMM_SLOW);
  EXPECT_EQ(result->verdict.suspects, std::vector<int32_t>{overall});
  EXPECT_EQ(result->verdict.victims, std::vector<int32_t>{1 - overall});
  EXPECT_TRUE(ValidateTraceEvents(BuildTimeline(*job, result->faults)).ok());
}

TEST(KinetoData, SingleRankOfTwoIsPartialWithoutVerdict) {
  std::string f = DataDir() + "/kineto/nccl_parser_config__nccl_data.json.gz";
  if (!Exists(f)) GTEST_SKIP() << "SKIPPED: real data absent (" << f << ")";
  auto job = ImportPaths({f}, ImportOptions());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->missing_ranks, std::vector<int32_t>{1});
  size_t kernels = 0;
  bool named = false;
  for (const ImportedOp& op : job->ranks[0].ops) {
    ++kernels;
    named |= op.record.func() == v1::COLL_FUNC_ALL_REDUCE &&
             op.record.count() > 0 &&
             op.record.bytes() == 4 * op.record.count();
  }
  EXPECT_GT(kernels, 10u);
  EXPECT_TRUE(named) << "Collective name / In msg nelems / dtype not read";
  auto result = AnalyzeJob(*job, AnalysisOptions());
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(result->faults.empty());
}

}  // namespace
}  // namespace pitstop::importers
