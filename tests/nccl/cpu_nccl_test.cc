// The CPU NCCL backend across real processes: every collective on real data
// with known answers, split and shrink, non-blocking init, a dead peer (an
// error within the timeout, then shrink and abort: no hang), and the
// profiler plugin loaded by NCCL's rules streaming real records to an
// in-test receiver.
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "pitstop/nic_plan.h"
#include "src/nccl/cpu/nccl_functions.h"
#include "src/nccl/emulator/nccl_emulator.h"
#include "tests/harness/telemetry_receiver.h"
#include "tests/nccl/rank_group.h"

namespace pitstop::testing {
namespace {

// Generous: a loaded 2-core machine with sanitizers; a dead peer is
// detected by its closed connection long before this.
constexpr char kTimeoutMs[] = "60000";
constexpr int kDeadlineS = 150;

class CpuNcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pst-cpunccl-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // ncclGetUniqueId makes its store directory here; no threads start in
    // this process (the ranks are children).
    setenv("PITSTOP_CPU_NCCL_STORE_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    if (!dir_.empty()) {
      const std::string cmd = "rm -rf '" + dir_ + "'";
      (void)std::system(cmd.c_str());
    }
  }

  std::vector<RankResult> Run(const std::string& scenario, int n,
                              std::map<std::string, std::string> env = {},
                              int deadline_s = kDeadlineS) {
    ncclUniqueId id;
    EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess) << ncclGetLastError(nullptr);
    return RunWithId(id, scenario, n, std::move(env), deadline_s);
  }
  std::vector<RankResult> RunWithId(const ncclUniqueId& id,
                                    const std::string& scenario, int n,
                                    std::map<std::string, std::string> env,
                                    int deadline_s = kDeadlineS) {
    const std::string hex = UniqueIdHex(&id, sizeof(id));
    std::vector<std::vector<std::string>> argv;
    for (int r = 0; r < n; ++r) {
      argv.push_back(
          {CPU_NCCL_RANK, scenario, absl::StrCat(r), absl::StrCat(n), hex});
    }
    env.emplace("PITSTOP_CPU_NCCL_TIMEOUT_MS", kTimeoutMs);
    if (env.count("-NCCL_PROFILER_PLUGIN") == 0) {
      env.emplace("NCCL_PROFILER_PLUGIN", "none");
    }
    return RunRanks(n, argv, env, dir_, deadline_s);
  }
  void CheckPreloadedInterposer(bool virtualise);

  std::string dir_;
};

TEST_F(CpuNcclTest, EveryCollectiveGivesTheKnownAnswerOnThreeRanks) {
  const auto results = Run("collectives", 3);
  EXPECT_TRUE(AllExitedZero(results)) << Describe(results);
}

TEST_F(CpuNcclTest, TwoRanksToo) {
  const auto results = Run("collectives", 2);
  EXPECT_TRUE(AllExitedZero(results)) << Describe(results);
}

TEST_F(CpuNcclTest, SplitWithNoColorAndShrink) {
  const auto results = Run("split", 4);
  EXPECT_TRUE(AllExitedZero(results)) << Describe(results);
}

TEST_F(CpuNcclTest, NonBlockingInitReportsInProgressThenSuccess) {
  const auto results = Run("nonblocking", 2);
  EXPECT_TRUE(AllExitedZero(results)) << Describe(results);
}

TEST_F(CpuNcclTest, DeadPeerGivesAnErrorThenShrinkAndAbortRecover) {
  const auto results = Run("peer-death", 3);
  EXPECT_TRUE(AllExitedZero(results)) << Describe(results);
}

// A rank that hits an error closes its connections, so a peer blocked on
// it (not on the dead rank) fails at once instead of a whole op timeout
// later; otherwise survivors reach the shrink a timeout apart and its
// rendezvous can time out. With the op timeout far past the deadline, a
// failure that did not spread is killed at the deadline.
TEST_F(CpuNcclTest, ErrorOnOneRankReachesPeersBlockedOnIt) {
  const auto results =
      Run("error-spreads", 3, {{"PITSTOP_CPU_NCCL_TIMEOUT_MS", "3600000"}},
          /*deadline_s=*/60);
  EXPECT_TRUE(AllExitedZero(results)) << Describe(results);
}

// Ranks that learn of a dead peer from a live neighbour closing its
// connections name the dead rank too (the communicator's first failure,
// src/nccl/cpu/first_failure.h), not the neighbour: 4 ranks, so rank 1 is
// adjacent to the dead rank 3 on neither side of the ring.
TEST_F(CpuNcclTest, EveryRankNamesTheRankWhoseFailureCameFirst) {
  const auto results = Run("origin-named", 4);
  EXPECT_TRUE(AllExitedZero(results)) << Describe(results);
}

