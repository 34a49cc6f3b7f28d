// Communicator virtualisation across real processes over the CPU NCCL
// backend (ranks: virt_rank_main.cc): libnccl-profiler-pitstop.so
// LD_PRELOADed with PITSTOP_VIRTUALIZE_COMMS=1 hands out handles that are
// not NCCL's communicators and every call through them gives the known
// answer; off (the default) the application gets the real communicator;
// a swap to a fresh communicator between two all-reduces keeps the results
// and bumps the epoch; the deterministic trainer ends with the same weights
// either way.
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/nccl/cpu/nccl_functions.h"
#include "tests/nccl/rank_group.h"

namespace pitstop::testing {
namespace {

constexpr int kDeadlineS = 150;
constexpr char kAnnounce[] =
    "pitstop: communicator virtualisation on (NCCL 2.28.9: shrink yes, "
    "revoke yes, grow no)";

class VirtTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pst-virt-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    setenv("PITSTOP_CPU_NCCL_STORE_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    if (!dir_.empty()) {
      const std::string cmd = "rm -rf '" + dir_ + "'";
      (void)std::system(cmd.c_str());
    }
  }

  // Runs `n` ranks of `binary SCENARIO r n ID1 ID2` (two fresh ids).
  std::vector<RankResult> Run(const char* binary, const std::string& scenario,
                              int n, std::map<std::string, std::string> env) {
    ncclUniqueId id1, id2;
    EXPECT_EQ(ncclGetUniqueId(&id1), ncclSuccess);
    EXPECT_EQ(ncclGetUniqueId(&id2), ncclSuccess);
    const std::string hex1 = UniqueIdHex(&id1, sizeof(id1));
    const std::string hex2 = UniqueIdHex(&id2, sizeof(id2));
    std::vector<std::vector<std::string>> argv;
    for (int r = 0; r < n; ++r) {
      argv.push_back(
          {binary, scenario, absl::StrCat(r), absl::StrCat(n), hex1, hex2});
    }
    env.emplace("PITSTOP_CPU_NCCL_TIMEOUT_MS", "60000");
    env.emplace("NCCL_PROFILER_PLUGIN", "none");
    return RunRanks(n, argv, env, dir_, kDeadlineS);
  }

  static std::map<std::string, std::string> Preload() {
    const char* asan = std::getenv("ASAN_OPTIONS");
    return {{"LD_PRELOAD", PITSTOP_PLUGIN_PATH},
            {"ASAN_OPTIONS", std::string(asan != nullptr ? asan : "") +
                                 ":verify_asan_link_order=0"}};
  }

  std::string dir_;
};

TEST_F(VirtTest, HandlesAreNotRealCommsAndEveryCallWorksOnThreeRanks) {
  auto env = Preload();
  env["PITSTOP_VIRTUALIZE_COMMS"] = "1";
  const auto results = Run(PITSTOP_VIRT_RANK, "virtual", 3, env);
  ASSERT_TRUE(AllExitedZero(results)) << Describe(results);
  for (const auto& r : results) {
    // The version probe, once per process, at the first communicator.
    EXPECT_NE(r.stderr_text.find(kAnnounce), std::string::npos)
        << r.stderr_text;
  }
}

TEST_F(VirtTest, OffByDefaultTheApplicationGetsTheRealCommunicator) {
  const auto results = Run(PITSTOP_VIRT_RANK, "plain", 2, Preload());
  ASSERT_TRUE(AllExitedZero(results)) << Describe(results);
  for (const auto& r : results) {
    EXPECT_EQ(r.stderr_text.find("virtualisation"), std::string::npos)
        << r.stderr_text;
  }
}

TEST_F(VirtTest, AValueOtherThanZeroOrOneIsOffAndWarned) {
  auto env = Preload();
  env["PITSTOP_VIRTUALIZE_COMMS"] = "yes";
  const auto results = Run(PITSTOP_VIRT_RANK, "plain", 2, env);
  ASSERT_TRUE(AllExitedZero(results)) << Describe(results);
  for (const auto& r : results) {
    EXPECT_NE(r.stderr_text.find("PITSTOP_VIRTUALIZE_COMMS='yes' is not 0 or "
                                 "1; communicator virtualisation stays off"),
              std::string::npos)
        << r.stderr_text;
  }
}

TEST_F(VirtTest, SwapToAFreshCommunicatorKeepsResultsAndBumpsTheEpoch) {
  const auto results = Run(PITSTOP_VIRT_SWAP_RANK, "swap", 3,
                           {{"PITSTOP_VIRTUALIZE_COMMS", "1"}});
  ASSERT_TRUE(AllExitedZero(results)) << Describe(results);
}

