// Importer tests on the real files of ../shared/data (label "data"). Each
// test skips loudly when the folder is absent.
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/importers/importer.h"

namespace pitstop::importers {
namespace {

std::string DataDir() {
  const char* src = std::getenv("PITSTOP_SOURCE_DIR");
  return std::string(src != nullptr ? src : ".") + "/../shared/data";
}

bool Exists(const std::string& p) { return std::ifstream(p).good(); }

#define REQUIRE_DATA(path)                                                \
  if (!Exists(path)) {                                                    \
    GTEST_SKIP() << "SKIPPED: real data absent (" << (path)               \
                 << "); set PITSTOP_SOURCE_DIR so ../shared/data exists"; \
  }

// Ground truth: "Fault ranks: [12, 14]" in fault_injection.log.
std::set<int32_t> FaultedRanks(const std::string& dir) {
  std::ifstream in(dir + "/fault_injection.log");
  std::stringstream ss;
  ss << in.rdbuf();
  std::smatch m;
  std::string text = ss.str();
  std::set<int32_t> out;
  if (std::regex_search(text, m,
                        std::regex(R"(Fault ranks:\s*\[([0-9,\s]*)\])"))) {
    std::string list = m[1];
    std::regex num("[0-9]+");
    for (auto it = std::sregex_iterator(list.begin(), list.end(), num);
         it != std::sregex_iterator(); ++it) {
      out.insert(std::stoi(it->str()));
    }
  }
  return out;
}

class FlightRecorderData : public ::testing::TestWithParam<std::string> {};

TEST_P(FlightRecorderData, ReadsEveryDumpIntoRecords) {
  std::string dir = DataDir() + "/flight-recorder/" + GetParam();
  REQUIRE_DATA(dir + "/fault_injection.log");
  auto job = ImportPaths({dir}, ImportOptions());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->format, "flight-recorder");
  EXPECT_EQ(job->world_size, 16);
  EXPECT_TRUE(job->missing_ranks.empty());
  ASSERT_EQ(job->ranks.size(), 16u);
  for (const ImportedRank& r : job->ranks) {
    EXPECT_FALSE(r.comms.empty()) << r.file;
    for (const v1::CommunicatorInfo& c : r.comms) {
      ASSERT_GE(c.rank(), 0);
      ASSERT_LT(c.rank(), c.global_ranks_size());
      EXPECT_EQ(c.global_ranks(c.rank()), r.global_rank) << c.comm_name();
    }
  }
  // The faulted ranks are in the data.
  for (int32_t f : FaultedRanks(dir)) {
    EXPECT_LT(f, 16);
  }
}

INSTANTIATE_TEST_SUITE_P(Scenarios, FlightRecorderData,
                         ::testing::Values("gpu_error_1st", "lock_gil_1st"));

}  // namespace
}  // namespace pitstop::importers
