// Issue #33 on the engine (FakeClock): budgets shared per host and per job
// under the cluster ceiling (tenant_budget.h), given back when a host is
// forgotten; records for another host's members and deaths refused and
// counted (docs/reliability.md, "Trust model").
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pitstop/clock.h"
#include "src/controller/detect/detection_engine.h"
#include "tests/controller/listed_comm.h"

namespace pitstop::controller {
namespace {

using ::testing::HasSubstr;
using testing::ListedComm;

// Member `rank` of `hash` in `job`, listing `listed` global ranks.
std::unique_ptr<DetectionEngine> Engine(Clock* clock) {
  DetectionEngine::Options o;
  o.max_members = 1000;
  o.max_members_per_host = 100;
  o.max_members_per_job = 300;
  o.max_comms = 50;
  o.max_comms_per_host = 20;
  o.max_comms_per_job = 10;
  o.max_join_entries = 1000;
  o.max_join_entries_per_host = 4;
  o.max_join_entries_per_job = 1000;
  // A host's share of one job as large as its whole share: these tests
  // are about the host's and the job's (isolation_test.cc: the former).
  o.max_members_per_host_job = o.max_members_per_host;
  o.max_comms_per_host_job = o.max_comms_per_host;
  o.max_join_entries_per_host_job = o.max_join_entries_per_host;
  auto e = DetectionEngine::Create(clock, o);
  EXPECT_TRUE(e.ok());
  return std::move(*e);
}

TEST(TenantShareTest, AHostUsesUpItsOwnMembersShareOnly) {
  FakeClock clock;
  auto e = Engine(&clock);
  // A list longer than the host's share is refused whole.
  absl::Status s = e->AddCommunicator("evil", ListedComm(1, "evil", 0, 500));
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("max_members_per_host"));
  v1::Communicator c;
  ASSERT_TRUE(e->GetCommunicator(1, &c));
  EXPECT_EQ(c.members_size(), 1);
  // Lists that fit, until the share is used up: 1 + 3 x 33 = 100.
  for (uint64_t h = 2; h <= 4; ++h) {
    ASSERT_TRUE(e->AddCommunicator("evil", ListedComm(h, "evil", 0, 33)).ok())
        << h;
  }
  EXPECT_EQ(e->stats().ranks, 100u);
  s = e->AddCommunicator("evil", ListedComm(5, "evil"));
  EXPECT_THAT(s.message(), HasSubstr("max_members_per_host"));
  EXPECT_EQ(e->stats().members_refused_host, 2u);
  // Another host has its own share.
  EXPECT_TRUE(e->AddCommunicator("good", ListedComm(6, "good", 0, 50)).ok());
  EXPECT_EQ(e->stats().ranks, 150u);
}

TEST(TenantShareTest, AJobUsesUpItsOwnShareAcrossHosts) {
  FakeClock clock;
  auto e = Engine(&clock);
  for (int h = 0; h < 3; ++h) {
    ASSERT_TRUE(e->AddCommunicator(absl::StrCat("h", h),
                                   ListedComm(10 + h, "big", 0, 100))
                    .ok());
  }
  absl::Status s = e->AddCommunicator("h3", ListedComm(20, "big", 0, 2));
  EXPECT_THAT(s.message(), HasSubstr("max_members_per_job"));
  EXPECT_EQ(e->stats().members_refused_job, 1u);
  EXPECT_TRUE(e->AddCommunicator("h3", ListedComm(21, "small", 0, 2)).ok());
  // Communicators: 10 per job.
  for (uint64_t h = 30; h < 40; ++h) {
    ASSERT_TRUE(e->AddCommunicator("h4", ListedComm(h, "many")).ok()) << h;
  }
  s = e->AddCommunicator("h4", ListedComm(40, "many"));
  EXPECT_THAT(s.message(), HasSubstr("max_comms_per_job"));
  EXPECT_EQ(e->stats().comms_refused_job, 1u);
}

TEST(TenantShareTest, OpenJoinsAreChargedToTheirMembersHost) {
  FakeClock clock;
  auto e = Engine(&clock);
  ASSERT_TRUE(e->AddCommunicator("evil", ListedComm(1, "j", 0, 0, 2)).ok());
  ASSERT_TRUE(e->AddCommunicator("good", ListedComm(1, "j", 1, 0, 2)).ok());
  v1::CollectiveSummary sum;
  sum.set_comm_hash(1);
  sum.set_func(v1::COLL_FUNC_ALL_REDUCE);
  sum.set_kernel_duration_ns(1000);
  // Rank 0 opens joins no one completes: its host's 4 entries, no more.
  for (uint64_t seq = 0; seq < 5; ++seq) {
    sum.set_seq_number(seq);
    absl::Status s = e->AddSummary("evil", sum);
    EXPECT_EQ(s.ok(), seq < 4) << seq << " " << s;
  }
  EXPECT_EQ(e->stats().summaries_refused_host, 1u);
  // Rank 1's host completes them: joined, and evil's entries are free.
  sum.set_rank(1);
  for (uint64_t seq = 0; seq < 4; ++seq) {
    sum.set_seq_number(seq);
    absl::Status st = e->AddSummary("good", sum);
    ASSERT_TRUE(st.ok()) << seq << " " << st;
  }
  EXPECT_EQ(e->stats().collectives_joined, 4u);
  EXPECT_EQ(e->stats().join_entries, 0u);
}

TEST(TenantShareTest, AForgottenHostGivesItsShareBack) {
  FakeClock clock;
  auto e = Engine(&clock);
  ASSERT_TRUE(e->AddCommunicator("evil", ListedComm(1, "evil", 0, 99)).ok());
  ASSERT_TRUE(e->AddCommunicator("good", ListedComm(2, "good", 0, 2)).ok());
  ASSERT_TRUE(e->AddCommunicator("evil", ListedComm(2, "good", 1)).ok());
  e->ForgetNode("evil");
  e->RunCycle();
  // Its own communicator is gone; the one another host reports stays.
  v1::Communicator c;
  EXPECT_FALSE(e->GetCommunicator(1, &c));
  EXPECT_TRUE(e->GetCommunicator(2, &c));
  EXPECT_EQ(e->stats().ranks, 2u);
  EXPECT_TRUE(e->AddCommunicator("evil", ListedComm(3, "evil", 0, 99)).ok());
}

TEST(TenantShareTest, RecordsForAnotherHostAreRefusedAndCounted) {
  FakeClock clock;
  auto e = Engine(&clock);
  ASSERT_TRUE(e->AddCommunicator("b", ListedComm(1, "j", 0, 2, 2)).ok());
  // Naming another host.
  v1::CommunicatorInfo named = ListedComm(1, "j", 1, 0, 2);
  named.set_host("c");
  absl::Status s = e->AddCommunicator("a", named);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("communicator.host"));
  // A member a live process on host b holds.
  s = e->AddCommunicator("a", ListedComm(1, "j", 0, 0, 2));
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("held by a live process on host b"));
  // Another job for a communicator whose job is known.
  s = e->AddCommunicator("a", ListedComm(1, "other", 1, 0, 2));
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  // The death of host b's global rank 0.
  v1::RankLifecycle died;
  died.set_kind(v1::RankLifecycle::KIND_DIED);
  died.set_job_id("j");
  died.set_pid(7);
  died.set_global_rank(0);
  s = e->AddLifecycle("a", died);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_EQ(e->stats().claims_refused, 3u);
  EXPECT_EQ(e->stats().deaths_refused, 1u);
  EXPECT_TRUE(e->RunCycle().faults.empty());
  v1::Communicator c;
  ASSERT_TRUE(e->GetCommunicator(1, &c));
  for (const auto& m : c.members()) EXPECT_NE(m.host(), "c");
  // Once host b's agent is gone (for the handover grace), its rank may be
  // reported from elsewhere (a rank restarted on another node).
  e->NodeLost("b");
  clock.Advance(DetectionEngine::Options().handover_grace);
  EXPECT_TRUE(e->AddCommunicator("a", ListedComm(1, "j", 0, 0, 2)).ok());
}

