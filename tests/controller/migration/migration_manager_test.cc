// The migration state machine on a FakeClock and a real SQLite file: every
// phase timing out, member failure, joiner/leaver death, a restart
// mid-migration (a new manager on the same database) and queueing.
#include "src/controller/migration/migration_manager.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "pitstop/clock.h"
#include "src/controller/store/fault_store.h"

namespace pitstop::controller {
namespace {

using Phase = v1::MigrationDirective;

// The agents' side: records what each host was told; hosts in `down` are not
// connected.
class RecordingSender final : public MigrationSender {
 public:
  bool SendMigration(const std::string& host,
                     const v1::MigrationDirective& d) override {
    if (down.count(host)) return false;
    sent.emplace_back(host, d);
    return true;
  }
  int Count(Phase::Phase phase, const std::string& host = "") const {
    int n = 0;
    for (const auto& [h, d] : sent) {
      n += d.phase() == phase && (host.empty() || h == host);
    }
    return n;
  }
  std::vector<std::pair<std::string, v1::MigrationDirective>> sent;
  std::set<std::string> down;
};

class MigrationManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("pitstop-migrate-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    Open();
  }
  void TearDown() override {
    mm_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  // A controller (re)start: a new store and manager on the same file.
  void Open(bool resume = true) {
    mm_.reset();
    store_.reset();
    auto s = FaultStore::Open((dir_ / "pitstop.db").string());
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(*s);
    MigrationManager::Options o;
    o.clock = &clock_;
    o.prepare_timeout = absl::Seconds(30);
    o.switch_timeout = absl::Seconds(10);
    o.switch_margin = 4;
    o.resume = resume;
    auto m = MigrationManager::Create(o, store_.get(), &sender_);
    ASSERT_TRUE(m.ok()) << m.status();
    mm_ = std::move(*m);
  }
  // Job "j": node0 (ranks 0-3, leaving), node1 (4-7), node2 (8-11).
  MigrationPlan Plan(const std::string& job = "j",
                     const std::string& joiner = "spare0") {
    MigrationPlan p;
    p.job_id = job;
    p.leaver_host = "node0";
    p.joiner_host = joiner;
    p.ranks_by_host = {{"node0", {0, 1, 2, 3}},
                       {"node1", {4, 5, 6, 7}},
                       {"node2", {8, 9, 10, 11}}};
    p.comms = {{0xA1, "world"}, {0xB2, "dp0"}};
    p.switch_comm_hash = 0xA1;
    p.requested_by = "test";
    return p;
  }
  v1::MigrationAck Ack(const v1::Migration& m, Phase::Phase phase,
                       uint64_t progress = 0, bool ok = true) {
    v1::MigrationAck a;
    a.set_migration_id(m.migration_id());
    a.set_epoch(m.epoch());
    a.set_phase(phase);
    a.set_ok(ok);
    a.set_progress_seq(progress);
    if (!ok) a.set_error("ncclCommInitRank failed: remote process exited");
    return a;
  }
  v1::Migration Get(const std::string& id) {
    auto m = mm_->Get(id);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *m : v1::Migration();
  }
  void AllReady(const v1::Migration& m) {
    uint64_t progress = 100;
    for (const char* h : {"node0", "node1", "node2", "spare0"}) {
      ASSERT_TRUE(mm_->OnAck(h, Ack(m, Phase::PHASE_PREPARE, progress++)).ok());
    }
  }

  std::filesystem::path dir_;
  FakeClock clock_;
  RecordingSender sender_;
  std::unique_ptr<FaultStore> store_;
  std::unique_ptr<MigrationManager> mm_;
};

TEST_F(MigrationManagerTest, HappyPathCommitsWithSwitchPointPastEveryRank) {
  auto m = mm_->Start(Plan());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->state(), v1::MIGRATION_STATE_PREPARING);
  EXPECT_EQ(m->epoch(), 1u);
  ASSERT_EQ(m->comms_size(), 2);
  EXPECT_EQ(m->comms(0).new_comm_id().size(), 128u);
  EXPECT_NE(m->comms(0).new_comm_id(), m->comms(1).new_comm_id());
  EXPECT_EQ(sender_.Count(Phase::PHASE_PREPARE), 4);  // 3 hosts + joiner
  for (const auto& [h, d] : sender_.sent) {
    if (h == "spare0") {
      EXPECT_EQ(d.role(), v1::MIGRATION_ROLE_JOINER);
      EXPECT_EQ(d.moved_global_ranks().size(), 4);
    }
  }
  AllReady(*m);  // progress 100..103
  v1::Migration s = Get(m->migration_id());
  EXPECT_EQ(s.state(), v1::MIGRATION_STATE_SWITCHING);
  EXPECT_EQ(s.switch_seq(), 103u + 4u);
  EXPECT_EQ(sender_.Count(Phase::PHASE_SWITCH_AT), 4);
  // The leaver's ranks leave at the switch: nobody waits for its SWITCHED.
  for (const char* h : {"node1", "node2"}) {
    ASSERT_TRUE(mm_->OnAck(h, Ack(s, Phase::PHASE_SWITCH_AT)).ok());
  }
  EXPECT_EQ(Get(s.migration_id()).state(), v1::MIGRATION_STATE_SWITCHING);
  ASSERT_TRUE(mm_->OnAck("spare0", Ack(s, Phase::PHASE_SWITCH_AT)).ok());
  v1::Migration done = Get(s.migration_id());
  EXPECT_EQ(done.state(), v1::MIGRATION_STATE_COMMITTED);
  EXPECT_EQ(sender_.Count(Phase::PHASE_COMMIT), 4);
  EXPECT_EQ(sender_.Count(Phase::PHASE_ABORT), 0);
  // Durable: a new manager on the file sees it committed.
  Open();
  EXPECT_EQ(Get(s.migration_id()).state(), v1::MIGRATION_STATE_COMMITTED);
}

TEST_F(MigrationManagerTest, PrepareTimesOutNamingWhoDidNotAnswer) {
  auto m = mm_->Start(Plan());
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(mm_->OnAck("node1", Ack(*m, Phase::PHASE_PREPARE)).ok());
  clock_.Advance(absl::Seconds(29));
  mm_->Tick();
  EXPECT_EQ(Get(m->migration_id()).state(), v1::MIGRATION_STATE_PREPARING);
  clock_.Advance(absl::Seconds(2));
  mm_->Tick();
  v1::Migration a = Get(m->migration_id());
  EXPECT_EQ(a.state(), v1::MIGRATION_STATE_ABORTED);
  EXPECT_NE(a.abort_reason().find("PREPARE timed out"), std::string::npos)
      << a.abort_reason();
  EXPECT_NE(a.abort_reason().find("node0"), std::string::npos);
  EXPECT_EQ(a.abort_reason().find("node1,"), std::string::npos);
  EXPECT_EQ(sender_.Count(Phase::PHASE_ABORT), 4);
  EXPECT_EQ(sender_.Count(Phase::PHASE_SWITCH_AT), 0);
}

TEST_F(MigrationManagerTest, SwitchTimesOut) {
  auto m = mm_->Start(Plan());
  ASSERT_TRUE(m.ok());
  AllReady(*m);
  ASSERT_TRUE(mm_->OnAck("node1", Ack(*m, Phase::PHASE_SWITCH_AT)).ok());
  clock_.Advance(absl::Seconds(11));
  mm_->Tick();
  v1::Migration a = Get(m->migration_id());
  EXPECT_EQ(a.state(), v1::MIGRATION_STATE_ABORTED);
  EXPECT_NE(a.abort_reason().find("SWITCH_AT timed out"), std::string::npos)
      << a.abort_reason();
  EXPECT_NE(a.abort_reason().find("node2,spare0"), std::string::npos)
      << a.abort_reason();
}

TEST_F(MigrationManagerTest, MemberReportingFailureAborts) {
  auto m = mm_->Start(Plan());
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(
      mm_->OnAck("node2", Ack(*m, Phase::PHASE_PREPARE, 0, /*ok=*/false)).ok());
  v1::Migration a = Get(m->migration_id());
  EXPECT_EQ(a.state(), v1::MIGRATION_STATE_ABORTED);
  EXPECT_NE(a.abort_reason().find("stayer node2 failed PREPARE"),
            std::string::npos)
      << a.abort_reason();
}

TEST_F(MigrationManagerTest, JoinerDyingInTheSandboxAborts) {
  auto m = mm_->Start(Plan());
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(mm_->OnAck("node1", Ack(*m, Phase::PHASE_PREPARE)).ok());
  mm_->OnHostDown("spare0", "j", "rank 2 pid 77 died");
  v1::Migration a = Get(m->migration_id());
  EXPECT_EQ(a.state(), v1::MIGRATION_STATE_ABORTED);
  EXPECT_NE(a.abort_reason().find("joiner spare0 died"), std::string::npos);
  EXPECT_NE(a.abort_reason().find("sandbox"), std::string::npos);
  // The old communicators stand: every member is told to abort the new ones.
  EXPECT_EQ(sender_.Count(Phase::PHASE_ABORT), 4);
  EXPECT_EQ(sender_.Count(Phase::PHASE_COMMIT), 0);
  // The standby is free again.
  EXPECT_TRUE(mm_->Reserved().empty());
}

TEST_F(MigrationManagerTest, LeaverDyingDuringTransferAbortsUnlessFromReplica) {
  auto m = mm_->Start(Plan());
  ASSERT_TRUE(m.ok());
  mm_->OnHostDown("node0", "", "agent stream lost");
  v1::Migration a = Get(m->migration_id());
  EXPECT_EQ(a.state(), v1::MIGRATION_STATE_ABORTED);
  EXPECT_NE(a.abort_reason().find("leaver node0 died"), std::string::npos);
  EXPECT_NE(a.abort_reason().find("state transfer"), std::string::npos);

  MigrationPlan p = Plan();
  p.from_replica = true;
  auto r = mm_->Start(p);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->epoch(), 2u);
  mm_->OnHostDown("node0", "", "agent stream lost");
  EXPECT_EQ(Get(r->migration_id()).state(), v1::MIGRATION_STATE_PREPARING);
  // A stayer dying still aborts.
  mm_->OnHostDown("node1", "j", "rank 5 died");
  EXPECT_EQ(Get(r->migration_id()).state(), v1::MIGRATION_STATE_ABORTED);
}

