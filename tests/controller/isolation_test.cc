// Issue #33, round 17 (the attacker's findings F2, F3, F5 on the engine,
// FakeClock): a host with a valid certificate may not forge a death in
// another job, take over a live host's ranks while that host is only
// briefly away, or fill another job's share of the budgets
// (docs/reliability.md, "Trust model").
#include <memory>
#include <string>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pitstop/clock.h"
#include "src/controller/detect/detection_engine.h"
#include "tests/controller/listed_comm.h"

namespace pitstop::controller {
namespace {

using ::testing::HasSubstr;

// Member `rank` (pid 100 + rank) of `hash` in `job`; global rank `global`
// when >= 0, else none; `listed` global ranks listed.
v1::CommunicatorInfo Comm(uint64_t hash, const std::string& job, int32_t rank,
                          int32_t n_ranks, int32_t global = -1,
                          int32_t listed = 0) {
  v1::CommunicatorInfo info =
      testing::ListedComm(hash, job, rank, listed, n_ranks);
  if (global >= 0) {
    while (info.global_ranks_size() <= rank) info.add_global_ranks(-1);
    info.set_global_ranks(rank, global);
  }
  return info;
}

v1::RankLifecycle Died(const std::string& job, uint32_t pid, int32_t global) {
  v1::RankLifecycle l;
  l.set_kind(v1::RankLifecycle::KIND_DIED);
  l.set_job_id(job);
  l.set_pid(pid);
  l.set_global_rank(global);
  return l;
}

std::unique_ptr<DetectionEngine> Engine(Clock* clock) {
  DetectionEngine::Options o;
  o.max_members = 1000;
  o.max_members_per_host = 100;
  o.max_members_per_job = 300;
  o.max_comms = 100;
  o.max_comms_per_host = 50;
  o.max_comms_per_job = 80;
  auto e = DetectionEngine::Create(clock, o);
  EXPECT_TRUE(e.ok());
  return std::move(*e);
}

// `victim` runs on host b: communicator 1, ranks 0 and 1 (pids 100, 101,
// global ranks 0 and 1).
void StartVictim(DetectionEngine* e) {
  ASSERT_TRUE(e->AddCommunicator("b", Comm(1, "victim", 0, 2, 0)).ok());
  ASSERT_TRUE(e->AddCommunicator("b", Comm(1, "victim", 1, 2, 1)).ok());
}

int Count(const CycleResult& r, v1::FaultClass cls) {
  int n = 0;
  for (const v1::Fault& f : r.faults) n += f.fault_class() == cls ? 1 : 0;
  return n;
}

// F2: deaths of processes host c is not known to hold.
TEST(IsolationTest, NoForgedDeathInAnotherJob) {
  FakeClock clock;
  auto e = Engine(&clock);
  StartVictim(e.get());
  // No global rank, no communicator.
  absl::Status s = e->AddLifecycle("c", Died("victim", 7, -1));
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("no live member"));
  // A rank no live member holds (rank 7 of a 2-rank job).
  s = e->AddLifecycle("c", Died("victim", 7, 7));
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  // A brand-new communicator carried by the death record itself.
  v1::RankLifecycle fresh = Died("victim", 7, 5);
  *fresh.add_communicators() = Comm(9, "victim", 0, 2, 5);
  s = e->AddLifecycle("c", fresh);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  // A live process of host c, but of another job.
  ASSERT_TRUE(e->AddCommunicator("c", Comm(10, "evil", 3, 4, 3)).ok());
  s = e->AddLifecycle("c", Died("victim", 103, 3));
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  // A communicator creation failure naming b's live global rank 0.
  v1::RankLifecycle failed;
  failed.set_kind(v1::RankLifecycle::KIND_COMM_INIT_FAILED);
  failed.set_job_id("victim");
  failed.set_pid(8);
  failed.set_global_rank(0);
  s = e->AddLifecycle("c", failed);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_EQ(e->stats().deaths_refused, 5u);
  CycleResult r = e->RunCycle();
  EXPECT_EQ(Count(r, v1::FAULT_CLASS_PROCESS_DIED), 0);
  EXPECT_EQ(Count(r, v1::FAULT_CLASS_CONFIG), 0);

