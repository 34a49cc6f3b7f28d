// libnccl-tuner-pitstop.so in the NCCL tuner emulator: loaded by NCCL's
// naming rules (NCCL_TUNER_PLUGIN=pitstop) as every release it claims
// (2.24-2.27: v4, 2.28-2.29: v5, 2.30: v6) would load it, and steering
// exactly the communicators the per-node table names, following the table
// as the agent changes or replaces it.
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pitstop/tuner_table.h"
#include "src/nccl/emulator/tuner_emulator.h"

namespace pitstop::emu {
namespace {

using ::testing::HasSubstr;
using tuner::Steering;
using tuner::TunerTableWriter;

constexpr int kTree = tuner::kAlgoTree;
constexpr int kRing = tuner::kAlgoRing;
constexpr int kSimple = tuner::kProtoSimple;
constexpr size_t kBytes = size_t{1} << 30;

// One table path for the whole process (the tuner resolves it once, at its
// first init, as in a training process).
class TablePathEnv : public ::testing::Environment {
 public:
  void SetUp() override {
    char tmpl[] = "/tmp/pitstop-tuner-plugin-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir = tmpl;
    path = dir + "/table";
    setenv(tuner::kTableEnv, path.c_str(), 1);
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  static inline std::string dir;
  static inline std::string path;
};
const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new TablePathEnv);

std::unique_ptr<TunerTableWriter> NewTable() {
  std::string error;
  auto w = TunerTableWriter::Create(TablePathEnv::path, 16, &error);
  EXPECT_NE(w, nullptr) << error;
  return w;
}

Steering RingOnly(uint64_t comm, int max_channels, uint64_t epoch) {
  Steering s;
  s.comm_id = comm;
  s.plan_epoch = epoch;
  s.n_ranks = 16;
  s.n_nodes = 2;
  s.max_channels = max_channels;
  s.algo_mask = 1u << kRing;
  return s;
}

void ExpectDefaults(const CollDecision& d) {
  EXPECT_EQ(d.result, 0);
  EXPECT_EQ(d.n_channels, 0);
  EXPECT_EQ(d.costs, DefaultCostTable());
  EXPECT_EQ(d.algo, kTree);  // NCCL's own pick from the default table
  EXPECT_EQ(d.proto, kSimple);
}

struct Release {
  int code;
  int abi;
};
const Release kReleases[] = {{22403, 4}, {22605, 4}, {22707, 4},
                             {22809, 5}, {22903, 5}, {23007, 6}};

TEST(TunerPluginTest, LoadsByNcclNamingRulesOnEveryClaimedRelease) {
  for (const Release& r : kReleases) {
    SCOPED_TRACE(r.code);
    auto tuner =
        TunerEmulator::Create({.plugin = "pitstop", .nccl_version = r.code});
    ASSERT_TRUE(tuner.ok()) << tuner.status();
    EXPECT_EQ((*tuner)->abi_version(), r.abi);
    EXPECT_STREQ((*tuner)->plugin_name(), "pitstop");
    EXPECT_THAT((*tuner)->library_path(),
                HasSubstr("libnccl-tuner-pitstop.so"));
    auto comm =
        (*tuner)->InitComm({.comm_hash = 0x5, .n_ranks = 16, .n_nodes = 2});
    ASSERT_TRUE(comm.ok()) << comm.status();
    EXPECT_EQ(
        (*comm)->GetCollInfo(kFuncAllReduce, kBytes, DefaultCostTable()).result,
        0);
    EXPECT_EQ((*comm)->Finalize(), 0);
  }
  auto missing = TunerEmulator::Create({.plugin = "no-such-tuner"});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(),
              HasSubstr("libnccl-tuner-no-such-tuner.so"));
  EXPECT_FALSE(
      TunerEmulator::Create({.plugin = "pitstop", .nccl_version = 22304}).ok());
}

class TunerSteeringTest : public ::testing::TestWithParam<int> {};

TEST_P(TunerSteeringTest, SteersExactlyTheNamedCommunicators) {
  auto table = NewTable();
  std::string error;
  ASSERT_TRUE(table->Upsert(RingOnly(0xA, 4, 11), &error)) << error;

  auto tuner =
      TunerEmulator::Create({.plugin = "pitstop", .nccl_version = GetParam()});
  ASSERT_TRUE(tuner.ok()) << tuner.status();
  ASSERT_GE((*tuner)->abi_version(), 5);
  auto a = (*tuner)->InitComm({.comm_hash = 0xA, .n_ranks = 16, .n_nodes = 2});
  auto b = (*tuner)->InitComm({.comm_hash = 0xB, .n_ranks = 16, .n_nodes = 2});
  ASSERT_TRUE(a.ok() && b.ok());

  CollDecision da =
      (*a)->GetCollInfo(kFuncAllReduce, kBytes, DefaultCostTable());
  EXPECT_EQ(da.result, 0);
  EXPECT_EQ(da.n_channels, 4);
  EXPECT_EQ(da.algo, kRing);
  EXPECT_EQ(da.proto, kSimple);
  for (int p = 0; p < kTunerProtos; ++p) EXPECT_EQ(da.costs[kTree][p], -1.0f);
  EXPECT_EQ(da.costs[kRing], DefaultCostTable()[kRing]);  // NCCL's prices
  // Same shape, not named: untouched.
  ExpectDefaults((*b)->GetCollInfo(kFuncAllReduce, kBytes, DefaultCostTable()));

  // The plan moves: A's cap changes, B becomes steered.
  ASSERT_TRUE(
      table->Replace({RingOnly(0xA, 2, 12), RingOnly(0xB, 8, 12)}, &error));
  EXPECT_EQ(
      (*a)->GetCollInfo(kFuncAllReduce, kBytes, DefaultCostTable()).n_channels,
      2);
  EXPECT_EQ(
      (*b)->GetCollInfo(kFuncAllReduce, kBytes, DefaultCostTable()).n_channels,
      8);
  // The steering vanishes with its entry.
  ASSERT_TRUE(table->Replace({RingOnly(0xB, 8, 13)}, &error));
  ExpectDefaults((*a)->GetCollInfo(kFuncAllReduce, kBytes, DefaultCostTable()));
  EXPECT_EQ(
      (*b)->GetCollInfo(kFuncAllReduce, kBytes, DefaultCostTable()).n_channels,
      8);
  // The agent restarts with an empty table: everything back to NCCL's.
  table = NewTable();
  ExpectDefaults((*b)->GetCollInfo(kFuncAllReduce, kBytes, DefaultCostTable()));
  // ... and steers again from the new table.
  ASSERT_TRUE(table->Upsert(RingOnly(0xA, 3, 14), &error));
  EXPECT_EQ(
      (*a)->GetCollInfo(kFuncAllReduce, kBytes, DefaultCostTable()).n_channels,
      3);

  bool logged = false;
  for (const std::string& line : (*tuner)->log_lines()) {
    logged = logged || (line.find("comm 0xa steered by plan epoch 11") !=
                        std::string::npos);
  }
  EXPECT_TRUE(logged);
  EXPECT_EQ((*a)->Finalize(), 0);
  EXPECT_EQ((*b)->Finalize(), 0);
}

INSTANTIATE_TEST_SUITE_P(Releases, TunerSteeringTest,
                         ::testing::Values(22809, 22903, 23007),
                         [](const auto& info) {
                           return "nccl" + std::to_string(info.param);
                         });

// v4 (2.24-2.27) is not told the communicator id: only an entry the agent
// marked as the one communicator of its shape on the node is applied.
TEST(TunerPluginTest, V4MatchesOnlyAShapeTheAgentMarkedUnique) {
  auto table = NewTable();
  std::string error;
  Steering s = RingOnly(0xA, 4, 1);
  ASSERT_TRUE(table->Upsert(s, &error));
  auto tuner =
      TunerEmulator::Create({.plugin = "pitstop", .nccl_version = 22707});
  ASSERT_TRUE(tuner.ok()) << tuner.status();
  ASSERT_EQ((*tuner)->abi_version(), 4);
  auto same = (*tuner)->InitComm({.n_ranks = 16, .n_nodes = 2});
  auto other = (*tuner)->InitComm({.n_ranks = 8, .n_nodes = 1});
  ASSERT_TRUE(same.ok() && other.ok());
  ExpectDefaults(
      (*same)->GetCollInfo(kFuncAllReduce, kBytes, DefaultCostTable()));
  s.flags = tuner::kFlagShapeUnique;
  ASSERT_TRUE(table->Upsert(s, &error));
  EXPECT_EQ((*same)
                ->GetCollInfo(kFuncAllReduce, kBytes, DefaultCostTable())
                .n_channels,
            4);
  ExpectDefaults(
      (*other)->GetCollInfo(kFuncAllReduce, kBytes, DefaultCostTable()));
}

// No table (no agent yet, or its file is gone): NCCL's tuning, and the
// tuner picks the table up once the agent writes one (it retries the open
// at most once a second).
TEST(TunerPluginTest, NoTableMeansNcclDefaultsUntilOneAppears) {
  {
    auto gone = NewTable();  // retires whatever an earlier test left
  }
  std::filesystem::remove(TablePathEnv::path);
  auto tuner =
      TunerEmulator::Create({.plugin = "pitstop", .nccl_version = 23007});
  ASSERT_TRUE(tuner.ok()) << tuner.status();
  auto a = (*tuner)->InitComm({.comm_hash = 0xA, .n_ranks = 16, .n_nodes = 2});
  ASSERT_TRUE(a.ok());
  ExpectDefaults((*a)->GetCollInfo(kFuncAllReduce, kBytes, DefaultCostTable()));

  auto table = NewTable();
  std::string error;
  ASSERT_TRUE(table->Upsert(RingOnly(0xA, 4, 1), &error));
  int n_channels = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (n_channels == 0 && std::chrono::steady_clock::now() < deadline) {
    n_channels = (*a)->GetCollInfo(kFuncAllReduce, kBytes, DefaultCostTable())
                     .n_channels;
    if (n_channels == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  EXPECT_EQ(n_channels, 4);
}

}  // namespace
}  // namespace pitstop::emu