// At the switch the leaver's poll sends its state, then its host answers
// SWITCHED: a leaver dying before that answer leaves the joiner waiting in
// its join for a sender that is gone, so the migration aborts at once (not
// at the SWITCH_AT timeout). After it, its death is none of the
// migration's business: the state moved.
TEST_F(MigrationManagerTest,
       LeaverDyingWhileSwitchingBeforeItsStateWentAborts) {
  auto m = mm_->Start(Plan());
  ASSERT_TRUE(m.ok());
  AllReady(*m);
  ASSERT_EQ(Get(m->migration_id()).state(), v1::MIGRATION_STATE_SWITCHING);
  ASSERT_TRUE(mm_->OnAck("node1", Ack(*m, Phase::PHASE_SWITCH_AT)).ok());
  mm_->OnHostDown("node0", "j", "rank 2 pid 77 died");
  v1::Migration a = Get(m->migration_id());
  EXPECT_EQ(a.state(), v1::MIGRATION_STATE_ABORTED);
  EXPECT_NE(a.abort_reason().find("leaver node0 died (rank 2 pid 77 died) "
                                  "before it handed its state to the joiner"),
            std::string::npos)
      << a.abort_reason();
  EXPECT_EQ(sender_.Count(Phase::PHASE_ABORT), 4);

  auto n = mm_->Start(Plan());
  ASSERT_TRUE(n.ok()) << n.status();
  AllReady(*n);
  ASSERT_TRUE(mm_->OnAck("node0", Ack(*n, Phase::PHASE_SWITCH_AT)).ok());
  mm_->OnHostDown("node0", "j", "rank 2 pid 78 died");
  EXPECT_EQ(Get(n->migration_id()).state(), v1::MIGRATION_STATE_SWITCHING);
  for (const char* h : {"node1", "node2", "spare0"}) {
    ASSERT_TRUE(mm_->OnAck(h, Ack(*n, Phase::PHASE_SWITCH_AT)).ok());
  }
  EXPECT_EQ(Get(n->migration_id()).state(), v1::MIGRATION_STATE_COMMITTED);
}