  // The real death of b's rank 1 is one fault, reported once.
  ASSERT_TRUE(e->AddLifecycle("b", Died("victim", 101, 1)).ok());
  ASSERT_TRUE(e->AddLifecycle("b", Died("victim", 101, 1)).ok());
  clock.Advance(absl::Milliseconds(500));
  r = e->RunCycle();
  ASSERT_EQ(Count(r, v1::FAULT_CLASS_PROCESS_DIED), 1);
  EXPECT_EQ(r.faults[0].suspects(0).host(), "b");
  EXPECT_EQ(r.faults[0].suspects_size(), 1);
  // A failed creation of a rank nobody holds is host c's to report; its
  // process's death then is part of that fault.
  failed.set_global_rank(5);
  ASSERT_TRUE(e->AddLifecycle("c", failed).ok());
  ASSERT_TRUE(e->AddLifecycle("c", Died("victim", 8, 5)).ok());
  EXPECT_EQ(e->stats().deaths_refused, 5u);
}

// A death reported after its communicator was retired (a migration
// replaced it, a new generation formed) is still its host's own.
TEST(IsolationTest, ADeathAfterItsCommunicatorWasRetiredIsKnown) {
  FakeClock clock;
  auto e = Engine(&clock);
  StartVictim(e.get());
  e->RetireComms({1}, "migration committed");
  e->RunCycle();
  v1::Communicator c;
  ASSERT_FALSE(e->GetCommunicator(1, &c));
  EXPECT_TRUE(e->AddLifecycle("b", Died("victim", 100, 0)).ok());
  EXPECT_TRUE(
      absl::IsPermissionDenied(e->AddLifecycle("c", Died("victim", 101, 1))));
  clock.Advance(absl::Milliseconds(500));
  EXPECT_EQ(Count(e->RunCycle(), v1::FAULT_CLASS_PROCESS_DIED), 1);
}

// F3: host b's agent reconnects within the grace; its live ranks stay its
// own meanwhile.
TEST(IsolationTest, RanksMoveOnlyOnceTheirHostIsGoneForTheGrace) {
  FakeClock clock;
  auto e = Engine(&clock);
  StartVictim(e.get());
  // Host c runs a process of victim too (global rank 0 in its own
  // communicator, as a restarted rank would).
  ASSERT_TRUE(e->AddCommunicator("c", Comm(2, "victim", 0, 1, 0)).ok());
  e->NodeLost("b");
  clock.Advance(absl::Milliseconds(500));
  absl::Status s = e->AddLifecycle("c", Died("victim", 100, 0));
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("live process on host b"));
  s = e->AddCommunicator("c", Comm(1, "victim", 0, 2, 0));
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_EQ(e->stats().deaths_refused, 1u);
  EXPECT_EQ(e->stats().claims_refused, 1u);
  // b comes back and goes again: the grace counts afresh.
  e->NodeBack("b");
  clock.Advance(absl::Seconds(40));
  e->NodeLost("b");
  clock.Advance(absl::Seconds(10));
  s = e->AddCommunicator("c", Comm(1, "victim", 0, 2, 0));
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_EQ(Count(e->RunCycle(), v1::FAULT_CLASS_PROCESS_DIED), 0);
  // Gone for the grace: a rank restarted on c may be reported from there.
  clock.Advance(absl::Seconds(30));
  EXPECT_TRUE(e->AddCommunicator("c", Comm(1, "victim", 0, 2, 0)).ok());
  v1::Communicator c;
  ASSERT_TRUE(e->GetCommunicator(1, &c));
  EXPECT_EQ(c.members(0).host(), "c");
}

