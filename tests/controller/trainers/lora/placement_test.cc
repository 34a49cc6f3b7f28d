// ComputePlacement on the hand-worked cases shared with the Python
// placement (tests/controller/trainers/lora/placement_cases.json), plus a brute
// force over every contiguous split and bad input.
#include "src/controller/trainers/lora/placement.h"

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
    in.adapters = c.value("adapters", std::vector<uint32_t>{});
    in.max_pipelines = c.value("max_pipelines", 1u);
    in.max_layers_per_rank = c.value("max_layers_per_rank", 0u);
    absl::StatusOr<Placement> p = ComputePlacement(in);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->excluded, c["excluded"].get<std::vector<int32_t>>());
    // One pipeline: layers_per_stage, every adapter (no list).
    nlohmann::json want = nlohmann::json::array();
    if (c.contains("pipelines")) {
      want = c["pipelines"];
    } else {
      want.push_back({{"layers_per_stage", c["layers_per_stage"]},
                      {"adapters", nlohmann::json::array()}});
    }
    ASSERT_EQ(p->pipelines.size(), want.size());
    for (size_t q = 0; q < want.size(); ++q) {
      std::vector<uint32_t> layers;
      for (const Stage& s : p->pipelines[q].stages) {
        layers.push_back(s.layer_end - s.layer_begin);
      }
      EXPECT_EQ(layers,
                want[q]["layers_per_stage"].get<std::vector<uint32_t>>());
      EXPECT_EQ(p->pipelines[q].adapters,
                want[q]["adapters"].get<std::vector<uint32_t>>());
    }
    const std::vector<Stage> stages = p->pipelines[0].stages;
    EXPECT_NEAR(p->estimate.step_s, c["step_s"].get<double>(), 1e-9);
    EXPECT_NEAR(p->estimate.bottleneck_s, c["bottleneck_s"].get<double>(),
                1e-9);
    EXPECT_NEAR(p->estimate.samples_per_s,
                in.micro_batches / c["step_s"].get<double>(), 1e-9);
    ASSERT_FALSE(stages.empty());
    EXPECT_EQ(stages.front().layer_begin, 0u);
    EXPECT_EQ(stages.back().layer_end, in.layer_costs.size());
    for (size_t i = 1; i < stages.size(); ++i) {
      EXPECT_EQ(stages[i - 1].layer_end, stages[i].layer_begin);
      EXPECT_LT(stages[i - 1].rank, stages[i].rank);
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

// --- several pipelines --------------------------------------------------

// Every way to write `total` as `parts` ordered summands in [lo, hi].
void Compositions(uint32_t total, uint32_t parts, uint32_t lo, uint32_t hi,
                  std::vector<uint32_t>* cur,
                  std::vector<std::vector<uint32_t>>* out) {
  if (parts == 0) {
    if (total == 0) out->push_back(*cur);
    return;
  }
  for (uint32_t first = lo; first <= hi && first <= total; ++first) {
    cur->push_back(first);
    Compositions(total - first, parts - 1, lo, hi, cur, out);
    cur->pop_back();
  }
}

std::vector<std::vector<uint32_t>> Compositions(uint32_t total, uint32_t parts,
                                                uint32_t lo, uint32_t hi) {
  std::vector<std::vector<uint32_t>> out;
  std::vector<uint32_t> cur;
  Compositions(total, parts, lo, hi, &cur, &out);
  return out;
}

// Largest samples/s over every kept subset, contiguous rank groups,
// adapter count per group and layer split per group (the same brute force
// as python/tests/test_placement.py).
double BruteForcePipelines(size_t p, const std::map<int32_t, double>& speeds,
                           const std::vector<double>& costs, uint32_t mpa,
                           uint32_t k, uint32_t max_pipelines,
                           uint32_t max_layers) {
  const uint32_t n = costs.size();
  double best = 0;
  for (uint32_t mask = 1; mask < (1u << p); ++mask) {
    std::vector<int32_t> kept;
    for (size_t r = 0; r < p; ++r) {
      if (mask & (1u << r)) kept.push_back(r);
    }
    const uint32_t keep = kept.size();
    for (uint32_t q = 1; q <= std::min({max_pipelines, keep, k}); ++q) {
      for (const auto& sizes : Compositions(keep, q, 1, n)) {
        for (const auto& counts : Compositions(k, q, 1, k)) {
          double step = 0;
          bool ok = true;
          size_t at = 0;
          for (uint32_t g = 0; g < q && ok; ++g) {
            std::vector<int32_t> grp(kept.begin() + at,
                                     kept.begin() + at + sizes[g]);
            at += sizes[g];
            double gbest = 1e300;
            for (const auto& split :
                 Compositions(n, grp.size(), 1, max_layers ? max_layers : n)) {
              std::vector<Stage> st;
              uint32_t b = 0;
              for (size_t i = 0; i < grp.size(); ++i) {
                st.push_back({grp[i], b, b + split[i]});
                b += split[i];
              }
              gbest = std::min(
                  gbest,
                  EstimateStages(st, speeds, costs, mpa * counts[g])->step_s);
            }
            if (gbest == 1e300) ok = false;
            step = std::max(step, gbest);
          }
          if (ok) best = std::max(best, double(mpa) * k / step);
        }
      }
    }
  }
  return best;
}

TEST(LoraPlacementTest, SeveralPipelinesAreOptimalAgainstBruteForce) {
  std::mt19937 rng(1717);
  const double speed_choices[] = {0.25, 0.5, 1.0, 2.0};
  const double cost_choices[] = {0.5, 1.0, 2.0};
  const uint32_t max_layer_choices[] = {0, 0, 2, 3, 4};
  for (int iter = 0; iter < 60; ++iter) {
    const size_t p = 1 + rng() % 5;
    const size_t n = 2 + rng() % 5;
    const uint32_t k = 1 + rng() % 4;
    const uint32_t mpa = 1 + rng() % 3;
    uint32_t max_layers = max_layer_choices[rng() % 5];
    if (max_layers && max_layers * p < n) max_layers = 0;
    PlacementInput in;
    for (size_t r = 0; r < p; ++r) in.speeds[r] = speed_choices[rng() % 4];
    for (size_t i = 0; i < n; ++i) {
      in.layer_costs.push_back(cost_choices[rng() % 3]);
    }
    in.micro_batches = mpa * k;
    for (uint32_t a = 0; a < k; ++a) in.adapters.push_back(a);
    in.max_pipelines = 3;
    in.max_layers_per_rank = max_layers;
    absl::StatusOr<Placement> got = ComputePlacement(in);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_NEAR(got->estimate.samples_per_s,
                BruteForcePipelines(p, in.speeds, in.layer_costs, mpa, k, 3,
                                    max_layers),
                1e-9)
        << "iteration " << iter;
    std::vector<uint32_t> seen;
    for (const Pipeline& q : got->pipelines) {
      ASSERT_FALSE(q.stages.empty());
      EXPECT_EQ(q.stages.front().layer_begin, 0u);
      EXPECT_EQ(q.stages.back().layer_end, n);
      for (const Stage& s : q.stages) {
        EXPECT_TRUE(!max_layers || s.layer_end - s.layer_begin <= max_layers);
      }
      seen.insert(seen.end(), q.adapters.begin(), q.adapters.end());
    }
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen.size(), k);
    absl::StatusOr<Estimate> e = EstimatePipelines(
        got->pipelines, in.speeds, in.layer_costs, in.micro_batches, 1, k);
    ASSERT_TRUE(e.ok());
    EXPECT_NEAR(e->samples_per_s, got->estimate.samples_per_s, 1e-9);
  }
}