// Without the variable the same swap program gets real communicators, so
// its handle checks fail: the scenario really depends on virtualisation.
TEST_F(VirtTest, SwapScenarioFailsWithVirtualisationOff) {
  const auto results = Run(PITSTOP_VIRT_SWAP_RANK, "swap", 2, {});
  EXPECT_FALSE(AllExitedZero(results)) << Describe(results);
  for (const auto& r : results) {
    EXPECT_FALSE(r.timed_out) << r.stderr_text;
  }
}

// The CPU backend's own scenario programs (tests/nccl/cpu_nccl_rank: every
// collective and datatype against known answers, split with NOCOLOR and
// shrink, non-blocking init, a dead peer with revoke / shrink / abort and a
// second destroy refused, an error spreading), unchanged, with every
// communicator virtualised.
struct Scenario {
  const char* name;
  int n_ranks;
};
// Printed in the test list (and so in ctest's names): the name, not the
// struct's bytes, which change with every run under ASLR.
void PrintTo(const Scenario& s, std::ostream* os) {
  *os << s.name << " x" << s.n_ranks;
}
class VirtScenarioTest : public VirtTest,
                         public ::testing::WithParamInterface<Scenario> {};

TEST_P(VirtScenarioTest, BackendScenarioPassesThroughHandles) {
  const Scenario& sc = GetParam();
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  const std::string hex = UniqueIdHex(&id, sizeof(id));
  std::vector<std::vector<std::string>> argv;
  for (int r = 0; r < sc.n_ranks; ++r) {
    argv.push_back({PITSTOP_CPU_NCCL_RANK, sc.name, absl::StrCat(r),
                    absl::StrCat(sc.n_ranks), hex});
  }
  auto env = Preload();
  env["PITSTOP_VIRTUALIZE_COMMS"] = "1";
  env["NCCL_PROFILER_PLUGIN"] = "none";
  env["PITSTOP_CPU_NCCL_TIMEOUT_MS"] = "60000";
  const auto results = RunRanks(sc.n_ranks, argv, env, dir_, kDeadlineS);
  ASSERT_TRUE(AllExitedZero(results)) << Describe(results);
  EXPECT_NE(results[0].stderr_text.find(kAnnounce), std::string::npos)
      << results[0].stderr_text;
}

INSTANTIATE_TEST_SUITE_P(Backend, VirtScenarioTest,
                         ::testing::Values(Scenario{"collectives", 3},
                                           Scenario{"split", 4},
                                           Scenario{"nonblocking", 2},
                                           Scenario{"peer-death", 3}),
                         [](const auto& info) {
                           std::string name = info.param.name;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

// A real training program, unchanged: the deterministic data-parallel
// trainer (one all-reduce of gradients per step) ends with byte-identical
// weights whether its communicator is virtualised or not.
TEST_F(VirtTest, TrainerWeightsAreIdenticalWithAndWithoutVirtualisation) {
  constexpr int kRanks = 2;
  auto train = [&](const std::string& tag, bool virtualise) {
    ncclUniqueId id;
    EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    const std::string hex = UniqueIdHex(&id, sizeof(id));
    std::vector<std::vector<std::string>> argv;
    for (int r = 0; r < kRanks; ++r) {
      argv.push_back({PITSTOP_DP_TRAINER, "--rank", absl::StrCat(r), "--nranks",
                      absl::StrCat(kRanks), "--unique-id", hex, "--steps", "30",
                      "--log-every", "0", "--out",
                      absl::StrCat(dir_, "/", tag, r, ".bin")});
    }
    auto env = Preload();
    env["NCCL_PROFILER_PLUGIN"] = "none";
    if (virtualise) env["PITSTOP_VIRTUALIZE_COMMS"] = "1";
    const auto results = RunRanks(kRanks, argv, env, dir_, kDeadlineS);
    EXPECT_TRUE(AllExitedZero(results)) << Describe(results);
    if (virtualise) {
      EXPECT_NE(results[0].stderr_text.find(kAnnounce), std::string::npos)
          << results[0].stderr_text;
    }
  };
  train("plain", false);
  train("virt", true);
  auto read = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  for (int r = 0; r < kRanks; ++r) {
    const std::string plain = read(absl::StrCat(dir_, "/plain", r, ".bin"));
    const std::string virt = read(absl::StrCat(dir_, "/virt", r, ".bin"));
    ASSERT_FALSE(plain.empty()) << "rank " << r << " wrote no weights";
    EXPECT_TRUE(plain == virt) << "rank " << r << " weights differ";
  }
}

}  // namespace
}  // namespace pitstop::testing
