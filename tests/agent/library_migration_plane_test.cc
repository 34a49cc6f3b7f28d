// The agent relay (migration.data_plane "library") on a real AgentCore with
// recording rank streams: which ranks get which RankMigrationDirective,
// how their answers fold into one MigrationAck per host, a joiner's
// directive waiting for its process, repeats, and failures naming the rank.
#include "src/agent/library_migration_plane.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pitstop/clock.h"
#include "pitstop/sync.h"

namespace pitstop::agent {
namespace {

using Phase = v1::MigrationDirective;
using RankDirective = v1::RankMigrationDirective;

class RecordingSink final : public CommandSink {
 public:
  void SendResponse(const v1::StreamTelemetryResponse& r) override {
    MutexLock lock(&mu_);
    for (const auto& d : r.migration_directive()) got_.push_back(d);
  }
  std::vector<RankDirective> got() {
    MutexLock lock(&mu_);
    return got_;
  }

 private:
  Mutex mu_;
  std::vector<RankDirective> got_ ABSL_GUARDED_BY(mu_);
};

class LibraryMigrationPlaneTest : public ::testing::Test {
 protected:
  LibraryMigrationPlaneTest()
      : core_(Clock::Real(), Options(), nullptr),
        plane_(&core_,
               [this](const v1::MigrationAck& a) { acks_.push_back(a); }) {}

  static AgentCoreOptions Options() {
    AgentCoreOptions o;
    o.host = "h";
    return o;
  }
  // A rank process connects and says hello.
  uint64_t Connect(const std::string& job, int32_t rank) {
    sinks_.push_back(std::make_unique<RecordingSink>());
    const uint64_t s = core_.OpenStream(sinks_.back().get());
    v1::StreamTelemetryRequest req;
    v1::ProcessHello* h = req.mutable_hello();
    h->set_host("h");
    h->set_pid(1000 + static_cast<uint32_t>(sinks_.size()));
    h->set_job_id(job);
    h->set_global_rank(rank);
    h->set_start_unix_ns(1);
    EXPECT_TRUE(core_.OnMessage(s, req).ok());
    stream_sink_[s] = sinks_.back().get();
    return s;
  }
  std::vector<RankDirective> Got(uint64_t stream) {
    return stream_sink_.at(stream)->got();
  }
  void Answer(uint64_t stream, const RankDirective& d, bool ok = true,
              uint64_t progress = 0) {
    v1::StreamTelemetryRequest req;
    v1::RankMigrationAck* a = req.add_migration_acks();
    a->set_migration_id(d.migration_id());
    a->set_epoch(d.epoch());
    a->set_phase(d.phase());
    a->set_ok(ok);
    a->set_global_rank(d.global_rank());
    a->set_progress_seq(progress);
    if (!ok) a->set_error("ncclCommInitRankConfig: remote process exited");
    if (d.phase() == RankDirective::PHASE_MAKE_IDS) {
      if (d.make_comm_ids()) {
        for (const auto& c : d.comms()) {
          auto* m = a->add_made_comms();
          m->set_old_comm_hash(c.old_comm_hash());
          m->set_new_comm_id(std::string(128, 'c'));
        }
      }
      a->set_made_transfer_id(std::string(128, 'a' + d.global_rank()));
    }
    ASSERT_TRUE(core_.OnMessage(stream, req).ok());
  }
  static v1::MigrationDirective Directive(Phase::Phase phase,
                                          v1::MigrationRole role) {
    v1::MigrationDirective d;
    d.set_phase(phase);
    d.set_migration_id("M1");
    d.set_job_id("j");
    d.set_epoch(1);
    d.set_role(role);
    d.set_switch_comm_hash(0xA1);
    d.add_moved_global_ranks(4);
    d.add_moved_global_ranks(5);
    auto* c = d.add_comms();
    c->set_old_comm_hash(0xA1);
    c->set_comm_name("world");
    if (phase != Phase::PHASE_MAKE_IDS) c->set_new_comm_id("ID-A1");
    for (int r : {4, 5}) {
      auto* t = d.add_transfers();
      t->set_global_rank(r);
      t->set_comm_id(absl::StrCat("T", r));
    }
    return d;
  }

