// The deterministic data-parallel trainer: the gradient is right (finite
// differences), and N real processes over the CPU NCCL backend end with
// bit-identical weights on every rank and in every run, having learned.
#include "src/trainer/dp_trainer.h"

#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/nccl/cpu/nccl_functions.h"
#include "tests/nccl/rank_group.h"

namespace pitstop::trainer {
namespace {

using pitstop::testing::AllExitedZero;
using pitstop::testing::Describe;
using pitstop::testing::RunRanks;
using pitstop::testing::UniqueIdHex;

double Loss(const ModelShape& s, uint64_t seed, const std::vector<float>& p,
            uint64_t first, int n) {
  std::vector<float> g(p.size());
  return AccumulateGradient(s, seed, p, first, n, &g);
}

TEST(DpTrainerTest, GradientMatchesFiniteDifferences) {
  const ModelShape s{.inputs = 4, .hidden = 5};
  std::vector<float> p = InitialParameters(s, 7);
  std::vector<float> g(p.size());
  AccumulateGradient(s, 7, p, 100, 8, &g);
  for (size_t i = 0; i < p.size(); ++i) {
    const float eps = 1e-2f;
    std::vector<float> plus = p, minus = p;
    plus[i] += eps;
    minus[i] -= eps;
    const double numeric =
        (Loss(s, 7, plus, 100, 8) - Loss(s, 7, minus, 100, 8)) / (2 * eps);
    EXPECT_NEAR(g[i], numeric, 2e-3 + 2e-2 * std::fabs(numeric))
        << "parameter " << i;
  }
}

TEST(DpTrainerTest, SamplesArePureFunctionsOfSeedAndIndex) {
  const ModelShape s;
  std::vector<float> x1(s.inputs), x2(s.inputs);
  float y1 = 0, y2 = 0;
  Sample(s, 3, 12345, x1.data(), &y1);
  Sample(s, 3, 12345, x2.data(), &y2);
  EXPECT_EQ(x1, x2);
  EXPECT_EQ(y1, y2);
  Sample(s, 3, 12346, x2.data(), &y2);
  EXPECT_NE(x1, x2);
}

class DpTrainerRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pst-dptrain-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    setenv("PITSTOP_CPU_NCCL_STORE_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    const std::string cmd = "rm -rf '" + dir_ + "'";
    (void)std::system(cmd.c_str());
  }

  // Runs the trainer on n ranks; returns each rank's final weights.
  std::vector<std::vector<float>> Train(int n, const std::string& tag) {
    ncclUniqueId id;
    EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    std::vector<std::vector<std::string>> argv;
    for (int r = 0; r < n; ++r) {
      argv.push_back({DP_TRAINER, "--rank", absl::StrCat(r), "--nranks",
                      absl::StrCat(n), "--unique-id",
                      UniqueIdHex(&id, sizeof(id)), "--steps", "60", "--batch",
                      "16", "--seed", "11", "--log-every", "0", "--out",
                      absl::StrCat(dir_, "/", tag, r, ".bin")});
    }
    const auto results = RunRanks(n, argv,
                                  {{"PITSTOP_CPU_NCCL_TIMEOUT_MS", "60000"},
                                   {"NCCL_PROFILER_PLUGIN", "none"}},
                                  dir_, 150);
    EXPECT_TRUE(AllExitedZero(results)) << Describe(results);
    std::vector<std::vector<float>> weights;
    for (int r = 0; r < n; ++r) {
      std::ifstream f(absl::StrCat(dir_, "/", tag, r, ".bin"),
                      std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(f)),
                        std::istreambuf_iterator<char>());
      std::vector<float> w(bytes.size() / sizeof(float));
      std::memcpy(w.data(), bytes.data(), w.size() * sizeof(float));
      weights.push_back(std::move(w));
    }
    return weights;
  }

  std::string dir_;
};

TEST_F(DpTrainerRunTest, TwoRunsOnThreeRanksAreBitIdentical) {
  const auto a = Train(3, "a");
  const auto b = Train(3, "b");
  const ModelShape shape;
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  ASSERT_EQ(a[0].size(), ParameterCount(shape));
  for (int r = 0; r < 3; ++r) {
    // Same bytes: every rank in one run, and run a vs run b.
    EXPECT_EQ(0, std::memcmp(a[r].data(), a[0].data(), a[0].size() * 4))
        << "rank " << r << " differs from rank 0 in run a";
    EXPECT_EQ(0, std::memcmp(a[r].data(), b[r].data(), a[0].size() * 4))
        << "rank " << r << " differs between runs";
  }
  EXPECT_EQ(Fingerprint(a[0]), Fingerprint(b[0]));
  // It learned: the loss on held-out samples fell well below the start.
  const uint64_t held_out = 1'000'000;
  const double before =
      Loss(shape, 11, InitialParameters(shape, 11), held_out, 512);
  const double after = Loss(shape, 11, a[0], held_out, 512);
  EXPECT_LT(after, 0.5 * before) << "before " << before << " after " << after;
}

}  // namespace
}  // namespace pitstop::trainer