// Abort of a communicator whose non-blocking init waits for a peer that
// never comes returns at once: with the init's timeout far past the
// deadline, an abort that waited would be killed at the deadline.
TEST_F(CpuNcclTest, AbortDuringPendingNonBlockingInitDoesNotWait) {
  const auto results =
      Run("abort-pending", 2, {{"PITSTOP_CPU_NCCL_TIMEOUT_MS", "3600000"}});
  EXPECT_TRUE(AllExitedZero(results)) << Describe(results);
}

TEST_F(CpuNcclTest, BadUniqueIdIsAnError) {
  ncclUniqueId id{};
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRank(&comm, 2, id, 0), ncclInvalidArgument);
  EXPECT_EQ(comm, nullptr);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("magic"),
            std::string::npos);
}

TEST_F(CpuNcclTest, ProfilerPluginRecordsReachTheReceiver) {
  const std::string sock = absl::StrCat(dir_, "/agent.sock");
  auto receiver = emu::TelemetryReceiver::Start(sock);
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  // NCCL's naming rule: "pitstop" is tried verbatim, then as
  // libnccl-profiler-pitstop.so (found in the plugin's build directory).
  const auto results = Run("profiled", 2,
                           {{"NCCL_PROFILER_PLUGIN", "pitstop"},
                            {"PITSTOP_AGENT_SOCKET", sock},
                            {"PITSTOP_FINALIZE_TIMEOUT_MS", "20000"},
                            {"PITSTOP_HOST", "cpu-node-0"}});
  ASSERT_TRUE(AllExitedZero(results)) << Describe(results);
  emu::TelemetryReceiver* r = receiver->get();
  // Both ranks finalized; wait for their goodbyes (everything before them
  // was streamed).
  ASSERT_TRUE(r->WaitFor(
      [](const std::vector<emu::ReceivedStream>& s) {
        int goodbyes = 0;
        for (const auto& x : s) {
          goodbyes += emu::HasGoodbye({x}, v1::ProcessGoodbye::REASON_FINALIZE);
        }
        return goodbyes == 2;
      },
      absl::Seconds(60)));
  const auto streams = r->Streams();
  const auto ops = emu::AllOps(streams);
  std::set<std::pair<int, uint64_t>> seen;  // (rank, seq)
  std::set<uint64_t> hashes;
  for (const v1::OpRecord& op : ops) {
    EXPECT_EQ(op.func(), v1::COLL_FUNC_ALL_REDUCE);
    seen.insert({op.rank(), op.seq_number()});
    hashes.insert(op.comm_hash());
  }
  EXPECT_EQ(ops.size(), 10u);
  EXPECT_EQ(seen.size(), 10u);   // seq 0..4 on ranks 0 and 1
  EXPECT_EQ(hashes.size(), 1u);  // one communicator, same hash on both
  EXPECT_EQ(emu::AllCompletions(streams).size(), 10u);
  const auto kernels = emu::AllKernels(streams);
  ASSERT_EQ(kernels.size(), 10u);
  for (const auto& k : kernels) {
    EXPECT_GT(k.start_gpu_ns(), 0u);
    EXPECT_GE(k.stop_gpu_ns(), k.start_gpu_ns());  // real timings
  }
  // One proxy op per operation (channel 0, to the next rank). ProxyStep
  // events are off in the plugin's default activation mask.
  const auto proxies = emu::AllProxyOps(streams);
  ASSERT_EQ(proxies.size(), 10u);
  for (const auto& p : proxies) {
    EXPECT_EQ(p.channel_id(), 0u);
    EXPECT_TRUE(p.is_send());
    EXPECT_GE(p.stop_cpu_ns(), p.start_cpu_ns());
  }
}

std::string Goodbyes(const std::vector<emu::ReceivedStream>& streams) {
  std::string out = absl::StrCat(streams.size(), " streams:");
  for (const auto& s : streams) {
    absl::StrAppend(&out, " [", s.batches.size(), " batches, ended ", s.ended);
    for (const auto& b : s.batches) {
      if (b.has_goodbye()) {
        absl::StrAppend(&out, ", goodbye ", b.goodbye().reason());
      }
    }
    absl::StrAppend(&out, "]");
  }
  return out;
}

