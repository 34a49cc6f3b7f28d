// PITSTOP_STATS_FILE (plugin/stats.h): what the library counted, written as
// JSON by real processes without an agent — an emulated rank driving each
// profiler ABI version through NCCL's loading rules, and ranks of the CPU
// NCCL backend with the library loaded as NCCL_PROFILER_PLUGIN and again
// LD_PRELOADed (the two ways tools/gpu-check.sh runs a torch job).
#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "src/nccl/cpu/nccl_functions.h"
#include "tests/nccl/rank_group.h"
#include "tests/plugin/test_util.h"

namespace pitstop::testing {
namespace {

using nlohmann::json;

constexpr int kDeadlineS = 150;
constexpr int kOps = 12;

class StatsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pst-stats-XXXXXX";
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

  // The environment of a process that counts into dir_/stats-<pid>.json,
  // with no agent listening (as on the GPU machine).
  std::map<std::string, std::string> StatsEnv() const {
    return {{"PITSTOP_STATS_FILE", dir_ + "/stats-%p.json"},
            {"PITSTOP_AGENT_SOCKET", dir_ + "/no-agent.sock"},
            {"PITSTOP_FINALIZE_TIMEOUT_MS", "20000"}};
  }

  // Every stats file written so far, parsed (a parse error fails the test).
  std::vector<json> StatsFiles() const {
    std::vector<json> out;
    DIR* d = opendir(dir_.c_str());
    if (d == nullptr) return out;
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind("stats-", 0) != 0) continue;
      EXPECT_EQ(name.find(".tmp."), std::string::npos) << "left over " << name;
      std::ifstream in(dir_ + "/" + name);
      std::stringstream text;
      text << in.rdbuf();
      json j = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
      EXPECT_FALSE(j.is_discarded()) << name << ": " << text.str();
      EXPECT_EQ(name, absl::StrCat("stats-", j.value("pid", 0), ".json"));
      out.push_back(std::move(j));
    }
    closedir(d);
    return out;
  }

  int RunEmulatedRank(int version, const std::string& end) {
    auto env = StatsEnv();
    env["NCCL_PROFILER_PLUGIN"] = PITSTOP_PLUGIN_PATH;
    return emu::RunChild({PITSTOP_EMULATED_RANK, "--ops", absl::StrCat(kOps),
                          "--version", absl::StrCat(version), "--end", end},
                         env, dir_ + "/rank.err");
  }

  std::vector<RankResult> RunCpuRanks(std::map<std::string, std::string> env) {
    ncclUniqueId id;
    EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    const std::string hex = UniqueIdHex(&id, sizeof(id));
    std::vector<std::vector<std::string>> argv;
    for (int r = 0; r < 2; ++r) {
      argv.push_back(
          {PITSTOP_CPU_NCCL_RANK, "collectives", absl::StrCat(r), "2", hex});
    }
    env.emplace("PITSTOP_CPU_NCCL_TIMEOUT_MS", "60000");
    return RunRanks(2, argv, env, dir_, kDeadlineS);
  }

  std::string dir_;
};