TEST_F(MigrationManagerTest, UnreachableMemberAtStartAborts) {
  sender_.down.insert("node2");
  auto m = mm_->Start(Plan());
  ASSERT_TRUE(m.ok());
  v1::Migration a = Get(m->migration_id());
  EXPECT_EQ(a.state(), v1::MIGRATION_STATE_ABORTED);
  EXPECT_NE(a.abort_reason().find("not connected: node2"), std::string::npos);
}

TEST_F(MigrationManagerTest, FromReplicaStartsWithTheLeaverDead) {
  sender_.down.insert("node0");
  MigrationPlan p = Plan();
  p.from_replica = true;
  auto m = mm_->Start(p);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(Get(m->migration_id()).state(), v1::MIGRATION_STATE_PREPARING);
  EXPECT_EQ(sender_.Count(Phase::PHASE_PREPARE), 3);
  // READY from the stayers and the joiner is enough.
  for (const char* h : {"node1", "node2", "spare0"}) {
    ASSERT_TRUE(mm_->OnAck(h, Ack(*m, Phase::PHASE_PREPARE, 7)).ok());
  }
  EXPECT_EQ(Get(m->migration_id()).state(), v1::MIGRATION_STATE_SWITCHING);
}

// Node failure: the stayers report the step whose collective failed; they
// all redo the lowest (no margin: they wait in recover), and one stayer
// rank per moved rank sends the state as a data-parallel replica.
TEST_F(MigrationManagerTest, FromReplicaRedoesTheLowestFailedStepFromReplicas) {
  MigrationPlan p = Plan();
  p.from_replica = true;
  auto m = mm_->Start(p);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(sender_.Count(Phase::PHASE_PREPARE, "node0"), 0)
      << "the dead leaver is left out";
  ASSERT_EQ(m->transfers_size(), 4);
  std::set<int32_t> sources;
  for (const v1::TransferComm& t : m->transfers()) {
    EXPECT_GE(t.source_global_rank(), 4) << "a replica is a stayer rank";
    sources.insert(t.source_global_rank());
  }
  EXPECT_EQ(sources, (std::set<int32_t>{4, 5, 6, 7}));
  ASSERT_TRUE(mm_->OnAck("node1", Ack(*m, Phase::PHASE_PREPARE, 42)).ok());
  ASSERT_TRUE(mm_->OnAck("node2", Ack(*m, Phase::PHASE_PREPARE, 41)).ok());
  ASSERT_TRUE(mm_->OnAck("spare0", Ack(*m, Phase::PHASE_PREPARE, 0)).ok());
  v1::Migration s = Get(m->migration_id());
  EXPECT_EQ(s.state(), v1::MIGRATION_STATE_SWITCHING);
  EXPECT_EQ(s.switch_seq(), 41u);
  EXPECT_EQ(sender_.Count(Phase::PHASE_SWITCH_AT, "node0"), 0);
  for (const char* h : {"node1", "node2", "spare0"}) {
    ASSERT_TRUE(mm_->OnAck(h, Ack(s, Phase::PHASE_SWITCH_AT)).ok());
  }
  EXPECT_EQ(Get(m->migration_id()).state(), v1::MIGRATION_STATE_COMMITTED);

  // Fewer other ranks than moved ones: no replica for each.
  p.ranks_by_host = {{"node0", {0, 1, 2, 3}}, {"node1", {4, 5}}};
  auto few = mm_->Start(p);
  EXPECT_TRUE(absl::IsInvalidArgument(few.status())) << few.status();
}