// The pitstop library LD_PRELOADed over the backend, as over NCCL: its
// interposer wins over the weak nccl* names, sees every communicator made
// (split children and the shrunk one name their parent), NCCL loads it as
// the profiler (the preload points NCCL_PROFILER_PLUGIN at itself), and the
// hello carries the version the backend reports (the rebuild probe's input).
// With `virtualise` (PITSTOP_VIRTUALIZE_COMMS=1) the application holds
// pitstop handles and all of that must still hold.
void CpuNcclTest::CheckPreloadedInterposer(bool virtualise) {
  const std::string sock = absl::StrCat(dir_, "/agent.sock");
  auto receiver = emu::TelemetryReceiver::Start(sock);
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  const char* asan = std::getenv("ASAN_OPTIONS");
  std::map<std::string, std::string> env = {
      {"LD_PRELOAD", emu::BuiltPluginPath()},
      {"ASAN_OPTIONS",
       std::string(asan != nullptr ? asan : "") + ":verify_asan_link_order=0"},
      {"-NCCL_PROFILER_PLUGIN", ""},
      {"PITSTOP_AGENT_SOCKET", sock},
      {"PITSTOP_FINALIZE_TIMEOUT_MS", "20000"}};
  env["PITSTOP_VIRTUALIZE_COMMS"] = virtualise ? "1" : "0";
  const auto results = Run("split", 4, env);
  ASSERT_TRUE(AllExitedZero(results)) << Describe(results);
  for (const auto& res : results) {
    EXPECT_EQ(res.stderr_text.find("communicator virtualisation on") !=
                  std::string::npos,
              virtualise)
        << res.stderr_text;
  }
  emu::TelemetryReceiver* r = receiver->get();
  ASSERT_TRUE(r->WaitFor(
      [](const std::vector<emu::ReceivedStream>& s) {
        int goodbyes = 0;
        for (const auto& x : s) {
          goodbyes += emu::HasGoodbye({x}, v1::ProcessGoodbye::REASON_FINALIZE);
        }
        return goodbyes == 4;
      },
      absl::Seconds(60)))
      << Goodbyes(r->Streams());
  const auto streams = r->Streams();
  ASSERT_EQ(streams.size(), 4u);
  for (const auto& s : streams) {
    ASSERT_FALSE(s.batches.empty());
    EXPECT_EQ(s.batches[0].hello().load_mode(), "both");
    EXPECT_EQ(s.batches[0].hello().nccl_version(), 22809u);
  }
  std::set<uint64_t> worlds, children;
  std::map<uint64_t, uint64_t> parent_of;
  for (const auto& ev : emu::AllCommEvents(streams)) {
    if (ev.kind() != v1::CommunicatorEvent::KIND_INIT) continue;
    const auto& info = ev.info();
    EXPECT_EQ(info.source(), v1::CommunicatorInfo::SOURCE_INTERPOSER)
        << ev.DebugString();
    if (info.parent_comm_hash() == 0) {
      EXPECT_EQ(info.n_ranks(), 4);
      worlds.insert(info.comm_hash());
    } else {
      children.insert(info.comm_hash());
      parent_of[info.comm_hash()] = info.parent_comm_hash();
    }
  }
  ASSERT_EQ(worlds.size(), 1u);  // one world, same hash on all four
  // Split: color 0 {0, 2} and color 1 {3} (rank 1 opted out); shrink {0,1,2}.
  EXPECT_EQ(children.size(), 3u);
  for (const auto& [child, parent] : parent_of) {
    EXPECT_EQ(parent, *worlds.begin()) << child;
  }
}

TEST_F(CpuNcclTest, PreloadedInterposerSeesEveryCommunicatorAndTheVersion) {
  CheckPreloadedInterposer(/*virtualise=*/false);
}

TEST_F(CpuNcclTest, PreloadedInterposerWithVirtualisedCommunicatorsToo) {
  CheckPreloadedInterposer(/*virtualise=*/true);
}

// A node's topology as NCCL dumps it: four NICs (nic_plan_test has the
// filter's details).
constexpr char kNodeTopo[] = R"(<system version="1">
  <cpu numaid="0" affinity="ff" arch="x86_64" vendor="GenuineIntel">
    <pci busid="0000:0d:00.0" class="0x020700" link_speed="32.0 GT/s PCIe" link_width="16">
      <nic>
        <net name="mlx5_0" dev="0" speed="400000" port="1" gdr="1"/>
        <net name="mlx5_1" dev="1" speed="400000" port="1" gdr="1"/>
        <net name="mlx5_2" dev="2" speed="400000" port="1" gdr="1"/>
        <net name="mlx5_3" dev="3" speed="400000" port="1" gdr="1"/>
      </nic>
    </pci>
  </cpu>
</system>
)";

// Each "NCCL_TOPO_FILE set by environment" line a rank's init logged, and
// the nets line after it.
std::vector<std::string> TopologyLines(const std::string& stderr_text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = stderr_text.find("topology nets", pos)) != std::string::npos) {
    const size_t eol = stderr_text.find('\n', pos);
    out.push_back(stderr_text.substr(pos, eol - pos));
    pos = eol;
  }
  return out;
}

