// LocalTenants: a local process reports for the job the kernel says it
// belongs to and for the ranks it holds (docs/reliability.md, "Trust
// model"). /proc is a temporary directory here; the daemon-level attacks
// are in tests/hardening/local_claims_test.cc.
#include "src/agent/local_tenants.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pitstop/clock.h"
#include "src/agent/agent_core.h"
#include "tests/agent/test_util.h"

namespace pitstop::agent {
namespace {

using ::testing::HasSubstr;

ProcessIdentity Who(pid_t pid, uid_t uid, const std::string& env_job = "",
                    const std::string& cgroup_job = "") {
  ProcessIdentity w;
  w.known = true;
  w.pid = pid;
  w.uid = uid;
  if (!env_job.empty()) w.env_jobs.push_back(env_job);
  w.cgroup_job = cgroup_job;
  return w;
}

v1::StreamTelemetryRequest Claims(uint64_t comm, int32_t rank) {
  v1::StreamTelemetryRequest req;
  v1::CommunicatorEvent* ev = req.add_communicators();
  ev->mutable_info()->set_comm_hash(comm);
  ev->mutable_info()->set_rank(rank);
  v1::OpRecord* op = req.add_ops();
  op->set_comm_hash(comm);
  op->set_rank(rank);
  return req;
}

// Attacker round 18, R18-3: a cgroup named job_N under a user's delegated
// subtree is no Slurm evidence; only slurmd's own places are.
TEST(IdentifyProcessTest, OnlySlurmdsOwnCgroupsNameASlurmJob) {
  const std::pair<const char*, const char*> cases[] = {
      {"0::/system.slice/slurmstepd.scope/job_4711/step_0/user/task_0\n",
       "job_4711"},
      {"12:freezer:/slurm/uid_1000/job_77/step_0/task_0\n"
       "11:memory:/slurm/uid_1000/job_77/step_0\n",
       "job_77"},
      {"4:cpuset:/slurm_node7/uid_1000/job_78/step_batch\n", "job_78"},
      // Forged below a delegated subtree, or at the wrong depth.
      {"0::/user.slice/user-65534.slice/user@65534.service/app.slice/"
       "job_4711\n",
       ""},
      {"0::/user.slice/user-65534.slice/user@65534.service/system.slice/"
       "slurmstepd.scope/job_4711\n",
       ""},
      {"0::/job_4711\n", ""},
      {"0::/slurm/job_4711/step_0\n", ""},
      {"0::/system.slice/slurmstepd.scope/step_0/job_4711\n", ""},
  };
  testing::TempDir proc;
  int pid = 100;
  for (const auto& [cgroup, job] : cases) {
    std::filesystem::create_directories(proc.file(std::to_string(pid)));
    std::ofstream(proc.file(std::to_string(pid) + "/cgroup")) << cgroup;
    EXPECT_EQ(IdentifyProcess({pid, 1000, 1000}, proc.path()).cgroup_job, job)
        << cgroup;
    ++pid;
  }
}

TEST(IdentifyProcessTest, ReadsTheSlurmCgroupAndTheLibrarysJobVariable) {
  testing::TempDir proc;
  std::filesystem::create_directories(proc.file("42"));
  std::ofstream(proc.file("42/cgroup"))
      << "0::/system.slice/slurmstepd.scope/job_4711/step_0/user/task_0\n";
  constexpr char kEnv[] = "HOME=/x\0SLURM_JOB_ID=4711\0PITSTOP_JOB_ID=train";
  std::ofstream(proc.file("42/environ"), std::ios::binary)
      << std::string(kEnv, sizeof(kEnv));
  const ProcessIdentity w = IdentifyProcess({42, 1000, 1000}, proc.path());
  EXPECT_TRUE(w.known);
  EXPECT_EQ(w.uid, 1000u);
  EXPECT_EQ(w.cgroup_job, "job_4711");
  EXPECT_THAT(w.env_jobs, ::testing::ElementsAre("4711", "train"));
  // Unreadable: unknown, not an error.
  const ProcessIdentity gone = IdentifyProcess({43, 1000, 1000}, proc.path());
  EXPECT_TRUE(gone.known);
  EXPECT_TRUE(gone.env_jobs.empty());
  EXPECT_EQ(gone.cgroup_job, "");
}

TEST(LocalTenantsTest, AJobBelongsToTheIdentityOfItsFirstProcess) {
  LocalTenants t;
  ASSERT_TRUE(t.Hello(1, Who(100, 1000, "victim"), 100, "victim", 0).ok());
  // Its environment names another job.
  absl::Status s =
      t.Hello(2, Who(200, 1000, "mallory"), 200, "victim", 5).status();
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("environment names ('mallory')"));
  // Another user, or another Slurm job.
  s = t.Hello(3, Who(300, 1001), 300, "victim", 5).status();
  EXPECT_THAT(s.message(), HasSubstr("belongs to uid 1000"));
  s = t.Hello(4, Who(400, 1000, "", "job_9"), 400, "victim", 5).status();
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_EQ(t.stats().jobs_refused, 3u);
  // The job's own second process.
  EXPECT_TRUE(t.Hello(5, Who(500, 1000, "victim"), 500, "victim", 1).ok());
  // Once every process of the job is gone, its identity is released: the
  // next process that proves the job fixes it anew.
  t.Closed(1);
  t.Closed(5);
  EXPECT_TRUE(t.Hello(6, Who(600, 1001, "victim"), 600, "victim", 0).ok());
  EXPECT_THAT(
      t.Hello(7, Who(700, 1000, "victim"), 700, "victim", 1).status().message(),
      HasSubstr("belongs to uid 1001"));
}

// Issue #33 F1: a process of another uid started with `env -i` (its
// environment names no job) said the first hello for `victim`, fixed the
// job's identity to its uid, forged deaths and locked the real ranks out,
// even after it exited.
TEST(LocalTenantsTest, AJobClaimWithoutEvidenceIsAnonymous) {
  LocalTenants t;
  ProcessIdentity squatter = Who(100, 65534);
  squatter.environ_read = true;  // read: names no job
  absl::StatusOr<LocalTenants::Standing> st =
      t.Hello(1, squatter, 100, "victim", 7);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(*st, LocalTenants::Standing::kAnonymous);
  EXPECT_EQ(t.stats().unproven, 1u);
  // It fixed nothing and holds no global rank: the victim's rank (its
  // environment names the job) is a member.
  st = t.Hello(2, Who(200, 1000, "victim"), 200, "victim", 7);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(*st, LocalTenants::Standing::kMember);
  // A Slurm cgroup names its job too.
  st = t.Hello(3, Who(300, 1000, "", "job_4711"), 300, "4711", 1);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(*st, LocalTenants::Standing::kMember);
  // Now that the job has its identity the squatter's uid is refused.
  EXPECT_THAT(t.Hello(4, squatter, 100, "victim", 3).status().message(),
              HasSubstr("belongs to uid 1000"));
  // An unreadable environment proves nothing either; the same uid as the
  // job's processes is the job's own trust domain.
  st = t.Hello(5, Who(500, 1000), 500, "victim", 2);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(*st, LocalTenants::Standing::kMember);
  // The library's fallback job needs a readable environment naming none.
  ProcessIdentity plain = Who(600, 1000);
  plain.environ_read = true;
  EXPECT_EQ(*t.Hello(6, plain, 600, kLibraryDefaultJob, 0),
            LocalTenants::Standing::kMember);
  EXPECT_THAT(
      t.Hello(7, Who(700, 1001), 700, kLibraryDefaultJob, 1).status().message(),
      HasSubstr("belongs to uid 1000"));
  // Unknown to the kernel (ingest.verify_pid off): the hello is believed.
  EXPECT_EQ(*t.Hello(8, ProcessIdentity{}, 800, "other", 0),
            LocalTenants::Standing::kMember);
}

// An agent that may not read other uids' environ (no CAP_SYS_PTRACE: a
// non-root pod, a unit without it) has no evidence either way: the first
// process fixes the job as before issue #33's F1 rule, and it is counted.
TEST(LocalTenantsTest, AClaimTheAgentCannotCheckIsBelievedAndCounted) {
  LocalTenants t;
  absl::StatusOr<LocalTenants::Standing> st =
      t.Hello(1, Who(100, 1000), 100, "llm-pretrain", 0);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(*st, LocalTenants::Standing::kMember);
  EXPECT_EQ(t.stats().unverified, 1u);
  EXPECT_EQ(t.stats().unproven, 0u);
  // Another uid is then refused for it, as before.
  EXPECT_THAT(
      t.Hello(2, Who(200, 1001), 200, "llm-pretrain", 1).status().message(),
      HasSubstr("belongs to uid 1000"));
  // A Slurm cgroup naming another job is evidence against the claim.
  st = t.Hello(3, Who(300, 1002, "", "job_9"), 300, "other", 0);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(*st, LocalTenants::Standing::kAnonymous);
  EXPECT_EQ(t.stats().unproven, 1u);
}

TEST(LocalTenantsTest, ARankIsHeldByTheProcessThatClaimedItFirst) {
  LocalTenants t;
  ASSERT_TRUE(t.Hello(1, Who(100, 1000, "j"), 100, "j", 0).ok());
  v1::StreamTelemetryRequest mine = Claims(7, 0);
  EXPECT_TRUE(t.NeedsFilter(1, mine));
  EXPECT_FALSE(t.Filter(1, &mine));  // claimed, nothing dropped
  EXPECT_FALSE(t.NeedsFilter(1, Claims(7, 0)));
  // Another process: global rank 0 of j, rank 0 of comm 7 are held.
  absl::Status s = t.Hello(2, Who(200, 1000, "j"), 200, "j", 0).status();
  EXPECT_THAT(s.message(), HasSubstr("held by process 100"));
  ASSERT_TRUE(t.Hello(3, Who(200, 1000, "j"), 200, "j", 1).ok());
  v1::StreamTelemetryRequest theirs = Claims(7, 0);
  EXPECT_TRUE(t.Filter(3, &theirs));
  EXPECT_EQ(theirs.communicators_size(), 0);
  EXPECT_EQ(theirs.ops_size(), 0);
  // A second stream of the holding process may report for it.
  ASSERT_TRUE(t.Hello(4, Who(100, 1000, "j"), 100, "j", 0).ok());
  v1::StreamTelemetryRequest again = Claims(7, 0);
  EXPECT_FALSE(t.Filter(4, &again));
  // A communicator of another job.
  ASSERT_TRUE(t.Hello(5, Who(500, 1000, "k"), 500, "k", 0).ok());
  v1::StreamTelemetryRequest other = Claims(7, 3);
  EXPECT_TRUE(t.Filter(5, &other));
  // The hello, then the communicator event and the op (each counted).
  EXPECT_EQ(t.stats().ranks_refused, 3u);
  EXPECT_EQ(t.stats().comms_refused, 2u);
  // The holder's last stream ends: the rank is free for a restarted one.
  t.Closed(1);
  t.Closed(4);
  v1::StreamTelemetryRequest restarted = Claims(7, 0);
  EXPECT_FALSE(t.Filter(3, &restarted));
}

// Issue #33 N3: a process of another uid set SLURM_JOB_ID=4711 in its own
// environment (in no Slurm cgroup), said the first hello for job 4711 and
// so held the job: the real rank in cgroup job_4711 was refused ("belongs
// to uid 65534") and the squatter's dropped stream was a death in 4711.
TEST(LocalTenantsTest, ACgroupProvenProcessTakesAJobFromAnEnvironmentClaim) {
  LocalTenants t;
  ASSERT_EQ(*t.Hello(1, Who(100, 65534, "4711"), 100, "4711", 7),
            LocalTenants::Standing::kMember);
  v1::StreamTelemetryRequest squatted = Claims(0x4711, 0);
  EXPECT_FALSE(t.Filter(1, &squatted));  // held, before the real rank came
  // The real rank: the scheduler put it in the job's cgroup.
  absl::StatusOr<LocalTenants::Standing> st =
      t.Hello(2, Who(200, 1000, "4711", "job_4711"), 200, "4711", 7);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(*st, LocalTenants::Standing::kMember);
  EXPECT_EQ(t.stats().quarantined, 1u);
  EXPECT_TRUE(t.Quarantined(1));
  EXPECT_FALSE(t.Quarantined(2));
  // The squatter's ranks went with its job: the real rank holds them, the
  // squatter's later records are dropped, and it cannot claim the job again.
  v1::StreamTelemetryRequest real = Claims(0x4711, 0);
  EXPECT_FALSE(t.Filter(2, &real));
  v1::StreamTelemetryRequest more = Claims(0x4711, 1);
  EXPECT_TRUE(t.Filter(1, &more));
  EXPECT_EQ(more.communicators_size() + more.ops_size(), 0);
  EXPECT_THAT(
      t.Hello(3, Who(100, 65534, "4711"), 100, "4711", 3).status().message(),
      HasSubstr("belongs to uid 1000 in Slurm job_4711"));
  EXPECT_THAT(
      t.Hello(4, Who(400, 65534, "4711"), 400, "4711", 3).status().message(),
      HasSubstr("belongs to uid 1000 in Slurm job_4711"));
  // The squatter's end frees nothing of the job's.
  t.Closed(1);
  EXPECT_THAT(t.Hello(5, Who(500, 1000, "4711", "job_4711"), 500, "4711", 7)
                  .status()
                  .message(),
              HasSubstr("held by process 200"));
}

// The PITSTOP_JOB_ID variant: the job's name is the library's, its real
// ranks run inside a Slurm job's cgroup; a process in none that named the
// job first yields to them. Among equal evidence the first still holds.
TEST(LocalTenantsTest, AScheduledProcessOutranksAnUnscheduledOne) {
  LocalTenants t;
  ASSERT_TRUE(t.Hello(1, Who(100, 65534, "victim"), 100, "victim", 7).ok());
  absl::StatusOr<LocalTenants::Standing> st =
      t.Hello(2, Who(200, 1000, "victim", "job_4711"), 200, "victim", 7);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_TRUE(t.Quarantined(1));
  // Another Slurm job's process naming the job is refused, not promoted.
  EXPECT_THAT(t.Hello(3, Who(300, 1001, "victim", "job_9"), 300, "victim", 1)
                  .status()
                  .message(),
              HasSubstr("belongs to uid 1000 in Slurm job_4711"));
  // Without cgroups only the uid tells processes apart: first come holds.
  LocalTenants plain;
  ASSERT_TRUE(plain.Hello(1, Who(100, 1000, "j"), 100, "j", 0).ok());
  EXPECT_THAT(
      plain.Hello(2, Who(200, 1001, "j"), 200, "j", 1).status().message(),
      HasSubstr("belongs to uid 1000"));
  EXPECT_EQ(plain.stats().quarantined, 0u);
  // Nor does a readable environment outrank one the agent could not read
  // (a non-root agent reads its own uid's only).
  LocalTenants pod;
  ASSERT_TRUE(pod.Hello(1, Who(100, 1000), 100, "j", 0).ok());
  EXPECT_EQ(pod.stats().unverified, 1u);
  EXPECT_THAT(pod.Hello(2, Who(200, 4470, "j"), 200, "j", 1).status().message(),
              HasSubstr("belongs to uid 1000"));
  EXPECT_EQ(pod.stats().quarantined, 0u);
}

// N3 through the agent's core: the quarantined squatter's dropped stream is
// no death in the job; the real rank's is.
TEST(LocalTenantsTest, AQuarantinedProcessEndsAsNoDeathInTheJob) {
  AgentCoreOptions options;
  options.host = "node-a";
  AgentCore core(Clock::Real(), options, nullptr);
  auto hello = [](uint32_t pid, int32_t global_rank) {
    v1::StreamTelemetryRequest req = Claims(0x4711, global_rank);
    v1::ProcessHello* h = req.mutable_hello();
    h->set_pid(pid);
    h->set_job_id("4711");
    h->set_global_rank(global_rank);
    h->set_start_unix_ns(1);
    return req;
  };
  const uint64_t squatter = core.OpenStream(nullptr, Who(100, 65534, "4711"));
  ASSERT_TRUE(core.OnMessage(squatter, hello(100, 7)).ok());
  const uint64_t real =
      core.OpenStream(nullptr, Who(200, 1000, "4711", "job_4711"));
  ASSERT_TRUE(core.OnMessage(real, hello(200, 7)).ok());
  EXPECT_TRUE(core.RanksOfJob("4711").size() == 1);
  // While it lives, its stalled progress and communicators are not
  // reported either (they would read as a hang of the job's rank 7).
  v1::ConnectRequest live;
  core.FillBatch(1000, &live);
  std::vector<uint32_t> reporting;
  for (const v1::RankProgress& p : live.progress()) {
    reporting.push_back(p.pid());
  }
  EXPECT_THAT(reporting, ::testing::Each(200u));
  EXPECT_FALSE(reporting.empty());
  std::vector<v1::CommunicatorInfo> comms;
  core.AllCommunicators(&comms);
  ASSERT_EQ(comms.size(), 1u);
  EXPECT_EQ(comms[0].pid(), 200u);
  core.CloseStream(squatter);
  core.CloseStream(real);
  v1::ConnectRequest batch;
  core.FillBatch(1000, &batch);
  std::vector<uint32_t> died;
  for (const v1::RankLifecycle& l : batch.lifecycle()) {
    if (l.kind() == v1::RankLifecycle::KIND_DIED) died.push_back(l.pid());
  }
  EXPECT_THAT(died, ::testing::ElementsAre(200u));
}

// Issue #33 N6: 40 anonymous processes (`env -i`: their claim of a job is
// cleared) each reporting a made-up communicator, dropped without goodbye,
// were 40 RankLifecycle DIED and so 40 PROCESS_DIED faults of job ''. A
// process that reports for no job ends as no death; a member's still does.
TEST(LocalTenantsTest, AProcessOfNoJobEndsAsNoDeath) {
  AgentCoreOptions options;
  options.host = "node-a";
  AgentCore core(Clock::Real(), options, nullptr);
  auto hello = [](uint32_t pid, const std::string& job, int32_t global_rank,
                  uint64_t comm) {
    v1::StreamTelemetryRequest req = Claims(comm, 0);
    req.mutable_communicators(0)->mutable_info()->set_n_ranks(2);
    v1::ProcessHello* h = req.mutable_hello();
    h->set_pid(pid);
    h->set_job_id(job);
    h->set_global_rank(global_rank);
    h->set_start_unix_ns(1);
    return req;
  };
  std::vector<uint64_t> streams;
  for (uint32_t i = 0; i < 40; ++i) {
    ProcessIdentity anonymous = Who(1000 + i, 65534);
    anonymous.environ_read = true;  // `env -i`: names no job
    // Half claim a job (made anonymous), half name none.
    const uint64_t s = core.OpenStream(nullptr, anonymous);
    ASSERT_TRUE(core.OnMessage(s, hello(1000 + i, i % 2 ? "victim" : "",
                                        static_cast<int32_t>(i), 0xA000 + i))
                    .ok());
    streams.push_back(s);
  }
  const uint64_t member = core.OpenStream(nullptr, Who(200, 1000, "victim"));
  ASSERT_TRUE(core.OnMessage(member, hello(200, "victim", 0, 0x600D)).ok());
  for (uint64_t s : streams) core.CloseStream(s);
  core.CloseStream(member);
  v1::ConnectRequest batch;
  core.FillBatch(1000, &batch);
  std::vector<uint32_t> died;
  for (const v1::RankLifecycle& l : batch.lifecycle()) {
    if (l.kind() == v1::RankLifecycle::KIND_DIED) died.push_back(l.pid());
  }
  EXPECT_THAT(died, ::testing::ElementsAre(200u));
  EXPECT_EQ(core.rank_deaths(), 1u);
  // R18-5: what the anonymous processes registered upstream is released
  // when they end (a clean exit: no fault), so none of them keeps a rank.
  std::vector<uint32_t> exited;
  for (const v1::RankLifecycle& l : batch.lifecycle()) {
    if (l.kind() == v1::RankLifecycle::KIND_CLEAN_EXIT) {
      EXPECT_EQ(l.job_id(), "");
      exited.push_back(l.pid());
    }
  }
  EXPECT_EQ(exited.size(), 40u);
}

// Issue #33 N5: one process's made-up (comm, rank) claims filled the node's
// table (kMaxHeldRanks); every later process was refused. A process holds
// at most kMaxRanksPerProcess ranks; the others are untouched.
TEST(LocalTenantsTest, OneProcessCannotFillTheNodesRankTable) {
  LocalTenants t;
  ASSERT_TRUE(t.Hello(1, Who(100, 65534), 100, "", -1).ok());
  size_t kept = 0;
  size_t sent = 0;
  for (size_t base = 0; base < kMaxHeldRanks + 4096; base += 32768) {
    sent += 32768;
    v1::StreamTelemetryRequest flood;
    for (size_t i = base; i < base + 32768; ++i) {
      v1::OpRecord* op = flood.add_ops();
      op->set_comm_hash(0xF100 + (i >> 10));
      op->set_rank(static_cast<int32_t>(i & 1023));
    }
    t.Filter(1, &flood);
    kept += static_cast<size_t>(flood.ops_size());
  }
  EXPECT_EQ(kept, kMaxRanksPerProcess);
  EXPECT_EQ(t.stats().process_over_cap, sent - kMaxRanksPerProcess);
  EXPECT_EQ(t.stats().tables_full, 0u);
  // Another process still claims its global rank and its ranks.
  ASSERT_TRUE(t.Hello(2, Who(200, 1000, "victim"), 200, "victim", 0).ok());
  v1::StreamTelemetryRequest mine = Claims(0x600D, 0);
  EXPECT_FALSE(t.Filter(2, &mine));
  // A process's streams share its cap: a new hello's global rank too.
  ASSERT_TRUE(t.Hello(3, Who(100, 65534), 100, "", -1).ok());
  v1::StreamTelemetryRequest again = Claims(0xF0F0, 0);
  EXPECT_TRUE(t.Filter(3, &again));
}

// Attacker round 18, R18-6: one uid forked 257 processes (exited; the parent
// kept their sockets), each claiming 4,096 made-up (comm, rank) pairs: the
// node's table (2^20) was full and every later process was refused. The
// processes of one uid hold at most their uid's share; another uid's
// processes still claim their ranks and global ranks.
TEST(LocalTenantsTest, OneUidCannotFillTheNodesRankTable) {
  LocalTenants t;
  const size_t processes = kMaxHeldRanks / kMaxRanksPerProcess + 1;  // 257
  size_t kept = 0;
  for (size_t p = 0; p < processes; ++p) {
    const uint64_t stream = 1 + p;
    const pid_t pid = static_cast<pid_t>(10'000 + p);
    ASSERT_TRUE(t.Hello(stream, Who(pid, 65534), pid, "", -1).ok());
    v1::StreamTelemetryRequest flood;
    for (size_t i = 0; i < kMaxRanksPerProcess; ++i) {
      v1::OpRecord* op = flood.add_ops();
      op->set_comm_hash(0xF1000000 + p);
      op->set_rank(static_cast<int32_t>(i));
    }
    t.Filter(stream, &flood);
    kept += static_cast<size_t>(flood.ops_size());
  }
  EXPECT_EQ(kept, kMaxRanksPerUid);
  EXPECT_EQ(t.stats().uid_over_share,
            processes * kMaxRanksPerProcess - kMaxRanksPerUid);
  EXPECT_EQ(t.stats().tables_full, 0u);
  // Another uid: its process's hello with a global rank, and its ranks.
  ASSERT_TRUE(t.Hello(1000, Who(200, 1000, "victim"), 200, "victim", 0).ok());
  v1::StreamTelemetryRequest mine = Claims(0x600D, 0);
  EXPECT_FALSE(t.Filter(1000, &mine));
  // A new process of the full uid is refused its global rank, naming the
  // share and its key.
  absl::Status s =
      t.Hello(1001, Who(300, 65534, "mine"), 300, "mine", 0).status();
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("uid 65534"));
  EXPECT_THAT(s.message(), HasSubstr("ingest.max_ranks_per_uid"));
  // The share is given back when the uid's processes end.
  for (size_t p = 0; p < processes; ++p) t.Closed(1 + p);
  EXPECT_TRUE(t.Hello(1002, Who(301, 65534, "mine"), 301, "mine", 0).ok());
}

// The shares are the agent's configuration (ingest.max_ranks_*).
TEST(LocalTenantsTest, TheSharesAreConfigured) {
  LocalTenantsOptions options;
  options.max_held_ranks = 10;
  options.max_ranks_per_uid = 6;
  options.max_ranks_per_process = 4;
  LocalTenants t(options);
  auto claim = [&](uint64_t stream, uint64_t comm, int n) {
    v1::StreamTelemetryRequest req;
    for (int i = 0; i < n; ++i) {
      v1::OpRecord* op = req.add_ops();
      op->set_comm_hash(comm);
      op->set_rank(i);
    }
    t.Filter(stream, &req);
    return req.ops_size();
  };
  ASSERT_TRUE(t.Hello(1, Who(100, 1000), 100, "", -1).ok());
  ASSERT_TRUE(t.Hello(2, Who(101, 1000), 101, "", -1).ok());
  ASSERT_TRUE(t.Hello(3, Who(200, 1001), 200, "", -1).ok());
  ASSERT_TRUE(t.Hello(4, Who(300, 1002), 300, "", -1).ok());
  EXPECT_EQ(claim(1, 0xA, 5), 4);  // the process's 4
  EXPECT_EQ(claim(2, 0xB, 5), 2);  // the uid's 6
  EXPECT_EQ(claim(3, 0xC, 5), 4);  // the node's 10
  EXPECT_EQ(claim(4, 0xD, 1), 0);
  const LocalTenants::Stats st = t.stats();
  EXPECT_EQ(st.process_over_cap, 2u);  // one of stream 1's, one of 3's
  EXPECT_EQ(st.uid_over_share, 3u);
  EXPECT_EQ(st.tables_full, 1u);
}

// Round 20: a process of no job on the node claims rank 2 of communicator
// 0xC0 before the job's process does (the hash read off /metrics, N7): the
// communicator was "of no job" and the job's real rank 2 was dropped as a
// communicator of another job. A process of a job takes such a rank.
TEST(LocalTenantsTest, AJobsProcessTakesARankAProcessOfNoJobClaimedFirst) {
  LocalTenants t;
  ProcessIdentity stranger = Who(300, 65534);
  stranger.environ_read = true;  // `env -i`
  ASSERT_TRUE(t.Hello(1, stranger, 300, "", -1).ok());
  v1::StreamTelemetryRequest squat = Claims(0xC0, 2);
  EXPECT_FALSE(t.Filter(1, &squat));  // held
  ASSERT_TRUE(t.Hello(2, Who(100, 1000, "gr"), 100, "gr", 2).ok());
  v1::StreamTelemetryRequest mine = Claims(0xC0, 2);
  mine.mutable_communicators(0)->mutable_info()->set_job_id("gr");
  EXPECT_FALSE(t.Filter(2, &mine));  // nothing dropped
  EXPECT_EQ(mine.communicators_size(), 1);
  EXPECT_EQ(mine.ops_size(), 1);
  EXPECT_EQ(t.stats().jobless_superseded, 1u);
  // The process of no job reports nothing more for it, nor for another
  // rank of the job's communicator.
  v1::StreamTelemetryRequest again = Claims(0xC0, 2);
  EXPECT_TRUE(t.NeedsFilter(1, again));
  EXPECT_TRUE(t.Filter(1, &again));
  EXPECT_EQ(again.ops_size(), 0);
  v1::StreamTelemetryRequest other = Claims(0xC0, 3);
  EXPECT_TRUE(t.Filter(1, &other));
  EXPECT_EQ(other.ops_size(), 0);
  // A process of another job takes nothing of gr's.
  ASSERT_TRUE(t.Hello(3, Who(400, 1000, "other"), 400, "other", 0).ok());
  v1::StreamTelemetryRequest theirs = Claims(0xC0, 2);
  EXPECT_TRUE(t.Filter(3, &theirs));
  EXPECT_EQ(theirs.ops_size(), 0);
}

// Attacker round 18, R18-7 (equal evidence, no scheduler cgroups): a
// process of uid 65534 started with PITSTOP_JOB_ID=v3 said the first hello
// for v3; the real rank (uid 1000, same environment) was refused and the
// squatter's dropped stream was a PROCESS_DIED in v3. Where the operator
// names the uids that run jobs (ingest.job_uids), another uid's environment
// proves no job: it reports anonymously, its end is no death in the job.
TEST(LocalTenantsTest, OnlyTheNodesJobUidsClaimAJobByEnvironment) {
  AgentCoreOptions options;
  options.host = "node-a";
  options.tenants.job_uids = {1000};
  AgentCore core(Clock::Real(), options, nullptr);
  auto hello = [](const std::string& job, int32_t global_rank) {
    v1::StreamTelemetryRequest req = Claims(0x3333, global_rank);
    req.mutable_communicators(0)->mutable_info()->set_n_ranks(2);
    req.mutable_communicators(0)->mutable_info()->set_job_id(job);
    v1::ProcessHello* h = req.mutable_hello();
    h->set_job_id(job);
    h->set_global_rank(global_rank);
    h->set_start_unix_ns(1);
    return req;
  };
  const uint64_t squatter = core.OpenStream(nullptr, Who(24106, 65534, "v3"));
  ASSERT_TRUE(core.OnMessage(squatter, hello("v3", 1)).ok());
  EXPECT_EQ(core.tenant_stats().uid_not_for_jobs, 1u);
  // The real rank 1 (uid 1000, the same environment) is v3's.
  const uint64_t real = core.OpenStream(nullptr, Who(5000, 1000, "v3"));
  absl::Status s = core.OnMessage(real, hello("v3", 1));
  ASSERT_TRUE(s.ok()) << s;
  // A process the scheduler's cgroup ties to a job is believed of any uid.
  const uint64_t slurm =
      core.OpenStream(nullptr, Who(6000, 2000, "4711", "job_4711"));
  ASSERT_TRUE(core.OnMessage(slurm, hello("4711", 0)).ok());
  // The squatter drops: no death in v3.
  core.CloseStream(squatter);
  v1::ConnectRequest batch;
  core.FillBatch(1000, &batch);
  for (const v1::RankLifecycle& l : batch.lifecycle()) {
    EXPECT_NE(l.kind(), v1::RankLifecycle::KIND_DIED) << l.DebugString();
  }
  for (const v1::CommunicatorInfo& c : batch.communicators()) {
    if (c.job_id() == "v3") {
      EXPECT_EQ(c.pid(), 5000u) << c.DebugString();
    }
  }
  // Without ingest.job_uids the first still holds (docs: "Left open").
  LocalTenants any;
  ASSERT_TRUE(any.Hello(1, Who(24106, 65534, "v3"), 24106, "v3", 1).ok());
  EXPECT_TRUE(absl::IsPermissionDenied(
      any.Hello(2, Who(5000, 1000, "v3"), 5000, "v3", 1).status()));
}

// Attacker round 18, R18-2: a process in its own pid namespace says hello
// with the pid of another job's rank (its NSpid passes the pid check). The
// agent reports a process upstream as the kernel knows it on this host:
// its SO_PEERCRED pid, whatever pid the hello names.
TEST(LocalTenantsTest, AProcessIsReportedByItsPidOnThisHost) {
  AgentCoreOptions options;
  options.host = "node-a";
  AgentCore core(Clock::Real(), options, nullptr);
  v1::StreamTelemetryRequest req = Claims(0x5A5A, 0);
  req.mutable_communicators(0)->mutable_info()->set_n_ranks(1);
  req.mutable_communicators(0)->mutable_info()->set_pid(28204);
  v1::ProcessHello* h = req.mutable_hello();
  h->set_pid(28204);  // its pid in its namespace = the victim's here
  h->set_job_id("mallory");
  h->set_global_rank(0);
  h->set_start_unix_ns(1);
  const uint64_t s = core.OpenStream(nullptr, Who(4242, 65534, "mallory"));
  ASSERT_TRUE(core.OnMessage(s, req).ok());
  core.CloseStream(s);
  v1::ConnectRequest batch;
  core.FillBatch(1000, &batch);
  ASSERT_GT(batch.communicators_size(), 0);
  for (const v1::CommunicatorInfo& c : batch.communicators()) {
    EXPECT_EQ(c.pid(), 4242u);
  }
  std::vector<uint32_t> died;
  for (const v1::RankLifecycle& l : batch.lifecycle()) {
    if (l.kind() == v1::RankLifecycle::KIND_DIED) died.push_back(l.pid());
    for (const v1::CommunicatorInfo& c : l.communicators()) {
      EXPECT_EQ(c.pid(), 4242u);
    }
  }
  EXPECT_THAT(died, ::testing::ElementsAre(4242u));
}

// Attacker round 18, R18-4: a process forks children that connect, say
// hello and exit while the parent keeps their sockets; the pid counter
// wraps and the next rank started on the node gets such a pid. It is
// another process (another start time): it is not refused as the old one.
TEST(LocalTenantsTest, AReusedPidIsANewProcess) {
  testing::TempDir proc;
  std::filesystem::create_directories(proc.file("500"));
  auto started = [&](uint64_t ticks, const std::string& env) {
    // Field 22 is the start; the command name holds spaces and ')'.
    std::ofstream(proc.file("500/stat"))
        << "500 (a b) c) S 1 500 500 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 "
           "0 "
        << ticks << " 1000 10 18446744073709551615\n";
    std::ofstream(proc.file("500/environ"), std::ios::binary) << env;
    return IdentifyProcess({500, 1000, 1000}, proc.path());
  };
  const ProcessIdentity gone = started(1111, "HOME=/x");
  EXPECT_EQ(gone.start_ticks, 1111u);
  LocalTenants t;
  ASSERT_TRUE(t.Hello(1, gone, 500, "", -1).ok());  // stays open
  const ProcessIdentity next = started(2222, "PITSTOP_JOB_ID=victim");
  absl::StatusOr<LocalTenants::Standing> s = t.Hello(2, next, 500, "victim", 0);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, LocalTenants::Standing::kMember);
  // The same process's second stream is still the same holder.
  EXPECT_TRUE(
      absl::IsPermissionDenied(t.Hello(3, gone, 500, "victim", 1).status()));
}