TEST_F(MigrationManagerTest, SecondMigrationOfTheJobWaits) {
  auto first = mm_->Start(Plan());
  ASSERT_TRUE(first.ok());
  MigrationPlan p2 = Plan("j", "spare1");
  p2.leaver_host = "node1";
  auto second = mm_->Start(p2);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->state(), v1::MIGRATION_STATE_QUEUED);
  EXPECT_EQ(sender_.Count(Phase::PHASE_PREPARE, "spare1"), 0);
  // Another job is not held up.
  auto other = mm_->Start(Plan("k", "spare2"));
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->state(), v1::MIGRATION_STATE_PREPARING);
  // The same standby cannot be reserved twice.
  EXPECT_TRUE(
      absl::IsFailedPrecondition(mm_->Start(Plan("z", "spare1")).status()));
  // The first finishes (aborted here): the second starts.
  mm_->OnHostDown("spare0", "", "agent stream lost");
  EXPECT_EQ(Get(first->migration_id()).state(), v1::MIGRATION_STATE_ABORTED);
  EXPECT_EQ(Get(second->migration_id()).state(), v1::MIGRATION_STATE_PREPARING);
  EXPECT_EQ(sender_.Count(Phase::PHASE_PREPARE, "spare1"), 1);
}

TEST_F(MigrationManagerTest, RestartMidPrepareResumesFromTheDatabase) {
  auto m = mm_->Start(Plan());
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(mm_->OnAck("node1", Ack(*m, Phase::PHASE_PREPARE, 50)).ok());
  const std::string comm_id = m->comms(0).new_comm_id();
  clock_.Advance(absl::Seconds(25));
  sender_.down = {"node0", "node1", "node2", "spare0"};  // agents reconnect
  Open();
  v1::Migration r = Get(m->migration_id());
  EXPECT_EQ(r.state(), v1::MIGRATION_STATE_PREPARING);
  EXPECT_EQ(r.resumed(), 1u);
  EXPECT_EQ(r.comms(0).new_comm_id(), comm_id);  // same ids after restart
  // A fresh phase timeout from the restart, not the 5 s left before it.
  clock_.Advance(absl::Seconds(20));
  mm_->Tick();
  EXPECT_EQ(Get(m->migration_id()).state(), v1::MIGRATION_STATE_PREPARING);
  // Reconnecting agents get PREPARE again and answer it again.
  sender_.down.clear();
  sender_.sent.clear();
  for (const char* h : {"node0", "node1", "node2", "spare0"}) {
    mm_->OnHostUp(h);
  }
  EXPECT_EQ(sender_.Count(Phase::PHASE_PREPARE), 4);
  AllReady(r);
  r = Get(m->migration_id());
  EXPECT_EQ(r.state(), v1::MIGRATION_STATE_SWITCHING);
  for (const char* h : {"node1", "node2", "spare0"}) {
    ASSERT_TRUE(mm_->OnAck(h, Ack(r, Phase::PHASE_SWITCH_AT)).ok());
  }
  EXPECT_EQ(Get(m->migration_id()).state(), v1::MIGRATION_STATE_COMMITTED);
}