// The flow plan's NIC set reaches NCCL's init (docs/planning.md, "How a
// plan reaches NCCL", 1): the interposer, preloaded over the backend,
// finds the agent's NIC plan line for the communicator being created (by
// the comm hash NCCL computes from the unique id, or by its rank count),
// points NCCL_TOPO_FILE at the node's topology with the other NICs demoted
// for that init only; the backend reads the variable as NCCL's
// ncclTopoGetSystem does and logs the nets it saw. The split children (no
// plan line) see no topology file: the variable was put back.
TEST_F(CpuNcclTest, PlannedNicSetReachesTheCommunicatorInit) {
  const std::string base = absl::StrCat(dir_, "/node-topo.xml");
  {
    FILE* f = std::fopen(base.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(kNodeTopo, f);
    std::fclose(f);
  }
  const std::string plan = absl::StrCat(dir_, "/tuner-table.nics");
  const char* asan = std::getenv("ASAN_OPTIONS");
  const std::map<std::string, std::string> env = {
      {"LD_PRELOAD", emu::BuiltPluginPath()},
      {"ASAN_OPTIONS",
       std::string(asan != nullptr ? asan : "") + ":verify_asan_link_order=0"},
      {"PITSTOP_AGENT_SOCKET", absl::StrCat(dir_, "/no-agent.sock")},
      {"PITSTOP_NIC_PLAN", plan},
      {"PITSTOP_NCCL_TOPO_BASE", base},
      {"PITSTOP_JOB_ID", "job9"},
      {"NCCL_DEBUG", "INFO"},
      {"-NCCL_TOPO_FILE", ""},
      {"TMPDIR", dir_}};
  // 1. By rank count: the job's only 4-rank communicator uses NICs 1 and 3.
  std::vector<nicplan::NicPlanEntry> lines(2);
  lines[0] = {.comm_id = 0x1234,
              .job = "job9",
              .epoch = 2,
              .n_ranks = 4,
              .n_nodes = 2,
              .unique_shape = true,
              .nics = {1, 3}};
  lines[1] = {.comm_id = 0x5678,
              .job = "otherjob",
              .epoch = 1,
              .n_ranks = 4,
              .n_nodes = 1,
              .unique_shape = true,
              .nics = {0}};
  std::string error;
  ASSERT_TRUE(nicplan::WriteNicPlan(plan, lines, &error)) << error;
  auto results = Run("split", 4, env);
  ASSERT_TRUE(AllExitedZero(results)) << Describe(results);
  for (size_t r = 0; r < results.size(); ++r) {
    const std::vector<std::string> seen = TopologyLines(results[r].stderr_text);
    ASSERT_EQ(seen.size(), 1u) << "rank " << r << ":\n"
                               << results[r].stderr_text;
    EXPECT_NE(seen[0].find("mlx5_0:1 mlx5_1:400000 mlx5_2:1 mlx5_3:400000"),
              std::string::npos)
        << seen[0];
    EXPECT_NE(results[r].stderr_text.find("PITSTOP/NicPlan: comm ranks 4: "
                                          "plan epoch 2 of job job9: NICs "
                                          "mlx5_1,mlx5_3"),
              std::string::npos)
        << results[r].stderr_text;
  }
  // 2. By comm hash (a communicator rebuilt from the same unique id): the
  // line names the hash NCCL computes from the id, and wins over a shape
  // line.
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  lines[0] = {
      .comm_id = nicplan::CommHashOfUniqueId(id.internal, sizeof(id.internal)),
      .job = "job9",
      .epoch = 3,
      .n_ranks = 4,
      .nics = {2}};
  lines[1] = {.comm_id = 0x1234,
              .job = "job9",
              .epoch = 3,
              .n_ranks = 4,
              .unique_shape = true,
              .nics = {0}};
  ASSERT_TRUE(nicplan::WriteNicPlan(plan, lines, &error)) << error;
  results = RunWithId(id, "split", 4, env);
  ASSERT_TRUE(AllExitedZero(results)) << Describe(results);
  for (size_t r = 0; r < results.size(); ++r) {
    const std::vector<std::string> seen = TopologyLines(results[r].stderr_text);
    ASSERT_EQ(seen.size(), 1u) << results[r].stderr_text;
    EXPECT_NE(seen[0].find("mlx5_0:1 mlx5_1:1 mlx5_2:400000 mlx5_3:1"),
              std::string::npos)
        << seen[0];
  }
  // 3. No line for the job: NCCL picks (no topology file at all).
  lines.resize(1);
  lines[0].job = "otherjob";
  ASSERT_TRUE(nicplan::WriteNicPlan(plan, lines, &error)) << error;
  results = Run("split", 4, env);
  ASSERT_TRUE(AllExitedZero(results)) << Describe(results);
  for (const RankResult& r : results) {
    EXPECT_TRUE(TopologyLines(r.stderr_text).empty()) << r.stderr_text;
  }
}

}  // namespace
}  // namespace pitstop::testing