// A rank past a communicator's known size, in a record that names no size,
// is refused: it was a foothold from which its host could then resize the
// communicator (AdversarialInputTest's storm made the good job's 2-rank
// communicator 2^20 ranks wide that way, and no collective joined again).
TEST(IsolationTest, NoFootholdPastACommunicatorsSize) {
  FakeClock clock;
  auto e = Engine(&clock);
  StartVictim(e.get());
  absl::Status s = e->AddCommunicator("c", Comm(1, "victim", 7, 0));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  s = e->AddCommunicator("c", Comm(1, "victim", 7, 1 << 20));
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  v1::Communicator c;
  ASSERT_TRUE(e->GetCommunicator(1, &c));
  EXPECT_EQ(c.n_ranks(), 2);
  EXPECT_EQ(c.members_size(), 2);
}

// F5: five hosts running none of victim's ranks claim members of victim.
TEST(IsolationTest, FiveHostsCannotFillAnotherJobsShare) {
  FakeClock clock;
  auto e = Engine(&clock);
  for (int h = 0; h < 5; ++h) {
    const std::string host = "evil" + std::to_string(h);
    for (uint64_t k = 0; k < 4; ++k) {
      // 4 communicators of 25 listed ranks each: the host's whole share.
      (void)e->AddCommunicator(
          host, Comm(100 + 10 * h + k, "victim", 0, 1024, -1, 25));
    }
  }
  EXPECT_GT(e->stats().members_refused, 0u);
  // victim's own host gets its members.
  ASSERT_TRUE(e->AddCommunicator("b", Comm(1, "victim", 0, 2, 0, 2)).ok());
  v1::Communicator c;
  ASSERT_TRUE(e->GetCommunicator(1, &c));
  EXPECT_EQ(c.members_size(), 2);
}

// F5: records of no job are each host's own bucket, not one bucket every
// id-less job shares.
TEST(IsolationTest, RecordsOfNoJobAreTheirHostsOwn) {
  FakeClock clock;
  auto e = Engine(&clock);
  for (int h = 0; h < 5; ++h) {
    const std::string host = "evil" + std::to_string(h);
    for (uint64_t k = 0; k < 4; ++k) {
      (void)e->AddCommunicator(host,
                               Comm(100 + 10 * h + k, "", 0, 1024, -1, 25));
    }
  }
  ASSERT_TRUE(e->AddCommunicator("b", Comm(1, "", 0, 2, 0, 2)).ok());
  v1::Communicator c;
  ASSERT_TRUE(e->GetCommunicator(1, &c));
  EXPECT_EQ(c.members_size(), 2);
}

// Issue #33 N6: 40 processes of no job (anonymous tenants, each with a
// communicator of its own) dropped without goodbye were 40 PROCESS_DIED
// CONFIRMED faults of job ''. Deaths of no job fold per host like one
// job's deaths do: one fault per host and episode.
TEST(IsolationTest, DeathsOfNoJobFoldIntoOneFaultPerHost) {
  FakeClock clock;
  // The default budgets: the test engine's share of a host and job is 5.
  auto created = DetectionEngine::Create(&clock, DetectionEngine::Options{});
  ASSERT_TRUE(created.ok());
  std::unique_ptr<DetectionEngine> e = std::move(*created);
  for (int i = 0; i < 40; ++i) {
    v1::CommunicatorInfo c = Comm(500 + i, "", 0, 2);
    c.set_pid(1000 + i);
    absl::Status s = e->AddCommunicator("evil", c);
    ASSERT_TRUE(s.ok()) << i << " " << s;
  }
  v1::CommunicatorInfo other = Comm(600, "", 0, 2);
  other.set_pid(2000);
  ASSERT_TRUE(e->AddCommunicator("c", other).ok());
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(e->AddLifecycle("evil", Died("", 1000 + i, -1)).ok());
  }
  ASSERT_TRUE(e->AddLifecycle("c", Died("", 2000, -1)).ok());
  clock.Advance(absl::Milliseconds(500));
  const CycleResult r = e->RunCycle();
  ASSERT_EQ(Count(r, v1::FAULT_CLASS_PROCESS_DIED), 2);
  for (const v1::Fault& f : r.faults) {
    if (f.suspects(0).host() != "evil") continue;
    EXPECT_EQ(f.suspects_size(), 16);  // kMaxFoldedSuspects
    EXPECT_THAT(f.summary(),
                HasSubstr("39 more process(es) of no job on evil"));
  }
}