TEST_F(MigrationManagerTest, RestartMidSwitchKeepsTheSwitchPoint) {
  auto m = mm_->Start(Plan());
  ASSERT_TRUE(m.ok());
  AllReady(*m);
  const uint64_t seq = Get(m->migration_id()).switch_seq();
  ASSERT_GT(seq, 0u);
  Open();
  sender_.sent.clear();
  mm_->OnHostUp("node1");
  ASSERT_EQ(sender_.Count(Phase::PHASE_SWITCH_AT), 1);
  EXPECT_EQ(sender_.sent[0].second.switch_seq(), seq);
  // Nobody comes back: the resumed phase times out and aborts.
  clock_.Advance(absl::Seconds(11));
  mm_->Tick();
  EXPECT_EQ(Get(m->migration_id()).state(), v1::MIGRATION_STATE_ABORTED);
}

TEST_F(MigrationManagerTest, RestartWithResumeOffAborts) {
  auto m = mm_->Start(Plan());
  ASSERT_TRUE(m.ok());
  Open(/*resume=*/false);
  v1::Migration a = Get(m->migration_id());
  EXPECT_EQ(a.state(), v1::MIGRATION_STATE_ABORTED);
  EXPECT_NE(a.abort_reason().find("controller restarted"), std::string::npos);
}