// R18-8: a trainer's report is held against what the kernel knows of its
// process, like a hello, and against the global ranks other processes hold.
TEST(LocalTenantsTest, ATrainerReportsForItsOwnJobAndRankOnly) {
  LocalTenants t;
  ASSERT_TRUE(t.Hello(1, Who(100, 1000, "tj"), 100, "tj", 3).ok());
  EXPECT_TRUE(t.CheckTrainer(Who(100, 1000, "tj"), "tj", 3).ok());
  EXPECT_TRUE(t.CheckTrainer(Who(200, 1000, "tj"), "tj", 1).ok());
  absl::Status s = t.CheckTrainer(Who(200, 1000, "tj"), "tj", 3);
  EXPECT_THAT(s.message(), HasSubstr("trainer.global_rank 3"));
  ProcessIdentity stranger = Who(300, 65534);
  stranger.environ_read = true;  // `env -i`
  s = t.CheckTrainer(stranger, "tj", 0);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  s = t.CheckTrainer(Who(300, 65534, "tj"), "tj", 0);
  EXPECT_THAT(s.message(), HasSubstr("trainer.job_id 'tj' belongs to uid"));
  s = t.CheckTrainer(Who(300, 65534, "mine"), "flood-1", 0);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_EQ(t.stats().trainers_refused, 4u);
  // Unknown to the kernel (ingest.verify_pid off): believed.
  EXPECT_TRUE(t.CheckTrainer(ProcessIdentity{}, "tj", 3).ok());
}

