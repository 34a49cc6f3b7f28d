// Issue #33, round 21 (an attacker hour on the engine, FakeClock): what a
// host may say about members another host holds (docs/reliability.md,
// "Round 21: an attacker hour").
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "pitstop/clock.h"
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

}  // namespace
}  // namespace pitstop::controller
