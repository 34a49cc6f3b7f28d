// Issue #33, round 21 (an attacker hour on the engine, FakeClock): what a
// host may say about members another host holds, and how much of the table
// of failed communicator creations it may fill (docs/reliability.md,
// "Round 21: an attacker hour").
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "pitstop/clock.h"
#include "src/controller/detect/config_fault.h"
#include "src/controller/detect/detection_engine.h"
#include "tests/controller/listed_comm.h"

namespace pitstop::controller {
namespace {

// Member `rank` (pid 100 + rank) of a `n_ranks`-rank communicator 1 of job
// `victim`, listing `globals` as the communicator's global ranks.
v1::CommunicatorInfo Listing(int32_t rank, int32_t n_ranks,
                             std::initializer_list<int32_t> globals) {
  v1::CommunicatorInfo info;
  info.set_comm_hash(1);
  info.set_job_id("victim");
  info.set_rank(rank);
  info.set_n_ranks(n_ranks);
  info.set_pid(100 + rank);
  for (int32_t g : globals) info.add_global_ranks(g);
  return info;
}

int32_t GlobalRankOf(DetectionEngine* e, int32_t rank) {
  v1::Communicator c;
  if (!e->GetCommunicator(1, &c)) return -2;
  for (const v1::MemberLocation& m : c.members()) {
    if (m.comm_rank() == rank) return m.global_rank();
  }
  return -2;
}

// R21-1: host c reports the one rank of victim's communicator nobody holds
// yet (rank 2), with a global_ranks list that renames host b's live
// members. Before, the list rewrote b's members' global ranks (the record
// lied about b), and with b's global rank 1 renamed, c's creation failure
// naming global rank 1 passed the check that a live process on another
// host holds it: a CONFIG fault in victim for b's healthy rank.
TEST(AttackerHourTest, AListDoesNotRenameAnotherHostsLiveMembers) {
  FakeClock clock;
  auto e = std::move(*DetectionEngine::Create(&clock, {}));
  ASSERT_TRUE(e->AddCommunicator("b", Listing(0, 3, {0, 1, -1})).ok());
  ASSERT_TRUE(e->AddCommunicator("b", Listing(1, 3, {0, 1, -1})).ok());
  const uint64_t refused = e->stats().claims_refused;
  // Accepted for c's own rank; the entries for b's members are not used.
  ASSERT_TRUE(e->AddCommunicator("c", Listing(2, 3, {70, 71, 2})).ok());
  EXPECT_EQ(GlobalRankOf(e.get(), 0), 0);
  EXPECT_EQ(GlobalRankOf(e.get(), 1), 1);
  EXPECT_EQ(GlobalRankOf(e.get(), 2), 2);
  EXPECT_EQ(e->stats().claims_refused, refused + 2);

  v1::RankLifecycle failed;
  failed.set_kind(v1::RankLifecycle::KIND_COMM_INIT_FAILED);
  failed.set_job_id("victim");
  failed.set_pid(102);
  failed.set_global_rank(1);
  EXPECT_TRUE(absl::IsPermissionDenied(e->AddLifecycle("c", failed)));
  clock.Advance(absl::Milliseconds(500));
  for (const v1::Fault& f : e->RunCycle().faults) {
    EXPECT_NE(f.fault_class(), v1::FAULT_CLASS_CONFIG) << f.ShortDebugString();
  }
  // b's own list still sets its members' global ranks (a rank restarted
  // with another global rank, reported by its own host).
  ASSERT_TRUE(e->AddCommunicator("b", Listing(0, 3, {5, 6, 2})).ok());
  EXPECT_EQ(GlobalRankOf(e.get(), 0), 5);
  EXPECT_EQ(GlobalRankOf(e.get(), 1), 6);
}

v1::RankLifecycle InitFailed(const std::string& job, uint32_t pid) {
  v1::RankLifecycle l;
  l.set_kind(v1::RankLifecycle::KIND_COMM_INIT_FAILED);
  l.set_job_id(job);
  l.set_pid(pid);
  l.set_global_rank(-1);
  l.mutable_init_failure()->set_call("ncclCommInitRank");
  l.mutable_init_failure()->set_result(2);
  return l;
}

// The CONFIG fault of `job` (null when none is open).
const v1::Fault* ConfigFault(const CycleResult& r, const std::string& job) {
  for (const v1::Fault& f : r.faults) {
    if (f.fault_class() == v1::FAULT_CLASS_CONFIG && f.job_id() == job) {
      return &f;
    }
  }
  return nullptr;
}

// R21-3: the table of failed communicator creations had one cluster-wide
// cap (1024 jobs, 4096 failures per job) and was never emptied. One node's
// processes, each naming a made-up job in its environment (no credential),
// filled it for good: another host's real failure raised nothing and was
// not counted. Now each host creates at most kMaxConfigJobsPerHost jobs
// there and reports at most kMaxFailuresPerHostJob processes of a job;
// its share comes back an hour after its jobs last changed.
TEST(AttackerHourTest, OneHostCannotFillTheTableOfFailedCreations) {
  FakeClock clock;
  auto e = std::move(*DetectionEngine::Create(&clock, {}));
  size_t refused = 0;
  // Failures of processes it does not run, in victim (F4: an agent may say
  // a process of its host belongs to any job) ...
  for (uint32_t p = 0; p < 2 * kMaxFailuresPerJob; ++p) {
    refused += !e->AddLifecycle("evil", InitFailed("victim", 5000 + p)).ok();
  }
  // ... and in made-up jobs.
  for (uint32_t j = 0; j < 2 * kMaxConfigJobs; ++j) {
    refused += !e->AddLifecycle(
                     "evil", InitFailed(absl::StrCat("made-up-", j), 1000 + j))
                    .ok();
  }
  EXPECT_EQ(refused, 2 * kMaxFailuresPerJob - kMaxFailuresPerHostJob +
                         2 * kMaxConfigJobs - (kMaxConfigJobsPerHost - 1));
  EXPECT_EQ(e->stats().config_failures_refused, static_cast<uint64_t>(refused));
  // Host b's real failure in victim is in victim's fault; another job's
  // failure on host b raises that job's fault.
  ASSERT_TRUE(e->AddLifecycle("b", InitFailed("victim", 7)).ok());
  ASSERT_TRUE(e->AddLifecycle("b", InitFailed("other", 8)).ok());
  CycleResult r = e->RunCycle();
  const v1::Fault* victim = ConfigFault(r, "victim");
  ASSERT_NE(victim, nullptr);
  bool b_named = false;
  for (const v1::Suspect& s : victim->suspects()) b_named |= s.host() == "b";
  EXPECT_TRUE(b_named);
  EXPECT_NE(ConfigFault(r, "other"), nullptr);
  // An hour later the made-up jobs are forgotten: the host's share is back.
  clock.Advance(absl::Minutes(61));
  e->RunCycle();
  EXPECT_TRUE(e->AddLifecycle("evil", InitFailed("made-up-again", 1)).ok());
}

v1::CollectiveSummary Summary(uint64_t comm, int32_t rank, uint64_t seq) {
  v1::CollectiveSummary s;
  s.set_comm_hash(comm);
  s.set_rank(rank);
  s.set_seq_number(seq);
  s.set_kind(v1::OP_KIND_COLLECTIVE);
  s.set_func(v1::COLL_FUNC_ALL_REDUCE);
  s.set_bytes(1 << 20);
  s.set_state(v1::OP_STATE_COMPLETED);
  s.set_kernel_duration_ns(1'000'000);
  s.set_pid(100 + rank);
  return s;
}

// R21-4, the rest: every (comm, rank) a local process holds is a member
// upstream, charged to its host, and the agent's table (2^20 ranks) is four
// times the host's member share (2^18): two uids on node n1, each with 32
// processes at their 4,096 ranks over 8 jobs of their own making (32,768
// members a job, within the host's share of one job) fill n1's share
// (here each job's members come as one record's list, as a process's
// ranks would one by one). Job `good`, with a rank on n1 and one on n2,
// then had its new communicator's member on n1 refused and joined no
// collective. The scheduler names good's hosts: its members there are
// charged to its share of the host, not the host's, and it joins; a host
// it did not name (n3) is refused and counted.
TEST(AttackerHourTest, MadeUpJobsDoNotStarveAScheduledJobOnTheirHost) {
  FakeClock clock;
  auto e = std::move(*DetectionEngine::Create(&clock, {}));
  constexpr int32_t kPerJob = 32768;
  for (int j = 0; j < 8; ++j) {
    ASSERT_TRUE(
        e->AddCommunicator(
             "n1", testing::ListedComm(0xA000 + j, absl::StrCat("made-up-", j),
                                       0, kPerJob, kPerJob))
            .ok());
  }
  ASSERT_TRUE(absl::IsResourceExhausted(e->AddCommunicator(
      "n1", testing::ListedComm(0xA100, "made-up-8", 0, 0, 2))));
  const uint64_t host_refused = e->stats().members_refused_host;

  ASSERT_TRUE(e->SetJobHosts("good", {"n2", "n1", "n1"}).ok());
  EXPECT_EQ(e->JobHosts("good"), (std::vector<std::string>{"n1", "n2"}));
  ASSERT_TRUE(
      e->AddCommunicator("n1", testing::ListedComm(0x6003, "good", 0, 0, 2))
          .ok());
  ASSERT_TRUE(
      e->AddCommunicator("n2", testing::ListedComm(0x6003, "good", 1, 0, 2))
          .ok());
  const uint64_t joined = e->stats().collectives_joined;
  for (uint64_t seq = 1; seq <= 20; ++seq) {
    ASSERT_TRUE(e->AddSummary("n1", Summary(0x6003, 0, seq)).ok());
    ASSERT_TRUE(e->AddSummary("n2", Summary(0x6003, 1, seq)).ok());
  }
  EXPECT_EQ(e->stats().collectives_joined, joined + 20);
  EXPECT_EQ(e->stats().members_refused_host, host_refused);
  // The made-up jobs stay within the host's share.
  EXPECT_TRUE(absl::IsResourceExhausted(e->AddCommunicator(
      "n1", testing::ListedComm(0xA101, "made-up-9", 0, 0, 2))));

  // A host the scheduler did not name reports for good: refused, counted,
  // and no CONFIG fault from there either.
  const uint64_t claims = e->stats().claims_refused;
  absl::Status s =
      e->AddCommunicator("n3", testing::ListedComm(0x6004, "good", 0, 0, 2));
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_NE(s.message().find("host n3 is not one of them"),
            absl::string_view::npos)
      << s;
  EXPECT_TRUE(absl::IsPermissionDenied(
      e->AddLifecycle("n3", InitFailed("good", 4711))));
  EXPECT_EQ(e->stats().unscheduled_refused, 2u);
  EXPECT_EQ(e->stats().claims_refused, claims + 2);
  v1::Communicator c;
  EXPECT_FALSE(e->GetCommunicator(0x6004, &c));
  // Forgotten, the naming no longer shelters nor refuses.
  ASSERT_TRUE(e->SetJobHosts("good", {}).ok());
  EXPECT_TRUE(e->JobHosts("good").empty());
  EXPECT_TRUE(
      e->AddCommunicator("n3", testing::ListedComm(0x6004, "good", 0, 0, 2))
          .ok());
  EXPECT_TRUE(absl::IsInvalidArgument(e->SetJobHosts("", {"n1"})));
  EXPECT_TRUE(absl::IsInvalidArgument(e->SetJobHosts("good", {""})));
}

}  // namespace
}  // namespace pitstop::controller