TEST_F(MigrationManagerTest, RestartStartsAQueuedMigration) {
  auto first = mm_->Start(Plan());
  ASSERT_TRUE(first.ok());
  MigrationPlan p2 = Plan("j", "spare1");
  p2.leaver_host = "node1";
  auto second = mm_->Start(p2);
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(mm_->Abort(first->migration_id(), "operator").ok());
  Open();
  EXPECT_EQ(Get(second->migration_id()).state(), v1::MIGRATION_STATE_PREPARING);
  EXPECT_EQ(Get(second->migration_id()).epoch(), 2u);
  // Ids keep counting after a restart.
  auto third = mm_->Start(Plan("k", "spare2"));
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->migration_id(), "M3");
}

TEST_F(MigrationManagerTest, StaleAndForeignAcksAreHarmless) {
  auto m = mm_->Start(Plan());
  ASSERT_TRUE(m.ok());
  v1::MigrationAck stale = Ack(*m, Phase::PHASE_PREPARE);
  stale.set_epoch(99);
  EXPECT_TRUE(mm_->OnAck("node1", stale).ok());
  EXPECT_FALSE(Get(m->migration_id()).members(1).ready());
  EXPECT_TRUE(absl::IsInvalidArgument(
      mm_->OnAck("nodeX", Ack(*m, Phase::PHASE_PREPARE))));
  v1::MigrationAck unknown = Ack(*m, Phase::PHASE_PREPARE);
  unknown.set_migration_id("M404");
  EXPECT_TRUE(absl::IsNotFound(mm_->OnAck("node1", unknown)));
  // A SWITCHED while preparing is an answer to nothing: ignored.
  EXPECT_TRUE(mm_->OnAck("node1", Ack(*m, Phase::PHASE_SWITCH_AT)).ok());
  EXPECT_EQ(Get(m->migration_id()).state(), v1::MIGRATION_STATE_PREPARING);
}

TEST_F(MigrationManagerTest, BadPlansAreRefused) {
  MigrationPlan p = Plan();
  p.joiner_host = "node0";
  EXPECT_TRUE(absl::IsInvalidArgument(mm_->Start(p).status()));
  p = Plan();
  p.joiner_host = "node1";  // runs ranks of the job already
  EXPECT_TRUE(absl::IsInvalidArgument(mm_->Start(p).status()));
  p = Plan();
  p.leaver_host = "nodeQ";
  EXPECT_TRUE(absl::IsInvalidArgument(mm_->Start(p).status()));
}

// The joiner's library makes the ids (real NCCL ids hold their maker's
// address): MAKE_IDS goes to the joiner alone, PREPARE to every member
// once the ids came, carrying them.
v1::MigrationAck IdsAck(const v1::Migration& m, bool complete = true) {
  v1::MigrationAck a;
  a.set_migration_id(m.migration_id());
  a.set_epoch(m.epoch());
  a.set_phase(Phase::PHASE_MAKE_IDS);
  a.set_ok(true);
  for (uint64_t hash : {0xA1u, 0xB2u}) {
    if (!complete && hash == 0xB2u) continue;
    v1::CommRebuild* c = a.add_made_comms();
    c->set_old_comm_hash(hash);
    c->set_new_comm_id(std::string(128, static_cast<char>(hash & 0x7f)));
  }
  for (int32_t rank : {0, 1, 2, 3}) {
    v1::TransferComm* t = a.add_made_transfers();
    t->set_global_rank(rank);
    t->set_comm_id(std::string(128, static_cast<char>('a' + rank)));
  }
  return a;
}