// Attacker round 18, R18-2: a process of another job on host b with the
// same pid as the victim's rank 0 (its own pid namespace, another
// container) dies. Its death marked the victim's members dead (the victim's
// hangs cleared as "consequence of a process death") and hid the victim's
// real death (DiedBefore). A death applies only to the members its own
// process registered, in its own job.
TEST(IsolationTest, ADeathOfAnotherJobsProcessWithAnEqualPidIsNotTheVictims) {
  FakeClock clock;
  auto e = Engine(&clock);
  StartVictim(e.get());  // pids 100, 101 on b
  v1::CommunicatorInfo own = Comm(2, "mallory", 0, 1, 0);
  own.set_pid(100);
  ASSERT_TRUE(e->AddCommunicator("b", own).ok());
  ASSERT_TRUE(e->AddLifecycle("b", Died("mallory", 100, 0)).ok());
  clock.Advance(absl::Milliseconds(500));
  CycleResult r = e->RunCycle();
  ASSERT_EQ(Count(r, v1::FAULT_CLASS_PROCESS_DIED), 1);
  for (const v1::Fault& f : r.faults) {
    if (f.fault_class() != v1::FAULT_CLASS_PROCESS_DIED) continue;
    EXPECT_EQ(f.job_id(), "mallory");
    EXPECT_EQ(f.comm_hash(), 2u);
    EXPECT_EQ(f.victims_size(), 0) << f.DebugString();
  }
  // The victim's rank 0 really dies now: its own fault, in its own job.
  clock.Advance(absl::Seconds(30));
  ASSERT_TRUE(e->AddLifecycle("b", Died("victim", 100, 0)).ok());
  clock.Advance(absl::Milliseconds(500));
  r = e->RunCycle();
  int victims = 0;
  for (const v1::Fault& f : r.faults) {
    if (f.fault_class() != v1::FAULT_CLASS_PROCESS_DIED) continue;
    if (f.job_id() != "victim") continue;
    ++victims;
    EXPECT_EQ(f.comm_hash(), 1u);
    EXPECT_EQ(f.victims_size(), 1);
  }
  EXPECT_EQ(victims, 1);
}

// Attacker round 18, R18-5: a process of no job on host c reported a
// not-yet-reported rank of job gr's communicator (its records name no
// job) and held it after it exited; the real rank was refused. A record
// of no job registers no member of a job's communicator.
TEST(IsolationTest, AProcessOfNoJobHoldsNoRankOfAJobsCommunicator) {
  FakeClock clock;
  auto e = Engine(&clock);
  // Job gr: communicator 0xc0 of 3 ranks, ranks 0 and 1 on host a, each
  // listing the 3 global ranks.
  for (int32_t r = 0; r < 2; ++r) {
    ASSERT_TRUE(e->AddCommunicator("a", Comm(0xc0, "gr", r, 3, -1, 3)).ok());
  }
  const uint64_t refused = e->stats().claims_refused;
  absl::Status s = e->AddCommunicator("c", Comm(0xc0, "", 2, 3));
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("a process of no job"));
  v1::CollectiveSummary summary;
  summary.set_comm_hash(0xc0);
  summary.set_rank(2);
  summary.set_pid(777);
  summary.set_func(v1::COLL_FUNC_ALL_REDUCE);
  summary.set_seq_number(1);
  s = e->AddSummary("c", summary);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  v1::RankProgress progress;
  progress.set_comm_hash(0xc0);
  progress.set_rank(2);
  progress.set_pid(777);
  progress.set_func(v1::COLL_FUNC_ALL_REDUCE);
  s = e->AddProgress("c", progress);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_EQ(e->stats().claims_refused, refused + 3);
  // The real rank 2 (host b) registers.
  s = e->AddCommunicator("b", Comm(0xc0, "gr", 2, 3, -1, 3));
  EXPECT_TRUE(s.ok()) << s;
  v1::Communicator c;
  ASSERT_TRUE(e->GetCommunicator(0xc0, &c));
  for (const v1::MemberLocation& m : c.members()) {
    EXPECT_NE(m.host(), "c") << m.DebugString();
  }
}

