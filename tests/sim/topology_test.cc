#include "src/sim/topology.h"

#include <cstdlib>
#include <filesystem>

#include "gtest/gtest.h"
#include "src/sim/scenario.h"

namespace pitstop::sim {
namespace {

// Two servers of two GPUs: NVSwitches 4 and 5, ToRs 6 and 7, a spine 8.
constexpr char kTiny[] =
    "9 2 2 3 8 H20\n"
    "4 5 6 7 8\n"
    "0 4 900Gbps 0.000025ms 0\n"
    "0 6 200Gbps 0.001ms 0\n"
    "1 4 900Gbps 0.000025ms 0\n"
    "1 7 200Gbps 0.001ms 0\n"
    "2 5 900Gbps 0.000025ms 0\n"
    "2 6 100Gbps 0.001ms 0\n"
    "3 5 900Gbps 0.000025ms 0\n"
    "6 8 400Gbps 0.001ms 0\n";

TEST(TopologyTest, ParsesShapeAndSlowestLinks) {
  auto t = ParseTopology(kTiny, "tiny.txt");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->gpus, 4);
  EXPECT_EQ(t->nodes, 2);
  EXPECT_EQ(t->gpus_per_node, 2);
  EXPECT_DOUBLE_EQ(t->nvlink_gbps, 900);
  EXPECT_DOUBLE_EQ(t->nic_gbps, 100);  // the slowest GPU <-> ToR link
  EXPECT_EQ(t->links, 8);
}

TEST(TopologyTest, BadLinkLineNamesFileAndLine) {
  auto t = ParseTopology("9 2 2 3 8 H20\n4 5 6 7 8\n0 4 fast 1ms 0\n", "x.txt");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("x.txt:3"), std::string::npos)
      << t.status();
}

TEST(TopologyTest, ScenarioTakesItsShapeFromTheSharedDataFile) {
  const char* src = std::getenv("PITSTOP_SOURCE_DIR");
  const std::filesystem::path file =
      std::filesystem::path(src ? src : ".") / ".." / "shared" / "data" /
      "topology" / "Rail_Opti_SingleToR_16g_8gps_200Gbps_H20.txt";
  if (!std::filesystem::exists(file)) {
    GTEST_SKIP() << "../shared/data/topology is absent (" << file << ")";
  }
  auto s = ParseScenario(
      "cluster:\n  topology: " + file.string() + "\njob: {tp: 8}\n",
      "topo.yaml");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->nodes, 2);
  EXPECT_EQ(s->gpus_per_node, 8);
  EXPECT_EQ(s->nics_per_node, 8);
  EXPECT_DOUBLE_EQ(s->nvlink_gbps, 900);
  EXPECT_DOUBLE_EQ(s->nic_gbps, 200);
  EXPECT_EQ(s->dp, 2);
}

}  // namespace
}  // namespace pitstop::sim
