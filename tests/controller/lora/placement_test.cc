// ComputePlacement on the hand-worked cases shared with the Python
// placement (tests/controller/lora/placement_cases.json), plus a brute
// force over every contiguous split and bad input.
#include "src/controller/lora/placement.h"

#include <fstream>
#include <random>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace pitstop::controller::lora {
namespace {

nlohmann::json LoadCases() {
  std::ifstream f(PITSTOP_LORA_CASES);
  EXPECT_TRUE(f.good()) << PITSTOP_LORA_CASES;
  return nlohmann::json::parse(f)["cases"];
}

TEST(LoraPlacementTest, SharedCases) {
  const nlohmann::json cases = LoadCases();
  ASSERT_GE(cases.size(), 5u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    PlacementInput in;
    for (const auto& [r, s] : c["speeds"].items()) {
      in.speeds[std::stoi(r)] = s.get<double>();
    }
    in.layer_costs = c["layer_costs"].get<std::vector<double>>();
    in.micro_batches = c["micro_batches"].get<uint32_t>();
    absl::StatusOr<Placement> p = ComputePlacement(in);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->excluded, c["excluded"].get<std::vector<int32_t>>());
    std::vector<uint32_t> layers;
    for (const Stage& s : p->stages)
      layers.push_back(s.layer_end - s.layer_begin);
    EXPECT_EQ(layers, c["layers_per_stage"].get<std::vector<uint32_t>>());
    EXPECT_NEAR(p->estimate.step_s, c["step_s"].get<double>(), 1e-9);
    EXPECT_NEAR(p->estimate.bottleneck_s, c["bottleneck_s"].get<double>(),
                1e-9);
    EXPECT_NEAR(p->estimate.samples_per_s,
                in.micro_batches / c["step_s"].get<double>(), 1e-9);
    ASSERT_FALSE(p->stages.empty());
    EXPECT_EQ(p->stages.front().layer_begin, 0u);
    EXPECT_EQ(p->stages.back().layer_end, in.layer_costs.size());
    for (size_t i = 1; i < p->stages.size(); ++i) {
      EXPECT_EQ(p->stages[i - 1].layer_end, p->stages[i].layer_begin);
      EXPECT_LT(p->stages[i - 1].rank, p->stages[i].rank);
    }
  }
}

double BruteForce(const std::vector<int32_t>& ranks,
                  const std::map<int32_t, double>& speeds,
                  const std::vector<double>& costs, uint32_t mb) {
  const size_t n = costs.size(), p = ranks.size();
  double best = 1e300;
  // Every cut set: bit i set = cut after layer i.
  for (uint32_t mask = 0; mask < (1u << (n - 1)); ++mask) {
    if (static_cast<size_t>(__builtin_popcount(mask)) != p - 1) continue;
    std::vector<Stage> st;
    uint32_t b = 0;
    for (uint32_t i = 0; i + 1 < n; ++i) {
      if (mask & (1u << i)) {
        st.push_back({ranks[st.size()], b, i + 1});
        b = i + 1;
      }
    }
    st.push_back({ranks[st.size()], b, static_cast<uint32_t>(n)});
    best = std::min(best, EstimateStages(st, speeds, costs, mb)->step_s);
  }
  return best;
}

TEST(LoraPlacementTest, SplitIsOptimalAgainstBruteForce) {
  std::mt19937 rng(17);
  const double speed_choices[] = {0.25, 0.5, 1.0, 1.5, 2.0};
  const double cost_choices[] = {0.5, 1.0, 2.0, 3.0};
  for (int iter = 0; iter < 200; ++iter) {
    const size_t p = 1 + rng() % 4;
    const size_t n = p + rng() % (10 - p);
    std::vector<int32_t> ranks;
    std::map<int32_t, double> speeds;
    for (size_t r = 0; r < p; ++r) {
      ranks.push_back(r);
      speeds[r] = speed_choices[rng() % 5];
    }
    std::vector<double> costs;
    for (size_t i = 0; i < n; ++i) costs.push_back(cost_choices[rng() % 4]);
    const uint32_t mb = 1 + rng() % 8;
    const std::vector<Stage> st = SplitLayers(ranks, speeds, costs, mb);
    ASSERT_EQ(st.size(), p);
    EXPECT_NEAR(EstimateStages(st, speeds, costs, mb)->step_s,
                BruteForce(ranks, speeds, costs, mb), 1e-9)
        << "iteration " << iter;
  }
}

TEST(LoraPlacementTest, BadInputNamesTheField) {
  PlacementInput in;
  in.speeds = {{0, 1.0}};
  in.layer_costs = {1.0, 0.0};
  EXPECT_EQ(ComputePlacement(in).status().message(),
            "layer_costs[1]: must be > 0, got 0");
  in.layer_costs = {1.0, 1.0};
  in.speeds[2] = -1;
  EXPECT_EQ(ComputePlacement(in).status().message(),
            "speeds[2]: must be > 0, got -1");
  in.speeds.erase(2);
  in.ranks = {0, 5};
  EXPECT_EQ(ComputePlacement(in).status().message(),
            "speeds: no speed for rank 5");
}

TEST(LoraPlacementTest, MovedLayersCountsOwnerChanges) {
  const std::vector<Stage> a = {{0, 0, 2}, {1, 2, 4}, {2, 4, 6}, {3, 6, 8}};
  const std::vector<Stage> b = {{0, 0, 3}, {1, 3, 5}, {2, 5, 7}, {3, 7, 8}};
  EXPECT_EQ(MovedLayers(a, a), 0u);
  EXPECT_EQ(MovedLayers(a, b), 3u);  // layers 2, 4 and 6
}

}  // namespace
}  // namespace pitstop::controller::lora
