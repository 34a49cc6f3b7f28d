// LocalTenants: a local process reports for the job the kernel says it
// belongs to and for the ranks it holds (docs/reliability.md, "Trust
// model"). /proc is a temporary directory here; the daemon-level attacks
// are in tests/hardening/local_claims_test.cc.
#include "src/agent/local_tenants.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
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

}  // namespace
}  // namespace pitstop::agent