// Round 21, R21-4: a communicator record's global_ranks listed 65,536 ranks
// its process did not hold; upstream each entry is a member charged to the
// host, and five processes of one user, each naming a made-up job, filled
// their host's member share: a real job's new communicator on the node got
// no member. The entries of ranks the process does not hold are cut now
// (counted); those of its own ranks stay.
TEST(LocalTenantsTest, AProcessListsTheGlobalRanksOfItsOwnRanksOnly) {
  LocalTenants t;
  ASSERT_TRUE(t.Hello(1, Who(100, 1000, "j1"), 100, "j1", 0).ok());
  v1::StreamTelemetryRequest req = Claims(0xA001, 0);
  v1::CommunicatorInfo* info = req.mutable_communicators(0)->mutable_info();
  info->set_n_ranks(1 << 16);
  for (int32_t g = 0; g < (1 << 16); ++g) info->add_global_ranks(g);
  // Rank 3 of the same communicator is the process's too (a later record
  // of the same message claims it).
  v1::CommunicatorInfo* three = req.add_communicators()->mutable_info();
  three->set_comm_hash(0xA001);
  three->set_rank(3);
  EXPECT_TRUE(t.NeedsFilter(1, req));
  EXPECT_TRUE(t.Filter(1, &req));
  ASSERT_EQ(req.communicators_size(), 2);
  EXPECT_THAT(req.communicators(0).info().global_ranks(),
              ::testing::ElementsAre(0, -1, -1, 3));
  EXPECT_EQ(t.stats().listed_refused, 1u);
  // Its own entries only: nothing to cut, nothing counted.
  v1::StreamTelemetryRequest own = Claims(0xA001, 3);
  for (int32_t g : {-1, -1, -1, 3}) {
    own.mutable_communicators(0)->mutable_info()->add_global_ranks(g);
  }
  EXPECT_FALSE(t.NeedsFilter(1, own));
  // Unknown to the kernel (ingest.verify_pid off, `pitstop replay`): its
  // list is believed, as its hello is.
  ASSERT_TRUE(t.Hello(2, ProcessIdentity{}, 200, "j2", 0).ok());
  v1::StreamTelemetryRequest replayed = Claims(0xB001, 0);
  for (int32_t g = 0; g < 4; ++g) {
    replayed.mutable_communicators(0)->mutable_info()->add_global_ranks(g);
  }
  t.Filter(2, &replayed);
  EXPECT_EQ(replayed.communicators(0).info().global_ranks_size(), 4);
  EXPECT_EQ(t.stats().listed_refused, 1u);
}

}  // namespace
}  // namespace pitstop::agent