// Each ABI version NCCL may pick: the version is reported, every event the
// emulator started is counted by type, every record drained (and dropped:
// no agent) is counted by kind and function.
TEST_F(StatsTest, EmulatedRankCountsEventsAndRecordsForEachAbiVersion) {
  for (int version : {3, 4, 5, 6}) {
    SCOPED_TRACE(absl::StrCat("v", version));
    ASSERT_TRUE(emu::ExitedWith(RunEmulatedRank(version, "finalize"), 0));
    const auto files = StatsFiles();
    ASSERT_EQ(files.size(), 1u);
    const json& s = files[0];
    EXPECT_EQ(s["format"], "pitstop-stats/1");
    EXPECT_EQ(s["load_mode"], "profiler");
    EXPECT_EQ(s["preloaded"], false);
    EXPECT_EQ(s["library"], PITSTOP_PLUGIN_PATH);
    const json& p = s["profiler"];
    EXPECT_EQ(p["init_calls"], 1);
    EXPECT_EQ(p["init_failed"], 0);
    EXPECT_EQ(p["finalize_calls"], 1);
    EXPECT_EQ(p["abi_version"], version);
    for (int v = 3; v <= 6; ++v) {
      EXPECT_EQ(p["init_calls_by_version"][absl::StrCat("v", v)],
                v == version ? 1 : 0);
    }
    EXPECT_EQ(p["event_mask"], 0x4e);
    const json& ev = s["events_started"];
    EXPECT_EQ(ev["coll"], kOps);
    EXPECT_EQ(ev["p2p"], 0);
    EXPECT_EQ(ev["other"], 0);
    // API events exist from v5 on.
    EXPECT_EQ(ev["coll_api"], version >= 5 ? kOps : 0);
    EXPECT_EQ(ev["group_api"], version >= 5 ? kOps : 0);
    EXPECT_GT(ev["kernel_ch"], 0);
    EXPECT_GT(ev["proxy_op"], 0);
    uint64_t sum = 0;
    for (const auto& [k, v] : ev.items()) sum += v.get<uint64_t>();
    EXPECT_EQ(s["events_started_total"], sum);
    // Every op, kernel channel and proxy op became a record; none is lost.
    const json& rec = s["records"];
    EXPECT_EQ(rec["op"], kOps);
    EXPECT_EQ(rec["completion"], kOps);
    EXPECT_EQ(rec["kernel_ch"], ev["kernel_ch"]);
    EXPECT_EQ(rec["proxy_op"], ev["proxy_op"]);
    EXPECT_EQ(s["ops_per_function"]["AllReduce"], kOps);
    EXPECT_EQ(s["ops_per_function"]["Send"], 0);
    uint64_t records = 0;
    for (const auto& [k, v] : rec.items()) records += v.get<uint64_t>();
    EXPECT_EQ(s["records_recorded"], records);
    EXPECT_EQ(s["drops"]["ring_full"], 0);
    EXPECT_EQ(s["drops"]["pool_exhausted"], 0);
    EXPECT_EQ(s["drops"]["export_dropped"], records);  // no agent
    EXPECT_EQ(s["records_sent"], 0);
    EXPECT_EQ(s["interposer"]["calls_total"], 0);
    (void)std::system(("rm -f '" + dir_ + "'/stats-*").c_str());
  }
}

// A process that exits without finalizing still leaves its counts (the exit
// handler writes them); one that crashes leaves none.
TEST_F(StatsTest, ExitWithoutFinalizeWritesAndCrashWritesNothing) {
  ASSERT_TRUE(emu::ExitedWith(RunEmulatedRank(5, "exit"), 0));
  auto files = StatsFiles();
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0]["profiler"]["init_calls"], 1);
  EXPECT_EQ(files[0]["profiler"]["finalize_calls"], 0);
  EXPECT_EQ(files[0]["records"]["op"], kOps);
  (void)std::system(("rm -f '" + dir_ + "'/stats-*").c_str());
  ASSERT_TRUE(emu::ExitedWith(RunEmulatedRank(5, "crash"), 0));
  EXPECT_TRUE(StatsFiles().empty());
}

// Real collectives over the CPU backend, the library as NCCL's profiler:
// no interposer calls, one op record per collective that ran.
TEST_F(StatsTest, CpuBackendAsProfilerPluginCountsOpsPerFunction) {
  auto env = StatsEnv();
  env["NCCL_PROFILER_PLUGIN"] = PITSTOP_PLUGIN_PATH;
  const auto results = RunCpuRanks(env);
  ASSERT_TRUE(AllExitedZero(results)) << Describe(results);
  const auto files = StatsFiles();
  ASSERT_EQ(files.size(), 2u);
  for (const json& s : files) {
    EXPECT_EQ(s["load_mode"], "profiler");
    EXPECT_EQ(s["profiler"]["init_calls"], 1);
    EXPECT_EQ(s["profiler"]["abi_version"], 6);  // the backend is "2.29+"
    EXPECT_EQ(s["nccl_version"], 22809);
    const json& ops = s["ops_per_function"];
    // cpu_nccl_rank "collectives": 7 all-reduces that run (the 8th has a
    // bad datatype), one of each other collective, one send and one recv.
    EXPECT_EQ(ops["AllReduce"], 7) << s.dump();
    EXPECT_EQ(ops["AllGather"], 1);
    EXPECT_EQ(ops["ReduceScatter"], 1);
    EXPECT_EQ(ops["Broadcast"], 2);  // ncclBroadcast and ncclBcast
    EXPECT_EQ(ops["Reduce"], 1);
    EXPECT_EQ(ops["Send"], 1);
    EXPECT_EQ(ops["Recv"], 1);
    EXPECT_EQ(s["events_started"]["coll"], 12);
    EXPECT_EQ(s["events_started"]["p2p"], 2);
    EXPECT_EQ(s["records"]["op"], 14);
    EXPECT_EQ(s["interposer"]["calls_total"], 0);
  }
}