  AgentCore core_;
  std::vector<v1::MigrationAck> acks_;
  LibraryMigrationPlane plane_;
  std::vector<std::unique_ptr<RecordingSink>> sinks_;
  std::map<uint64_t, RecordingSink*> stream_sink_;
};

TEST_F(LibraryMigrationPlaneTest, StayerRanksEachGetTheirDirectiveAndFold) {
  const uint64_t a = Connect("j", 0), b = Connect("j", 1);
  const uint64_t other = Connect("other-job", 0);
  plane_.OnDirective(
      Directive(Phase::PHASE_PREPARE, v1::MIGRATION_ROLE_STAYER));
  ASSERT_EQ(Got(a).size(), 1u);
  ASSERT_EQ(Got(b).size(), 1u);
  EXPECT_TRUE(Got(other).empty());
  const RankDirective da = Got(a)[0];
  EXPECT_EQ(da.global_rank(), 0);
  EXPECT_EQ(da.role(), RankDirective::ROLE_STAYER);
  EXPECT_EQ(da.comms(0).new_comm_id(), "ID-A1");
  EXPECT_TRUE(da.transfer_comm_id().empty());  // a stayer moves no state
  Answer(a, da, true, 70);
  EXPECT_TRUE(acks_.empty()) << "answered before rank 1";
  Answer(b, Got(b)[0], true, 90);
  ASSERT_EQ(acks_.size(), 1u);
  EXPECT_TRUE(acks_[0].ok());
  EXPECT_EQ(acks_[0].phase(), Phase::PHASE_PREPARE);
  EXPECT_EQ(acks_[0].progress_seq(), 90u);
  EXPECT_EQ(acks_[0].global_ranks_size(), 2);
  // A repeat (reconnect, restarted controller) is answered again, not
  // relayed again.
  plane_.OnDirective(
      Directive(Phase::PHASE_PREPARE, v1::MIGRATION_ROLE_STAYER));
  EXPECT_EQ(acks_.size(), 2u);
  EXPECT_EQ(Got(a).size(), 1u);
}

TEST_F(LibraryMigrationPlaneTest, JoinerDirectivesWaitForTheJoinerProcesses) {
  plane_.OnDirective(
      Directive(Phase::PHASE_MAKE_IDS, v1::MIGRATION_ROLE_JOINER));
  EXPECT_TRUE(acks_.empty());
  const uint64_t j5 = Connect("j", 5);
  const uint64_t j4 = Connect("j", 4);
  ASSERT_EQ(Got(j4).size(), 1u);
  ASSERT_EQ(Got(j5).size(), 1u);
  // The lowest moved rank makes the communicators' ids.
  EXPECT_TRUE(Got(j4)[0].make_comm_ids());
  EXPECT_FALSE(Got(j5)[0].make_comm_ids());
  EXPECT_EQ(Got(j4)[0].role(), RankDirective::ROLE_JOINER);
  Answer(j5, Got(j5)[0]);
  Answer(j4, Got(j4)[0]);
  ASSERT_EQ(acks_.size(), 1u);
  const v1::MigrationAck& ids = acks_[0];
  EXPECT_TRUE(ids.ok());
  ASSERT_EQ(ids.made_comms_size(), 1);
  EXPECT_EQ(ids.made_comms(0).old_comm_hash(), 0xA1u);
  EXPECT_EQ(ids.made_comms(0).comm_name(), "world");
  EXPECT_EQ(ids.made_comms(0).new_comm_id(), std::string(128, 'c'));
  ASSERT_EQ(ids.made_transfers_size(), 2);
  for (const auto& t : ids.made_transfers()) {
    EXPECT_EQ(t.comm_id(), std::string(128, 'a' + t.global_rank()));
  }
  // PREPARE carries each joiner's own transfer id.
  plane_.OnDirective(
      Directive(Phase::PHASE_PREPARE, v1::MIGRATION_ROLE_JOINER));
  ASSERT_EQ(Got(j5).size(), 2u);
  EXPECT_EQ(Got(j5)[1].transfer_comm_id(), "T5");
  EXPECT_EQ(Got(j4)[1].transfer_comm_id(), "T4");
}

TEST_F(LibraryMigrationPlaneTest, ARankFailingFailsTheHostNamingTheRank) {
  const uint64_t a = Connect("j", 2), b = Connect("j", 3);
  plane_.OnDirective(
      Directive(Phase::PHASE_PREPARE, v1::MIGRATION_ROLE_LEAVER));
  Answer(b, Got(b)[0], /*ok=*/false);
  ASSERT_EQ(acks_.size(), 1u);
  EXPECT_FALSE(acks_[0].ok());
  EXPECT_EQ(acks_[0].error(),
            "rank 3: ncclCommInitRankConfig: remote process exited");
  Answer(a, Got(a)[0]);  // a later ok does not answer again
  EXPECT_EQ(acks_.size(), 1u);
}

TEST_F(LibraryMigrationPlaneTest, NoRankOrNoRankNumberIsAFailureNotAHang) {
  plane_.OnDirective(
      Directive(Phase::PHASE_PREPARE, v1::MIGRATION_ROLE_STAYER));
  ASSERT_EQ(acks_.size(), 1u);
  EXPECT_FALSE(acks_[0].ok());
  EXPECT_NE(acks_[0].error().find("no rank of job j"), std::string::npos);

  LibraryMigrationPlaneTest::Connect("k", -1);
  v1::MigrationDirective d =
      Directive(Phase::PHASE_PREPARE, v1::MIGRATION_ROLE_STAYER);
  d.set_job_id("k");
  plane_.OnDirective(d);
  ASSERT_EQ(acks_.size(), 2u);
  EXPECT_FALSE(acks_[1].ok());
  EXPECT_NE(acks_[1].error().find("set RANK"), std::string::npos);
}

TEST_F(LibraryMigrationPlaneTest, CommitAndAbortAreRelayedNotAnswered) {
  const uint64_t a = Connect("j", 0);
  plane_.OnDirective(
      Directive(Phase::PHASE_PREPARE, v1::MIGRATION_ROLE_STAYER));
  plane_.OnDirective(Directive(Phase::PHASE_ABORT, v1::MIGRATION_ROLE_STAYER));
  ASSERT_EQ(Got(a).size(), 2u);
  EXPECT_EQ(Got(a)[1].phase(), RankDirective::PHASE_ABORT);
  EXPECT_TRUE(acks_.empty());
  // A rank connecting after the abort gets nothing to start.
  const uint64_t late = Connect("j", 1);
  EXPECT_TRUE(Got(late).empty());
}

TEST_F(LibraryMigrationPlaneTest,
       FromReplicaStayerSourcesGetTheTransferAndLowestStepCounts) {
  const uint64_t a = Connect("j", 8), b = Connect("j", 9);
  v1::MigrationDirective d =
      Directive(Phase::PHASE_PREPARE, v1::MIGRATION_ROLE_STAYER);
  d.set_from_replica(true);
  d.mutable_transfers(0)->set_source_global_rank(9);   // moved rank 4
  d.mutable_transfers(1)->set_source_global_rank(10);  // elsewhere
  plane_.OnDirective(d);
  ASSERT_EQ(Got(a).size(), 1u);
  ASSERT_EQ(Got(b).size(), 1u);
  EXPECT_TRUE(Got(a)[0].from_replica());
  EXPECT_TRUE(Got(a)[0].transfer_comm_id().empty());
  EXPECT_EQ(Got(b)[0].transfer_comm_id(), "T4");
  Answer(a, Got(a)[0], true, 57);
  Answer(b, Got(b)[0], true, 56);
  ASSERT_EQ(acks_.size(), 1u);
  EXPECT_EQ(acks_[0].progress_seq(), 56u) << "the lowest failed step";
}

}  // namespace
}  // namespace pitstop::agent
