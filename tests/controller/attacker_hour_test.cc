// Issue #33, round 21 (an attacker hour on the engine, FakeClock): what a
// host may say about members another host holds, and how much of the table
// of failed communicator creations it may fill (docs/reliability.md,
// "Round 21: an attacker hour").
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "pitstop/clock.h"
#include "src/controller/detect/config_fault.h"
#include "src/controller/detect/detection_engine.h"

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

}  // namespace
}  // namespace pitstop::controller