// The same program with the library preloaded: the interposer counts each
// NCCL call the application made, and NCCL (told by the preload) loads the
// same file as its profiler.
TEST_F(StatsTest, PreloadedOverCpuBackendCountsInterposerCallsPerFunction) {
  auto env = StatsEnv();
  env["LD_PRELOAD"] = PITSTOP_PLUGIN_PATH;
  env["-NCCL_PROFILER_PLUGIN"] = "";
  const char* asan = std::getenv("ASAN_OPTIONS");
  env["ASAN_OPTIONS"] =
      std::string(asan != nullptr ? asan : "") + ":verify_asan_link_order=0";
  const auto results = RunCpuRanks(env);
  ASSERT_TRUE(AllExitedZero(results)) << Describe(results);
  const auto files = StatsFiles();
  ASSERT_EQ(files.size(), 2u);
  for (const json& s : files) {
    EXPECT_EQ(s["load_mode"], "both");
    EXPECT_EQ(s["preloaded"], true);
    EXPECT_EQ(s["profiler"]["init_calls"], 1);
    EXPECT_EQ(s["ops_per_function"]["AllReduce"], 7);
    const json& calls = s["interposer"]["calls"];
    EXPECT_EQ(calls["ncclCommInitRank"], 1) << s.dump();
    EXPECT_EQ(calls["ncclAllReduce"], 8);  // the bad datatype one too
    EXPECT_EQ(calls["ncclAllGather"], 1);
    EXPECT_EQ(calls["ncclReduceScatter"], 1);
    EXPECT_EQ(calls["ncclBroadcast"], 1);
    EXPECT_EQ(calls["ncclBcast"], 1);
    EXPECT_EQ(calls["ncclReduce"], 1);
    EXPECT_EQ(calls["ncclSend"], 1);
    EXPECT_EQ(calls["ncclRecv"], 1);
    EXPECT_EQ(calls["ncclGroupStart"], 2);
    EXPECT_EQ(calls["ncclGroupEnd"], 2);
    EXPECT_EQ(calls["ncclCommCount"], 1);
    EXPECT_EQ(calls["ncclCommUserRank"], 1);
    EXPECT_EQ(calls["ncclCommCuDevice"], 1);
    EXPECT_EQ(calls["ncclCommFinalize"], 1);
    EXPECT_EQ(calls["ncclCommDestroy"], 1);
    EXPECT_EQ(calls["ncclAlltoAll"], 0);
    uint64_t sum = 0;
    for (const auto& [k, v] : calls.items()) sum += v.get<uint64_t>();
    EXPECT_EQ(s["interposer"]["calls_total"], sum);
  }
}

// A preloaded process that never touches NCCL (a shell, `ldconfig` run by a
// torch import) writes nothing: it must not replace the training process's
// file. Without the variable nothing is written either.
TEST_F(StatsTest, ProcessThatSawNothingWritesNothing) {
  auto env = StatsEnv();
  env["LD_PRELOAD"] = PITSTOP_PLUGIN_PATH;
  const char* asan = std::getenv("ASAN_OPTIONS");
  env["ASAN_OPTIONS"] =
      std::string(asan != nullptr ? asan : "") + ":verify_asan_link_order=0";
  ASSERT_TRUE(emu::ExitedWith(emu::RunChild({"/bin/true"}, env), 0));
  EXPECT_TRUE(StatsFiles().empty());
  ASSERT_TRUE(emu::ExitedWith(
      emu::RunChild({PITSTOP_EMULATED_RANK, "--ops", "3"},
                    {{"NCCL_PROFILER_PLUGIN", PITSTOP_PLUGIN_PATH},
                     {"-PITSTOP_STATS_FILE", ""},
                     {"PITSTOP_AGENT_SOCKET", dir_ + "/no-agent.sock"}}),
      0));
  EXPECT_TRUE(StatsFiles().empty());
}

}  // namespace
}  // namespace pitstop::testing