// Round 20 (left open by R18-5's fix): a process of no job on host c
// reports rank 2 of communicator 0xc1 BEFORE any record of its job gr
// arrived (its hash read off /metrics, N7): the communicator had no job, so
// the member was registered, and the real rank 2 (host b) was then refused
// as "held by a live process on host c" until c's stream ended. The job's
// record supersedes a member registered by records of no job; what the
// jobless process reported for the rank (made-up durations) is dropped.
TEST(IsolationTest, AJobsRecordSupersedesARankAProcessOfNoJobReportedFirst) {
  FakeClock clock;
  auto e = Engine(&clock);
  ASSERT_TRUE(e->AddCommunicator("c", Comm(0xc1, "", 2, 3)).ok());
  v1::CollectiveSummary summary;
  summary.set_comm_hash(0xc1);
  summary.set_rank(2);
  summary.set_pid(102);
  summary.set_func(v1::COLL_FUNC_ALL_REDUCE);
  summary.set_seq_number(1);
  summary.set_kernel_duration_ns(5'000'000'000);  // made up: 5 s
  ASSERT_TRUE(e->AddSummary("c", summary).ok());
  // Job gr's ranks 0 and 1 (host a) come: the communicator is gr's.
  for (int32_t r = 0; r < 2; ++r) {
    ASSERT_TRUE(e->AddCommunicator("a", Comm(0xc1, "gr", r, 3, -1, 3)).ok());
  }
  // Once the job is known, the jobless member adds nothing.
  summary.set_seq_number(2);
  absl::Status s = e->AddSummary("c", summary);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  // The real rank 2 (host b) registers.
  s = e->AddCommunicator("b", Comm(0xc1, "gr", 2, 3, -1, 3));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(e->stats().jobless_superseded, 1u);
  v1::Communicator c;
  ASSERT_TRUE(e->GetCommunicator(0xc1, &c));
  bool rank2_on_b = false;
  for (const v1::MemberLocation& m : c.members()) {
    EXPECT_NE(m.host(), "c") << m.DebugString();
    rank2_on_b |= m.comm_rank() == 2 && m.host() == "b";
  }
  EXPECT_TRUE(rank2_on_b) << c.DebugString();
  // The made-up summary of seq 1 is gone: collective 1 joins when the
  // real rank 2 reports it, not with ranks 0 and 1 alone.
  const uint64_t joined = e->stats().collectives_joined;
  summary.set_seq_number(1);
  summary.set_kernel_duration_ns(1'000'000);
  for (int32_t r = 0; r < 2; ++r) {
    summary.set_rank(r);
    summary.set_pid(100 + r);
    ASSERT_TRUE(e->AddSummary("a", summary).ok());
  }
  EXPECT_EQ(e->stats().collectives_joined, joined);
  summary.set_rank(2);
  summary.set_pid(102);
  ASSERT_TRUE(e->AddSummary("b", summary).ok());
  EXPECT_EQ(e->stats().collectives_joined, joined + 1);
  // The jobless process's records for the rank are refused now.
  s = e->AddCommunicator("c", Comm(0xc1, "", 2, 3));
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  summary.set_seq_number(3);
  s = e->AddSummary("c", summary);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
}

}  // namespace
}  // namespace pitstop::controller