// The case python/tests/test_placement.py checks by hand: 4 ranks that
// hold at most 4 of 8 layers each: two pipelines of two; with rank 3 at
// half speed its pipeline trains one adapter.
TEST(LoraPlacementTest, TwoPipelinesOfTwoWhenARankHoldsHalfTheModel) {
  PlacementInput in;
  in.speeds = {{0, 1.0}, {1, 1.0}, {2, 1.0}, {3, 1.0}};
  in.layer_costs.assign(8, 1.0);
  in.micro_batches = 8;
  in.adapters = {0, 1, 2, 3};
  in.max_pipelines = 2;
  in.max_layers_per_rank = 4;
  absl::StatusOr<Placement> p = ComputePlacement(in);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->pipelines.size(), 2u);
  EXPECT_EQ(p->pipelines[0], (Pipeline{{{0, 0, 4}, {1, 4, 8}}, {0, 1}}));
  EXPECT_EQ(p->pipelines[1], (Pipeline{{{2, 0, 4}, {3, 4, 8}}, {2, 3}}));
  EXPECT_NEAR(p->estimate.step_s, 20.0, 1e-9);
  in.speeds[3] = 0.5;
  p = ComputePlacement(in);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->pipelines.size(), 2u);
  EXPECT_EQ(p->pipelines[0].adapters, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(p->pipelines[1].adapters, (std::vector<uint32_t>{3}));
  // Moving adapter 2 to the first pipeline: layers 0..3 of it go to rank 0,
  // 4..7 to rank 1 (8 (layer, rank) pairs).
  Placement before;
  before.pipelines = {Pipeline{{{0, 0, 4}, {1, 4, 8}}, {0, 1}},
                      Pipeline{{{2, 0, 4}, {3, 4, 8}}, {2, 3}}};
  EXPECT_EQ(MovedLayers(before, *p, in.adapters), 8u);
  EXPECT_EQ(MovedLayers(before, before, in.adapters), 0u);
  in.max_layers_per_rank = 1;
  EXPECT_EQ(ComputePlacement(in).status().message(),
            "max_layers_per_rank: 8 layers do not fit on 4 ranks of 1 layers");
  in.max_layers_per_rank = 0;
  in.micro_batches = 7;
  EXPECT_EQ(ComputePlacement(in).status().message(),
            "micro_batches: 7 is not a multiple of 4 adapters");
}

}  // namespace
}  // namespace pitstop::controller::lora
