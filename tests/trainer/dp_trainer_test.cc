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
#include "absl/strings/str_replace.h"
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
  std::vector<std::vector<float>> Train(
      int n, const std::string& tag, const std::string& steps = "60",
      const std::vector<std::string>& extra = {}) {
    ncclUniqueId id;
    EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    std::vector<std::vector<std::string>> argv;
    for (int r = 0; r < n; ++r) {
      argv.push_back({DP_TRAINER, "--rank", absl::StrCat(r), "--nranks",
                      absl::StrCat(n), "--unique-id",
                      UniqueIdHex(&id, sizeof(id)), "--steps", steps, "--batch",
                      "16", "--seed", "11", "--log-every", "0", "--out",
                      absl::StrCat(dir_, "/", tag, r, ".bin")});
      for (const std::string& x : extra) {
        argv.back().push_back(
            absl::StrReplaceAll(x, {{"{r}", absl::StrCat(r)}}));
      }
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

// A full restart from a checkpoint (new job, new communicator, new
// processes) ends exactly where the uninterrupted run ends.
TEST_F(DpTrainerRunTest, RestartFromCheckpointIsBitIdentical) {
  const auto straight = Train(2, "s", "40");
  const std::string ckpt = dir_ + "/ckpt{r}";
  Train(2, "h", "25", {"--save-at", "25", "--save", ckpt});
  const auto resumed = Train(2, "r", "40", {"--resume", ckpt});
  ASSERT_EQ(straight.size(), 2u);
  ASSERT_EQ(resumed.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(straight[r].size(), resumed[r].size());
    EXPECT_EQ(0, std::memcmp(straight[r].data(), resumed[r].data(),
                             straight[r].size() * 4))
        << "rank " << r;
  }
  // And the half-way weights are not the final ones (it did resume).
  const auto half = Train(2, "h2", "25");
  EXPECT_NE(
      0, std::memcmp(half[0].data(), straight[0].data(), half[0].size() * 4));
}

// A degraded GPU (--slow-from-step) stretches that rank's steps, and so
// every rank's (they wait for it at the all-reduce), without changing the
// weights. Sleeps are lower bounds: a slowed step takes at least
// compute_ms x slow_factor.
TEST_F(DpTrainerRunTest, DegradedGpuSlowsStepsNotResults) {
  const auto plain = Train(2, "p", "20");
  const auto slowed =
      Train(2, "d", "20",
            {"--compute-ms", "2", "--slow-from-step", "12", "--slow-factor",
             "6", "--step-log", dir_ + "/d{r}.steps"});
  ASSERT_EQ(plain.size(), 2u);
  ASSERT_EQ(slowed.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(plain[r].size(), slowed[r].size());
    EXPECT_EQ(
        0, std::memcmp(plain[r].data(), slowed[r].data(), plain[r].size() * 4))
        << "rank " << r;
  }
  for (int r = 0; r < 2; ++r) {
    std::ifstream f(absl::StrCat(dir_, "/d", r, ".steps"));
    int step = 0, lines = 0;
    double ms = 0;
    std::string w1, w2;
    while (f >> w1 >> step >> w2 >> ms) {
      ++lines;
      EXPECT_GE(ms, step >= 12 ? 12.0 : 2.0)
          << "rank " << r << " step " << step;
    }
    EXPECT_EQ(lines, 20) << "rank " << r;
  }
}

TEST(CheckpointTest, RoundTripsAndRejectsDamageWithFileAndOffset) {
  char tmpl[] = "/tmp/pst-ckpt-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string path = std::string(tmpl) + "/c";
  TrainOptions o;
  o.seed = 5;
  TrainState st{7, InitialParameters(o.shape, 5)};
  ASSERT_TRUE(SaveCheckpoint(path, o, st).ok());
  auto back = LoadCheckpoint(path, o);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->next_step, 7);
  EXPECT_EQ(back->params, st.params);

  TrainOptions other = o;
  other.seed = 6;
  auto wrong = LoadCheckpoint(path, other);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("seed 5"), std::string::npos)
      << wrong.status();

  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  bytes[100] ^= 1;  // a flipped bit in the parameters
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << bytes;
  }
  auto flipped = LoadCheckpoint(path, o);
  ASSERT_FALSE(flipped.ok());
  EXPECT_NE(flipped.status().message().find("checksum"), std::string::npos);
  EXPECT_NE(flipped.status().message().find(path), std::string::npos);
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << bytes.substr(0, 50);
  }
  auto cut = LoadCheckpoint(path, o);
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("truncated"), std::string::npos)
      << cut.status();
  (void)std::system((std::string("rm -rf ") + tmpl).c_str());
}

}  // namespace
}  // namespace pitstop::trainer
