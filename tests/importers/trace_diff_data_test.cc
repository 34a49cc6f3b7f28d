// `pitstop diff` on the real Kineto pair of ../shared/data/kineto (ranks 0
// and 1 of one 128-rank job, same window). Skips loudly when it is absent.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "src/importers/input_file.h"
#include "src/importers/trace_diff.h"

namespace pitstop::importers {
namespace {

using nlohmann::json;

std::string DataDir() {
  const char* src = std::getenv("PITSTOP_SOURCE_DIR");
  return std::string(src != nullptr ? src : ".") + "/../shared/data";
}

// Independent of the streaming reader: the whole file as one DOM.
std::map<std::string, double> KernelTotals(const std::string& path) {
  auto bytes = ReadInputFile(path);
  EXPECT_TRUE(bytes.ok());
  std::map<std::string, double> totals;
  json doc = json::parse(*bytes);
  for (const json& e : doc["traceEvents"]) {
    if (e.value("ph", "") == "X" && e.value("cat", "") == "kernel") {
      totals[e["name"].get<std::string>()] += e["dur"].get<double>();
    }
  }
  return totals;
}

TEST(TraceDiffData, RealPairMatchesABruteForceCount) {
  std::string r0 = DataDir() + "/kineto/trace_filter__sampled_rank-0.json.gz";
  std::string r1 = DataDir() + "/kineto/trace_filter__sampled_rank-1.json.gz";
  if (!std::ifstream(r0).good() || !std::ifstream(r1).good()) {
    GTEST_SKIP() << "SKIPPED: real data absent (" << r0 << ")";
  }
  auto a = ProfileTrace(r0, {});
  auto b = ProfileTrace(r1, {});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->rank, 0);
  EXPECT_EQ(b->rank, 1);
  TraceDiff d = DiffProfiles(*a, *b);
  std::map<std::string, double> ka = KernelTotals(r0), kb = KernelTotals(r1);
  ASSERT_FALSE(ka.empty());
  int checked = 0;
  for (const TraceDiffRow& row : d.rows) {
    if (row.kind != TraceEventKind::kKernel) continue;
    EXPECT_NEAR(row.a.total_us, ka[row.name], 1e-6) << row.name;
    EXPECT_NEAR(row.b.total_us, kb[row.name], 1e-6) << row.name;
    ++checked;
  }
  std::map<std::string, double> names = ka;
  names.insert(kb.begin(), kb.end());
  EXPECT_EQ(checked, static_cast<int>(names.size()));
  for (size_t i = 1; i < d.rows.size(); ++i) {
    EXPECT_GE(std::fabs(d.rows[i - 1].delta_total_us()),
              std::fabs(d.rows[i].delta_total_us()));
  }
  // The trace holds kernels, operators, runtime calls and annotations.
  std::map<TraceEventKind, bool> kinds;
  for (const TraceKindTotals& k : d.kinds) kinds[k.kind] = true;
  EXPECT_TRUE(kinds[TraceEventKind::kKernel]);
  EXPECT_TRUE(kinds[TraceEventKind::kOperator]);
  EXPECT_TRUE(kinds[TraceEventKind::kRuntime]);
}

}  // namespace
}  // namespace pitstop::importers