TEST_F(MigrationManagerTest, JoinerMakesTheIdsBeforeAnyonePrepares) {
  MigrationPlan p = Plan();
  p.ids_from_joiner = true;
  auto m = mm_->Start(p);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->state(), v1::MIGRATION_STATE_PREPARING);
  EXPECT_TRUE(m->comms(0).new_comm_id().empty());
  EXPECT_EQ(sender_.Count(Phase::PHASE_MAKE_IDS, "spare0"), 1);
  EXPECT_EQ(sender_.Count(Phase::PHASE_MAKE_IDS), 1);
  EXPECT_EQ(sender_.Count(Phase::PHASE_PREPARE), 0);
  // READY before the ids is an answer to nothing: ignored.
  ASSERT_TRUE(mm_->OnAck("node1", Ack(*m, Phase::PHASE_PREPARE)).ok());
  // Ids from a stayer are not taken.
  ASSERT_TRUE(mm_->OnAck("node1", IdsAck(*m)).ok());
  EXPECT_EQ(sender_.Count(Phase::PHASE_PREPARE), 0);
  // A controller restart now re-asks the joiner.
  sender_.sent.clear();
  Open();
  mm_->OnHostUp("spare0");
  EXPECT_EQ(sender_.Count(Phase::PHASE_MAKE_IDS, "spare0"), 1);
  ASSERT_TRUE(mm_->OnAck("spare0", IdsAck(*m)).ok());
  v1::Migration r = Get(m->migration_id());
  EXPECT_NE(r.ids_unix_ns(), 0u);
  EXPECT_EQ(r.comms(0).new_comm_id(), std::string(128, 0x21));
  EXPECT_EQ(r.comms(1).new_comm_id(), std::string(128, 0x32));
  ASSERT_EQ(r.transfers_size(), 4);
  EXPECT_EQ(sender_.Count(Phase::PHASE_PREPARE), 4);
  for (const auto& [h, d] : sender_.sent) {
    if (d.phase() != Phase::PHASE_PREPARE) continue;
    EXPECT_EQ(d.comms(1).new_comm_id(), std::string(128, 0x32)) << h;
    EXPECT_EQ(d.transfers_size(), 4) << h;
  }
  AllReady(r);
  EXPECT_EQ(Get(m->migration_id()).state(), v1::MIGRATION_STATE_SWITCHING);
}

TEST_F(MigrationManagerTest, MissingOrFailedIdsAbortAndSayWhy) {
  MigrationPlan p = Plan();
  p.ids_from_joiner = true;
  auto m = mm_->Start(p);
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(mm_->OnAck("spare0", IdsAck(*m, /*complete=*/false)).ok());
  v1::Migration a = Get(m->migration_id());
  EXPECT_EQ(a.state(), v1::MIGRATION_STATE_ABORTED);
  EXPECT_NE(a.abort_reason().find("no id for communicator dp0"),
            std::string::npos)
      << a.abort_reason();
  EXPECT_EQ(sender_.Count(Phase::PHASE_PREPARE), 0);

  auto m2 = mm_->Start(p);
  ASSERT_TRUE(m2.ok());
  v1::MigrationAck failed = IdsAck(*m2);
  failed.set_ok(false);
  failed.set_error("rank 0: ncclGetUniqueId: unhandled system error");
  ASSERT_TRUE(mm_->OnAck("spare0", failed).ok());
  a = Get(m2->migration_id());
  EXPECT_EQ(a.state(), v1::MIGRATION_STATE_ABORTED);
  EXPECT_NE(a.abort_reason().find("failed MAKE_IDS: rank 0: ncclGetUniqueId"),
            std::string::npos)
      << a.abort_reason();

  // No answer at all: the phase timeout names MAKE_IDS and the joiner.
  auto m3 = mm_->Start(p);
  ASSERT_TRUE(m3.ok());
  clock_.Advance(absl::Seconds(31));
  mm_->Tick();
  a = Get(m3->migration_id());
  EXPECT_EQ(a.state(), v1::MIGRATION_STATE_ABORTED);
  EXPECT_NE(a.abort_reason().find("MAKE_IDS timed out"), std::string::npos)
      << a.abort_reason();
  EXPECT_NE(a.abort_reason().find("spare0"), std::string::npos);
}

}  // namespace
}  // namespace pitstop::controller
