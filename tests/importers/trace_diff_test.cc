// `pitstop diff` (src/importers/trace_diff.h) on made-up traces whose answer
// is known, plus the tool end to end; the real Kineto pair of ../shared/data
// is in importers_data_test.cc.
#include "src/importers/trace_diff.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pitstop::importers {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

class TraceFiles {
 public:
  TraceFiles() {
    char tmpl[] = "/tmp/pitstop-diff-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TraceFiles() { std::system(("rm -rf " + path_).c_str()); }
  std::string Write(const std::string& name, const std::string& text) {
    std::string p = path_ + "/" + name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }

 private:
  std::string path_;
};

json Complete(const std::string& cat, const std::string& name, double ts,
              double dur) {
  return json{{"ph", "X"}, {"cat", cat}, {"name", name}, {"pid", 1},
              {"tid", 1},  {"ts", ts},   {"dur", dur}};
}

// A rank's trace: `steps` steps of 10 ms; each has a GEMM kernel of
// `gemm_us`, an all-reduce kernel of `nccl_us`, an aten::mm op and a Python
// function. Instant and metadata events are mixed in and must be ignored.
std::string MakeTrace(int rank, int steps, double gemm_us, double nccl_us) {
  json events = json::array();
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", 1}});
  for (int s = 0; s < steps; ++s) {
    double t0 = 1'000'000 + s * 10'000.0;
    events.push_back(
        Complete("python_function", "train.py(42): step", t0, 9000));
    events.push_back(Complete("cpu_op", "aten::mm", t0 + 10, 50));
    events.push_back(Complete("kernel", "sm90_gemm_bf16", t0 + 100, gemm_us));
    events.push_back(Complete("kernel",
                              "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
                              t0 + 200 + gemm_us, nccl_us));
    events.push_back({{"ph", "i"}, {"name", "marker"}, {"ts", t0}});
  }
  return json{{"distributedInfo", {{"rank", rank}, {"world_size", 2}}},
              {"traceEvents", events}}
      .dump();
}

const TraceDiffRow* FindRow(const TraceDiff& d, const std::string& name) {
  for (const TraceDiffRow& r : d.rows) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

TEST(TraceDiffTest, SlowKernelOnOneRankIsTheLargestDifference) {
  TraceFiles files;
  // Rank 1's GEMM takes 3x as long; rank 0 therefore waits in the
  // all-reduce (its NCCL kernel is longer by the same amount).
  auto a =
      ProfileTrace(files.Write("r0.json", MakeTrace(0, 20, 1000, 2500)), {});
  auto b =
      ProfileTrace(files.Write("r1.json", MakeTrace(1, 20, 3000, 500)), {});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->rank, 0);
  EXPECT_EQ(b->rank, 1);
  EXPECT_EQ(a->kept, 80u);  // 4 complete events per step
  TraceDiff d = DiffProfiles(*a, *b);
  ASSERT_GE(d.rows.size(), 4u);
  // Both kernels moved by 2000 us x 20 = 40 ms; the tie is broken by the
  // larger total, the GEMM on B (60 ms).
  EXPECT_EQ(d.rows[0].name, "sm90_gemm_bf16");
  EXPECT_DOUBLE_EQ(d.rows[0].delta_total_us(), 40'000);
  EXPECT_DOUBLE_EQ(d.rows[0].a.p50_us, 1000);
  EXPECT_DOUBLE_EQ(d.rows[0].b.p99_us, 3000);
  EXPECT_EQ(d.rows[0].kind, TraceEventKind::kKernel);
  const TraceDiffRow* nccl =
      FindRow(d, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL");
  ASSERT_NE(nccl, nullptr);
  EXPECT_DOUBLE_EQ(nccl->delta_total_us(), -40'000);
  const TraceDiffRow* mm = FindRow(d, "aten::mm");
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(mm->kind, TraceEventKind::kOperator);
  EXPECT_EQ(mm->delta_count(), 0);
  EXPECT_DOUBLE_EQ(mm->delta_total_us(), 0);
  EXPECT_FALSE(d.spans_differ);
  // Kind totals: kernels sum to the same time on both ranks here.
  ASSERT_FALSE(d.kinds.empty());
  EXPECT_EQ(d.kinds[0].kind, TraceEventKind::kKernel);
  EXPECT_EQ(d.kinds[0].a.count, 40u);
  EXPECT_DOUBLE_EQ(d.kinds[0].a.total_us, d.kinds[0].b.total_us);
}

TEST(TraceDiffTest, PercentilesFollowTheDistribution) {
  std::vector<double> d;
  for (int i = 1; i <= 100; ++i) d.push_back(i);
  DurationStats s = ComputeStats(d);
  EXPECT_EQ(s.count, 100u);
  EXPECT_DOUBLE_EQ(s.total_us, 5050);
  EXPECT_DOUBLE_EQ(s.max_us, 100);
  EXPECT_NEAR(s.p50_us, 50, 1);
  EXPECT_NEAR(s.p99_us, 99, 1);
  EXPECT_EQ(ComputeStats({}).count, 0u);
}

TEST(TraceDiffTest, TwoWindowsOfOneTrace) {
  TraceFiles files;
  // Steps 0-9 have a 1 ms GEMM, steps 10-19 a 2 ms one (first event at
  // t=1 s; each step 10 ms).
  json events = json::array();
  for (int s = 0; s < 20; ++s) {
    events.push_back(
        Complete("kernel", "gemm", 1e6 + s * 1e4, s < 10 ? 1000 : 2000));
  }
  std::string path =
      files.Write("one.json", json{{"traceEvents", events}}.dump());
  auto w1 = ParseTraceWindow(":100");
  auto w2 = ParseTraceWindow("100:");
  ASSERT_TRUE(w1.ok() && w2.ok());
  auto a = ProfileTrace(path, *w1);
  auto b = ProfileTrace(path, *w2);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->rank, -1);
  EXPECT_EQ(a->kept, 10u);
  EXPECT_EQ(b->kept, 10u);
  TraceDiff d = DiffProfiles(*a, *b);
  ASSERT_EQ(d.rows.size(), 1u);
  EXPECT_DOUBLE_EQ(d.rows[0].delta_p50_us(), 1000);
  EXPECT_DOUBLE_EQ(d.rows[0].delta_total_us(), 10'000);
}

TEST(TraceDiffTest, WindowsAreValidated) {
  EXPECT_FALSE(ParseTraceWindow("5").ok());
  EXPECT_FALSE(ParseTraceWindow("a:b").ok());
  EXPECT_FALSE(ParseTraceWindow("10:5").ok());
  EXPECT_FALSE(ParseTraceWindow("-1:5").ok());
  EXPECT_FALSE(ParseTraceWindow("1:2:3").ok());
  auto w = ParseTraceWindow("2.5:7");
  ASSERT_TRUE(w.ok());
  EXPECT_DOUBLE_EQ(w->start_ms, 2.5);
  EXPECT_DOUBLE_EQ(w->end_ms, 7);
}

TEST(TraceDiffTest, MalformedTraceNamesFileAndOffset) {
  TraceFiles files;
  std::string path =
      files.Write("bad.json", R"({"traceEvents": [{"ph": "X", "ts": 1,,}]})");
  auto p = ProfileTrace(path, {});
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(p.status().message()),
              HasSubstr("malformed JSON at byte 38"));
  auto empty = ProfileTrace(files.Write("empty.json", ""), {});
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("empty file"));
  EXPECT_FALSE(ProfileTrace(files.Write("no.json", "[1,2]"), {}).ok());
  EXPECT_FALSE(ProfileTrace("/nonexistent/trace.json", {}).ok());
}

TEST(TraceDiffTest, ReportListsTopRowsAndJsonKeepsZeros) {
  TraceFiles files;
  auto a =
      ProfileTrace(files.Write("r0.json", MakeTrace(0, 5, 1000, 2500)), {});
  auto b = ProfileTrace(files.Write("r1.json", MakeTrace(1, 5, 3000, 500)), {});
  ASSERT_TRUE(a.ok() && b.ok());
  TraceDiff d = DiffProfiles(*a, *b);
  std::string table = FormatTraceDiff(*a, *b, d, 2, 20);
  EXPECT_THAT(table, HasSubstr("(rank 0)"));
  EXPECT_THAT(table, HasSubstr("2 of 4 names"));
  EXPECT_THAT(table, HasSubstr("sm90_gemm_bf16"));
  EXPECT_THAT(table, HasSubstr("ncclDevKernel_All..."));  // shortened to 20
  EXPECT_THAT(table, Not(HasSubstr("aten::mm")));         // not in the top 2
  json j = TraceDiffJson(*a, *b, d, 0);
  EXPECT_EQ(j["rows_total"], 4);
  ASSERT_EQ(j["rows"].size(), 4u);
  EXPECT_EQ(j["a"]["rank"], 0);
  // aten::mm has a zero delta: the field is present, not omitted.
  bool saw_zero = false;
  for (const json& r : j["rows"]) {
    ASSERT_TRUE(r.contains("delta_count"));
    if (r["name"] == "aten::mm") saw_zero = r["delta_total_us"] == 0.0;
  }
  EXPECT_TRUE(saw_zero);
}

TEST(TraceDiffToolTest, PrintsJsonAndFailsOnBadInput) {
  TraceFiles files;
  std::string a = files.Write("r0.json", MakeTrace(0, 3, 1000, 2500));
  std::string b = files.Write("r1.json.gz.txt", MakeTrace(1, 3, 3000, 500));
  const char* bin_dir = std::getenv("PITSTOP_BINARY_DIR");
  if (bin_dir == nullptr) {
    GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set (run through ctest)";
  }
  std::string tool = std::string(bin_dir) + "/tools/pitstop/pitstop";
  std::string out = files.Write("out.json", "");
  int rc = std::system(
      absl::StrCat(tool, " diff ", a, " ", b, " -o json --top 1 >", out)
          .c_str());
  ASSERT_EQ(WEXITSTATUS(rc), 0);
  std::ifstream in(out);
  json j = json::parse(in);
  ASSERT_EQ(j["rows"].size(), 1u);
  EXPECT_EQ(j["rows"][0]["name"], "sm90_gemm_bf16");
  rc = std::system(
      absl::StrCat(tool, " diff ", a, " /nonexistent 2>/dev/null").c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 2);
  rc = std::system(
      absl::StrCat(tool, " diff ", a, " ", a, " --window-a 9:1 2>/dev/null")
          .c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 2);
}

}  // namespace
}  // namespace pitstop::importers