TEST(TenantShareTest, AHostHoldingNoMemberCannotResizeACommunicator) {
  FakeClock clock;
  auto e = Engine(&clock);
  for (const std::string job : {"j", ""}) {
    const uint64_t hash = job.empty() ? 2 : 1;
    ASSERT_TRUE(e->AddCommunicator("b", ListedComm(hash, job, 0, 0, 2)).ok());
    ASSERT_TRUE(e->AddCommunicator("b", ListedComm(hash, job, 1, 0, 2)).ok());
    // A record of a fresh rank that would make the communicator 2^20
    // ranks wide: no collective of b's two ranks would ever join again.
    absl::Status s = e->AddCommunicator(
        "a", ListedComm(hash, job, kMaxRanks - 1, 0, kMaxRanks));
    EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("may not resize it to 1048576"));
    v1::Communicator c;
    ASSERT_TRUE(e->GetCommunicator(hash, &c));
    EXPECT_EQ(c.n_ranks(), 2);
    EXPECT_EQ(c.members_size(), 2);
  }
  EXPECT_EQ(e->stats().claims_refused, 2u);
  // A host holding a live member may report another size.
  ASSERT_TRUE(e->AddCommunicator("b", ListedComm(1, "j", 2, 0, 4)).ok());
  // Once b's agent is gone (for the handover grace), another host may
  // report the communicator anew.
  e->NodeLost("b");
  clock.Advance(DetectionEngine::Options().handover_grace);
  EXPECT_TRUE(e->AddCommunicator("a", ListedComm(1, "j", 3, 0, 8)).ok());
}

}  // namespace
}  // namespace pitstop::controller
