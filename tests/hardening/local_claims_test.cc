// Issue #33, the agent trusts the kernel, not the message: a real
// pitstop-agent (ingest.verify_pid on, its default) and a real
// pitstop-controller, with local processes on the agent's socket
// (docs/reliability.md, "Trust model"):
//   - processes claiming job `victim` from another job's environment, or a
//     rank a victim process holds, then dropping their streams: no death is
//     accepted in `victim`, its ranks keep joining, its real death is
//     found, and the refusals are counted;
//   - a process with no credential flooding the agent with communicators
//     of 2^20 ranks: another host's job keeps joining every collective and
//     the controller stays small.
#include <signal.h>

#include <algorithm>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/agent/fake_rank.h"
#include "tests/controller/test_agent.h"
#include "tests/hardening/daemons.h"

namespace pitstop::hardening {
namespace {

using agent::testing::BinaryPath;
using agent::testing::Eventually;
using agent::testing::FakeRank;
using agent::testing::Process;
using agent::testing::ReadFile;
using agent::testing::TempDir;

constexpr uint64_t kVictimComm = 0x71C7;
// The controller's memory under the local flood (docs/reliability.md).
constexpr size_t kControllerRssBound = size_t{192} << 20;

// A pitstop_tenant_rank process started with PITSTOP_JOB_ID=`env_job`
// (its scheduler's word) that claims `job`, rank `rank` of `comm` and
// global rank `global`.
std::unique_ptr<Process> Rank(const TempDir& dir, const std::string& name,
                              const std::string& sock,
                              const std::string& env_job,
                              const std::string& job, uint64_t comm, int rank,
                              int global, const std::string& mode) {
  return std::make_unique<Process>(
      std::vector<std::string>{
          BinaryPath("tests/hardening/pitstop_tenant_rank"), sock, job,
          absl::StrCat(comm), absl::StrCat(rank), "2", absl::StrCat(global),
          mode},
      std::vector<std::string>{"PITSTOP_JOB_ID=" + env_job},
      dir.file(name + ".out"), dir.file(name + ".err"));
}

double Claims(const AgentDaemon& a, const std::string& what) {
  return MetricValue(a.metrics_port(), "pitstop_agent_claims_refused_total",
                     absl::StrCat("what=\"", what, "\""));
}

// A controller and an agent on "node-a" with its socket at `sock_`.
class LocalClaimsTest : public ::testing::Test {
 protected:
  TempDir dir_;
  const std::string sock_ = dir_.file("a.sock");
  ControllerDaemon c_{dir_};
  AgentDaemon agent_{dir_, sock_, c_.target(), "node-a"};
  void SetUp() override {
    ASSERT_TRUE(c_.ok());
    ASSERT_TRUE(agent_.ok()) << agent_.log();
  }
};

TEST_F(LocalClaimsTest, ALocalProcessCannotForgeADeathInAnotherJob) {
  auto victim0 =
      Rank(dir_, "v0", sock_, "victim", "victim", kVictimComm, 0, 0, "hold");
  auto victim1 =
      Rank(dir_, "v1", sock_, "victim", "victim", kVictimComm, 1, 1, "hold");
  ASSERT_TRUE(Eventually([&] { return c_.Joined(kVictimComm) > 20; }))
      << c_.log() << agent_.log();

  // From another job's environment, claiming the victim's job, rank and
  // global rank 0; then from the victim's environment (same uid, a copied
  // environment), claiming rank 1 a victim process holds. Both then drop
  // their streams as a crash would.
  auto other_job =
      Rank(dir_, "m0", sock_, "mallory", "victim", kVictimComm, 0, 0, "drop");
  auto held_rank =
      Rank(dir_, "m1", sock_, "victim", "victim", kVictimComm, 1, 1, "drop");
  // They exit either way (a refused stream fails their next send).
  EXPECT_GE(other_job->Wait(), 0) << ReadFile(dir_.file("m0.err"));
  EXPECT_GE(held_rank->Wait(), 0) << ReadFile(dir_.file("m1.err"));
  const uint64_t joined = c_.Joined(kVictimComm);
  // Agent batches every 200 ms, controller cycles every 500 ms: a forged
  // death took under 2 s before the fix.
  absl::SleepFor(absl::Seconds(3));
  EXPECT_TRUE(c_.Faults("victim", v1::FAULT_CLASS_PROCESS_DIED).empty())
      << c_.Faults("victim", v1::FAULT_CLASS_PROCESS_DIED)[0].DebugString();
  EXPECT_GT(c_.Joined(kVictimComm), joined + 20);
  EXPECT_TRUE(Eventually([&] {
    return Claims(agent_, "job") >= 1 && Claims(agent_, "rank") >= 1;
  })) << agent::testing::HttpGet(agent_.metrics_port(), "/metrics");
  std::cout << "refused claims: job " << Claims(agent_, "job") << ", rank "
            << Claims(agent_, "rank") << "\n";

  // The victim's real death is found as without the attack.
  const int dead_pid = victim1->pid();
  victim1->Signal(SIGKILL);
  victim1->Wait();
  std::vector<v1::Fault> died;
  ASSERT_TRUE(Eventually([&] {
    died = c_.Faults("victim", v1::FAULT_CLASS_PROCESS_DIED);
    return !died.empty();
  })) << c_.log();
  ASSERT_GE(died[0].suspects_size(), 1);
  EXPECT_EQ(died[0].suspects(0).pid(), static_cast<uint32_t>(dead_pid));
  EXPECT_EQ(died[0].suspects(0).host(), "node-a");
}

// Issue #33 F1: a process started with `env -i` (its environment names no
// job, so the environment check was skipped) said the first hello for
// `victim`, fixed the job's identity and forged a death of global rank 7 of
// the 2-rank job by dropping its stream. Nothing the kernel knows of it
// names the job now: it reports as an anonymous tenant (counted), fixes
// nothing and its end is no death in `victim`.
TEST_F(LocalClaimsTest, AProcessWithoutEvidenceCannotClaimAJob) {
  auto squatter = std::make_unique<Process>(
      std::vector<std::string>{
          "/usr/bin/env", "-i",
          BinaryPath("tests/hardening/pitstop_tenant_rank"), sock_, "victim",
          absl::StrCat(kVictimComm + 1), "0", "2", "7", "drop"},
      std::vector<std::string>{}, dir_.file("sq.out"), dir_.file("sq.err"));
  EXPECT_EQ(squatter->Wait(), 0) << ReadFile(dir_.file("sq.err"));
  auto victim0 =
      Rank(dir_, "v0", sock_, "victim", "victim", kVictimComm, 0, 0, "hold");
  auto victim1 =
      Rank(dir_, "v1", sock_, "victim", "victim", kVictimComm, 1, 1, "hold");
  ASSERT_TRUE(Eventually([&] { return c_.Joined(kVictimComm) > 20; }))
      << c_.log() << agent_.log();
  // A forged death took under 2 s before the fix (see above).
  absl::SleepFor(absl::Seconds(3));
  const std::vector<v1::Fault> died =
      c_.Faults("victim", v1::FAULT_CLASS_PROCESS_DIED);
  EXPECT_TRUE(died.empty()) << died[0].DebugString();
  EXPECT_EQ(Claims(agent_, "unproven"), 1)
      << agent::testing::HttpGet(agent_.metrics_port(), "/metrics");
  EXPECT_TRUE(victim0->running());
  EXPECT_TRUE(victim1->running());
}

TEST_F(LocalClaimsTest, AnUncredentialedFloodStaysOnItsHost) {
  controller::testing::TestAgent good(c_.target(), Registration("good-node"));
  ASSERT_TRUE(good.Send(BothMembers(0x600D, "good")));

  // Any local process may write to the socket: communicators listing 2^20
  // ranks, one per message (3 MB each, under the agent's 4 MiB).
  {
    FakeRank flood(sock_);
    v1::StreamTelemetryRequest hello =
        agent::testing::MakeHello(getpid(), -1, 0xF100, 0, 1 << 20);
    hello.mutable_hello()->set_job_id("flood");
    ASSERT_TRUE(flood.Send(hello));
    for (int i = 1; i < 4; ++i) {
      v1::StreamTelemetryRequest req;
      req.set_batch_seq(i + 1);
      v1::CommunicatorInfo* info = req.add_communicators()->mutable_info();
      info->set_comm_hash(0xF100 + i);
      info->set_n_ranks(1 << 20);
      for (int32_t g = 0; g < (1 << 20); ++g) info->add_global_ranks(g);
      ASSERT_TRUE(flood.Send(req));
    }
    size_t peak = 0;
    // Joined in order: the last communicator known means all were seen.
    EXPECT_TRUE(Eventually([&] {
      peak = std::max(peak, RssOf(c_.process().pid()));
      return c_.Communicator(0xF103).comm_hash() != 0;
    })) << c_.log();
    (void)flood.Close();
    std::cout << "controller peak RSS under the local flood: " << (peak >> 20)
              << " MiB\n";
    EXPECT_LT(peak, kControllerRssBound);
  }

  // Another host's job: a communicator made after the flood, every
  // collective joined.
  v1::ConnectRequest after = BothMembers(0x600E, "good");
  AddCollectives(&after, 0x600E, 0, 50);
  ASSERT_TRUE(good.Send(after));
  EXPECT_TRUE(Eventually([&] { return c_.Joined(0x600E) >= 50; }))
      << "joined " << c_.Joined(0x600E) << " of 50\n"
      << c_.log();
  EXPECT_EQ(c_.Joined(0x600E), 50u);
  EXPECT_LT(RssOf(c_.process().pid()), kControllerRssBound);
  // Each list cut at the agent (the process holds none of the ranks it
  // listed but its own) and counted (round 21, R21-4; the controller
  // refused them with members_per_host before).
  EXPECT_TRUE(Eventually([&] { return Claims(agent_, "listed") >= 3; }))
      << agent::testing::HttpGet(agent_.metrics_port(), "/metrics");
  (void)good.Close();
}

// Round 21, R21-4: four processes of one user on node-a (the attacker
// hour used five), each started with PITSTOP_JOB_ID=jN (a job of its own
// making) and reporting a communicator of 65,536 ranks that lists the
// global ranks of all of them. Upstream each listed entry was a member
// charged to node-a, each job within its host's share of one job (2^16),
// together the host's whole share (2^18): job `good`, with a rank on
// node-a and one on node-b, had its new communicator's member on node-a
// refused and joined 0 collectives (on both hosts). The agent cuts the
// entries of ranks a process does not hold: the lists never reach the
// controller.
TEST_F(LocalClaimsTest, MadeUpJobsCannotFillTheirHostsMemberShare) {
  const std::string sock_b = dir_.file("b.sock");
  AgentDaemon agent_b{dir_, sock_b, c_.target(), "node-b"};
  ASSERT_TRUE(agent_b.ok()) << agent_b.log();
  const auto process = [&](const std::string& sock, const std::string& job,
                           uint64_t comm, int rank, int n_ranks, int global,
                           int listed) {
    const std::string name = absl::StrCat(job, "-", rank);
    return std::make_unique<Process>(
        std::vector<std::string>{
            BinaryPath("tests/hardening/pitstop_tenant_rank"), sock, job,
            absl::StrCat(comm), absl::StrCat(rank), absl::StrCat(n_ranks),
            absl::StrCat(global), "hold", absl::StrCat(listed)},
        std::vector<std::string>{"PITSTOP_JOB_ID=" + job},
        dir_.file(name + ".out"), dir_.file(name + ".err"));
  };
  std::vector<std::unique_ptr<Process>> listers;
  for (int i = 1; i <= 4; ++i) {
    listers.push_back(process(sock_, absl::StrCat("j", i), 0xA000 + i, 0,
                              1 << 16, 0, 1 << 16));
  }
  ASSERT_TRUE(Eventually([&] {
    for (uint64_t comm = 0xA001; comm <= 0xA004; ++comm) {
      if (c_.Communicator(comm).comm_hash() == 0) return false;
    }
    return true;
  })) << c_.log();

  // The real job's new communicator, a rank on each host.
  auto good0 = process(sock_, "good", 0x6003, 0, 2, 4, 0);
  auto good1 = process(sock_b, "good", 0x6003, 1, 2, 5, 0);
  EXPECT_TRUE(Eventually([&] { return c_.Joined(0x6003) >= 20; }))
      << "joined " << c_.Joined(0x6003) << "\n"
      << c_.log();
  EXPECT_LE(MetricValue(c_.metrics_port(), "pitstop_controller_refused_total",
                        "what=\"members_per_host\""),
            0);
  // Each list cut at the agent and counted.
  EXPECT_GE(Claims(agent_, "listed"), 4)
      << agent::testing::HttpGet(agent_.metrics_port(), "/metrics");
}

}  // namespace
}  // namespace pitstop::hardening
