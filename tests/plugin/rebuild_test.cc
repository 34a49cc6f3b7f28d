// The rebuilder (plugin/rebuild.h) against fake NCCL calls: NCCL's rules as
// code (never destroy an aborted communicator, drain ncclInProgress before
// a management call, no switch while a call is in flight), directives'
// idempotency and the stayer's PREPARE -> SWITCH_AT -> COMMIT path. The
// processes-and-NCCL version is plugin_migration_test.
#include "plugin/rebuild.h"

#include <time.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "plugin/comm_table.h"
#include "plugin/rebuild_nccl.h"

namespace pitstop::plugin {
namespace {

// What the fake NCCL saw and will answer. One test at a time.
struct Fake {
  std::vector<std::string> calls;  // "init", "async", "finalize", ...
  NcclResult init_result = abi::kNcclInProgress;
  NcclResult async = abi::kNcclInProgress;  // what an init reports
  int blocking_seen = -1;
  int rank_seen = -1, n_ranks_seen = -1;
  std::string id_seen;
  char comms[8] = {};  // fake communicators: &comms[i]
  int next_comm = 1;
  NcclResult unique_id_result = abi::kNcclSuccess;
  int ids_made = 0;
  std::vector<std::string> sent;  // each send's bytes; every recv gets zeros
};
Fake* g_fake = nullptr;

NcclResult FakeInit(NcclComm* comm, int n, NcclUniqueId id, int rank,
                    void* config) {
  g_fake->calls.push_back("init");
  g_fake->blocking_seen = static_cast<NcclConfigV22800*>(config)->blocking;
  g_fake->rank_seen = rank;
  g_fake->n_ranks_seen = n;
  g_fake->id_seen.assign(id.internal, sizeof(id.internal));
  *comm = reinterpret_cast<NcclComm>(&g_fake->comms[g_fake->next_comm++]);
  return g_fake->init_result;
}
NcclResult FakeAsync(NcclComm, NcclResult* r) {
  g_fake->calls.push_back("async");
  *r = g_fake->async;
  return abi::kNcclSuccess;
}
NcclResult FakeFinalize(NcclComm) {
  g_fake->calls.push_back("finalize");
  return abi::kNcclSuccess;
}
NcclResult FakeDestroy(NcclComm) {
  g_fake->calls.push_back("destroy");
  return abi::kNcclSuccess;
}
NcclResult FakeAbort(NcclComm) {
  g_fake->calls.push_back("abort");
  return abi::kNcclSuccess;
}
// Each id is 128 bytes of its serial number, so every id differs.
NcclResult FakeGetUniqueId(NcclUniqueId* id) {
  g_fake->calls.push_back("unique_id");
  if (g_fake->unique_id_result != abi::kNcclSuccess) {
    return g_fake->unique_id_result;
  }
  std::memset(id->internal, ++g_fake->ids_made, sizeof(id->internal));
  return abi::kNcclSuccess;
}
NcclResult FakeSend(const void* buf, size_t count, int, int, NcclComm, void*) {
  g_fake->calls.push_back("send");
  g_fake->sent.emplace_back(static_cast<const char*>(buf), count);
  return abi::kNcclSuccess;
}
// Zeros: the joiner's verdicts "accepted".
NcclResult FakeRecv(void* buf, size_t count, int, int, NcclComm, void*) {
  g_fake->calls.push_back("recv");
  std::memset(buf, 0, count);
  return abi::kNcclSuccess;
}
const char* FakeErrorString(NcclResult) { return "remote process exited"; }
const char* FakeLastError(NcclComm) { return "peer 2 closed"; }

NcclOps FakeOps() {
  NcclOps o;
  o.init_rank_config = FakeInit;
  o.get_async_error = FakeAsync;
  o.finalize = FakeFinalize;
  o.destroy = FakeDestroy;
  o.abort = FakeAbort;
  o.error_string = FakeErrorString;
  o.last_error = FakeLastError;
  o.get_unique_id = FakeGetUniqueId;
  o.send = FakeSend;  // a recovering replica's state transfer
  o.recv = FakeRecv;
  return o;
}

int Count(const std::vector<std::string>& calls, const std::string& what) {
  int n = 0;
  for (const auto& c : calls) n += c == what;
  return n;
}

constinit CommTable g_table;  // 4096 slots: static, not on the stack
constexpr uint64_t kWorldHash = 0x1234;

class RebuildTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_fake = &fake_;
    handle_ = g_table.Bind(&old_comm_, 1, 3);
    ASSERT_NE(handle_, nullptr);
    g_table.SetCommHash(handle_, kWorldHash);
    rebuilder_ = std::make_unique<Rebuilder>(&g_table, FakeOps(), "",
                                             [] { return uint64_t{0}; });
  }
  void TearDown() override {
    rebuilder_.reset();
    g_table.Unbind(handle_);
    g_fake = nullptr;
  }

  MigrationDirective Directive(MigrationPhase phase) {
    MigrationDirective d;
    d.phase = phase;
    d.migration_id = "M1";
    d.epoch = 1;
    d.role = kRoleStayer;
    d.global_rank = 1;
    d.comms.push_back({kWorldHash, std::string(kCommIdBytes, 'n')});
    d.switch_comm_hash = kWorldHash;
    d.switch_seq = 5;
    return d;
  }
  void Send(MigrationPhase phase) {
    std::vector<MigrationDirective> v = {Directive(phase)};
    rebuilder_->OnDirectives(&v);
  }
  std::vector<MigrationAck> Acks() {
    std::vector<MigrationAck> out;
    rebuilder_->TakeAcks(&out);
    return out;
  }
  // COMMIT and ABORT run their NCCL calls on the worker: waits for its
  // answer (the test's own deadline ends a hang).
  std::vector<MigrationAck> AcksEventually() {
    for (;;) {
      auto acks = Acks();
      if (!acks.empty()) return acks;
      timespec ts{0, 1000000};
      nanosleep(&ts, nullptr);
    }
  }
  void Enqueue(int n) {
    for (int i = 0; i < n; ++i) g_table.CountEnqueued(handle_);
  }
  void PrepareReady() {
    Send(kPhasePrepare);
    fake_.async = abi::kNcclSuccess;
    rebuilder_->Tick();
    ASSERT_EQ(Acks().size(), 1u);
  }

  Fake fake_;
  char old_comm_ = 0;
  void* handle_ = nullptr;
  std::unique_ptr<Rebuilder> rebuilder_;
};

TEST_F(RebuildTest, PrepareStartsANonBlockingInitAndAnswersReadyWhenConnected) {
  Enqueue(3);
  Send(kPhasePrepare);
  EXPECT_EQ(fake_.blocking_seen, 0);
  EXPECT_EQ(fake_.rank_seen, 1);
  EXPECT_EQ(fake_.n_ranks_seen, 3);
  EXPECT_EQ(fake_.id_seen, std::string(kCommIdBytes, 'n'));
  rebuilder_->Tick();
  EXPECT_TRUE(Acks().empty()) << "READY while the init is in progress";
  fake_.async = abi::kNcclSuccess;
  rebuilder_->Tick();
  const auto acks = Acks();
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].phase, kPhasePrepare);
  EXPECT_TRUE(acks[0].ok) << acks[0].error;
  EXPECT_EQ(acks[0].progress_seq, 3u);
  EXPECT_EQ(acks[0].global_rank, 1);
  EXPECT_EQ(acks[0].migration_id, "M1");
}

TEST_F(RebuildTest, ARepeatedDirectiveIsAnsweredAgainNotRedone) {
  PrepareReady();
  Send(kPhasePrepare);
  const auto acks = Acks();
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_TRUE(acks[0].ok);
  EXPECT_EQ(Count(fake_.calls, "init"), 1);
}

TEST_F(RebuildTest, AnInitErrorIsAnsweredWithNcclsTextAndAbortedNotDestroyed) {
  Send(kPhasePrepare);
  fake_.async = abi::kNcclRemoteError;
  rebuilder_->Tick();
  const auto acks = Acks();
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_FALSE(acks[0].ok);
  EXPECT_THAT(acks[0].error,
              ::testing::HasSubstr("remote process exited (6): peer 2 closed"));
  rebuilder_.reset();  // joins the worker that aborts it
  EXPECT_EQ(Count(fake_.calls, "abort"), 1);
  EXPECT_EQ(Count(fake_.calls, "destroy"), 0);
}

TEST_F(RebuildTest, SwitchAtTheBoundaryThenCommitFreesTheOldCommunicator) {
  PrepareReady();
  Send(kPhaseSwitchAt);
  std::string error;
  Enqueue(4);
  EXPECT_EQ(rebuilder_->Poll(4, &error), Rebuilder::kContinue);
  CommBinding b;
  ASSERT_TRUE(g_table.Snapshot(handle_, &b));
  EXPECT_EQ(b.comm, &old_comm_) << "switched before its point";
  Enqueue(1);
  EXPECT_EQ(rebuilder_->Poll(5, &error), Rebuilder::kContinue) << error;
  ASSERT_TRUE(g_table.Snapshot(handle_, &b));
  EXPECT_EQ(b.comm, &fake_.comms[1]);
  EXPECT_EQ(b.epoch, 2u);
  auto acks = Acks();
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].phase, kPhaseSwitchAt);
  EXPECT_TRUE(acks[0].ok) << acks[0].error;
  EXPECT_EQ(acks[0].progress_seq, 5u);
  Send(kPhaseCommit);
  acks = AcksEventually();
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_TRUE(acks[0].ok) << acks[0].error;
  EXPECT_EQ(Count(fake_.calls, "finalize"), 1);
  EXPECT_EQ(Count(fake_.calls, "destroy"), 1);
  EXPECT_EQ(Count(fake_.calls, "abort"), 0);
}

TEST_F(RebuildTest, NoSwitchWhileACallIsInFlight) {
  PrepareReady();
  Send(kPhaseSwitchAt);
  Enqueue(5);
  ASSERT_NE(g_table.Acquire(handle_), nullptr);  // another thread's call
  std::string error;
  EXPECT_EQ(rebuilder_->Poll(5, &error), Rebuilder::kError);
  EXPECT_THAT(error, ::testing::HasSubstr("in flight"));
  g_table.Release(handle_);
  CommBinding b;
  ASSERT_TRUE(g_table.Snapshot(handle_, &b));
  EXPECT_EQ(b.comm, &old_comm_);
  const auto acks = Acks();
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_FALSE(acks[0].ok);
}

TEST_F(RebuildTest, ARankPastTheSwitchPointRefusesIt) {
  PrepareReady();
  Enqueue(6);
  std::string error;
  EXPECT_EQ(rebuilder_->Poll(6, &error), Rebuilder::kContinue);
  Send(kPhaseSwitchAt);  // at 5: this rank's boundary was at 6
  const auto acks = Acks();
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_FALSE(acks[0].ok);
  EXPECT_THAT(acks[0].error, ::testing::HasSubstr("past the switch point"));
}

TEST_F(RebuildTest, AbortAfterPrepareAbortsTheNewCommunicatorOnly) {
  PrepareReady();
  Send(kPhaseAbort);
  auto acks = AcksEventually();
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_TRUE(acks[0].ok);
  rebuilder_.reset();
  EXPECT_EQ(Count(fake_.calls, "abort"), 1);
  EXPECT_EQ(Count(fake_.calls, "destroy"), 0);
  CommBinding b;
  ASSERT_TRUE(g_table.Snapshot(handle_, &b));
  EXPECT_EQ(b.comm, &old_comm_);
}

// A joiner makes the ids (a real one holds its maker's address) and
// answers them; the stayers and the leaver never do.
class MakeIdsTest : public RebuildTest {
 protected:
  static constexpr uint64_t kOtherHash = 0x5678;
  MigrationDirective MakeIds(MigrationRole role) {
    MigrationDirective d = Directive(kPhaseMakeIds);
    d.role = role;
    d.global_rank = 2;
    d.make_comm_ids = true;
    d.comms = {{kWorldHash, ""}, {kOtherHash, ""}};
    return d;
  }
  std::vector<MigrationAck> Send(const MigrationDirective& d) {
    std::vector<MigrationDirective> v = {d};
    rebuilder_->OnDirectives(&v);
    return Acks();
  }
};

TEST_F(MakeIdsTest, AJoinerAnswersADistinctIdPerCommAndATransferId) {
  const auto acks = Send(MakeIds(kRoleJoiner));
  ASSERT_EQ(acks.size(), 1u);
  const MigrationAck& a = acks[0];
  EXPECT_EQ(a.phase, kPhaseMakeIds);
  ASSERT_TRUE(a.ok) << a.error;
  EXPECT_EQ(a.global_rank, 2);
  ASSERT_EQ(a.made_comms.size(), 2u);
  EXPECT_EQ(a.made_comms[0].old_comm_hash, kWorldHash);
  EXPECT_EQ(a.made_comms[1].old_comm_hash, kOtherHash);
  const std::string ids[] = {a.made_comms[0].new_comm_id,
                             a.made_comms[1].new_comm_id, a.made_transfer_id};
  for (const std::string& id : ids) EXPECT_EQ(id.size(), kCommIdBytes);
  EXPECT_NE(ids[0], ids[1]);
  EXPECT_NE(ids[0], ids[2]);
  EXPECT_NE(ids[1], ids[2]);
  EXPECT_EQ(Count(fake_.calls, "unique_id"), 3);
  EXPECT_EQ(Count(fake_.calls, "init"), 0) << "MAKE_IDS inits nothing";
}

TEST_F(MakeIdsTest, WithoutMakeCommIdsOnlyTheTransferIdIsMade) {
  MigrationDirective d = MakeIds(kRoleJoiner);
  d.make_comm_ids = false;
  const auto acks = Send(d);
  ASSERT_EQ(acks.size(), 1u);
  ASSERT_TRUE(acks[0].ok) << acks[0].error;
  EXPECT_TRUE(acks[0].made_comms.empty());
  EXPECT_EQ(acks[0].made_transfer_id.size(), kCommIdBytes);
  EXPECT_EQ(Count(fake_.calls, "unique_id"), 1);
}

TEST_F(MakeIdsTest, ARepeatGetsTheSameIdsWithoutMakingThemAgain) {
  const auto first = Send(MakeIds(kRoleJoiner));
  const auto again = Send(MakeIds(kRoleJoiner));
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(again.size(), 1u);
  ASSERT_TRUE(again[0].ok) << again[0].error;
  ASSERT_EQ(again[0].made_comms.size(), 2u);
  EXPECT_EQ(again[0].made_comms[0].new_comm_id,
            first[0].made_comms[0].new_comm_id);
  EXPECT_EQ(again[0].made_comms[1].new_comm_id,
            first[0].made_comms[1].new_comm_id);
  EXPECT_EQ(again[0].made_transfer_id, first[0].made_transfer_id);
  EXPECT_EQ(Count(fake_.calls, "unique_id"), 3);
}

TEST_F(MakeIdsTest, AStayerRefusesItAndItsPrepareStillWorks) {
  const auto acks = Send(MakeIds(kRoleStayer));
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].phase, kPhaseMakeIds);
  EXPECT_FALSE(acks[0].ok);
  EXPECT_EQ(acks[0].error,
            "PHASE_MAKE_IDS is for the joiner, this rank is a stayer");
  EXPECT_TRUE(acks[0].made_comms.empty());
  EXPECT_TRUE(acks[0].made_transfer_id.empty());
  EXPECT_EQ(Count(fake_.calls, "unique_id"), 0);
  PrepareReady();  // the same migration: neither "in progress" nor a repeat
}

TEST_F(MakeIdsTest, ANcclErrorIsAnsweredWithItsText) {
  fake_.unique_id_result = abi::kNcclSystemError;
  const auto acks = Send(MakeIds(kRoleJoiner));
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_FALSE(acks[0].ok);
  EXPECT_THAT(acks[0].error,
              ::testing::HasSubstr("ncclGetUniqueId failed: remote process "
                                   "exited (2): peer 2 closed"));
  EXPECT_TRUE(acks[0].made_transfer_id.empty());
  EXPECT_EQ(Count(fake_.calls, "unique_id"), 1) << "gave up at the first";
}

// PREPARE of the migration that made the ids is its next phase, not a
// repeat and not another migration: it inits with the ids it brings.
TEST_F(MakeIdsTest, ThePrepareThatFollowsInitsWithTheIdsItBrings) {
  void* sandbox = g_table.BindSandbox(2, 3, kOtherHash);
  ASSERT_NE(sandbox, nullptr);
  MigrationDirective d = MakeIds(kRoleJoiner);
  d.comms.resize(1);
  d.comms[0].old_comm_hash = kOtherHash;
  d.switch_comm_hash = kOtherHash;
  const auto made = Send(d);
  ASSERT_EQ(made.size(), 1u);
  ASSERT_TRUE(made[0].ok) << made[0].error;
  d.phase = kPhasePrepare;
  d.comms = made[0].made_comms;
  d.transfer_comm_id = made[0].made_transfer_id;
  EXPECT_TRUE(Send(d).empty()) << "READY while the inits are in progress";
  EXPECT_EQ(Count(fake_.calls, "init"), 2);  // the world and the transfer
  EXPECT_EQ(fake_.id_seen, made[0].made_transfer_id);
  EXPECT_EQ(fake_.rank_seen, 1);
  fake_.async = abi::kNcclSuccess;
  rebuilder_->Tick();
  const auto ready = Acks();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].phase, kPhasePrepare);
  EXPECT_TRUE(ready[0].ok) << ready[0].error;
  EXPECT_EQ(Count(fake_.calls, "unique_id"), 2);
  rebuilder_.reset();
  EXPECT_TRUE(g_table.ReleaseSandbox(sandbox));
}

// An ABORT after MAKE_IDS ends the migration: its PREPARE is refused.
TEST_F(MakeIdsTest, APrepareAfterAnAbortIsRefused) {
  ASSERT_TRUE(Send(MakeIds(kRoleJoiner))[0].ok);
  MigrationDirective d = MakeIds(kRoleJoiner);
  d.phase = kPhaseAbort;
  d.reason = "the controller gave up";
  auto acks = Send(d);
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_TRUE(acks[0].ok);
  d.phase = kPhasePrepare;
  acks = Send(d);
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_FALSE(acks[0].ok);
  EXPECT_EQ(acks[0].error, "migration aborted: the controller gave up");
  EXPECT_EQ(Count(fake_.calls, "init"), 0);
}

// Node failure (from_replica): the trainer's collective failed; it waits in
// Recover, READY carries its failed step, SWITCH_AT names the step to redo
// and Resume switches (the replica sends its state first).
class RecoverTest : public RebuildTest {
 protected:
  MigrationDirective Recovery(MigrationPhase phase, bool replica) {
    MigrationDirective d = Directive(phase);
    d.from_replica = true;
    if (replica) d.transfer_comm_id = std::string(kCommIdBytes, 't');
    return d;
  }
  void Send(const MigrationDirective& d) {
    std::vector<MigrationDirective> v = {d};
    rebuilder_->OnDirectives(&v);
  }
  // Recover on the "trainer's" thread; Join() it for the result.
  void StartRecover(uint64_t failed_step) {
    trainer_ = std::thread([this, failed_step] {
      result_ = rebuilder_->Recover(failed_step, &redo_, 600000, &error_);
    });
  }
  void JoinRecover() { trainer_.join(); }

  std::thread trainer_;
  int result_ = 1;
  uint64_t redo_ = 0;
  std::string error_;
};

TEST_F(RecoverTest, ReadyWaitsForRecoverAndCarriesTheFailedStep) {
  Enqueue(9);
  Send(Recovery(kPhasePrepare, false));
  fake_.async = abi::kNcclSuccess;
  rebuilder_->Tick();
  rebuilder_->Tick();
  EXPECT_TRUE(Acks().empty()) << "READY before the trainer noticed";
  StartRecover(7);
  const auto ready = AcksEventually();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].phase, kPhasePrepare);
  EXPECT_TRUE(ready[0].ok) << ready[0].error;
  EXPECT_EQ(ready[0].progress_seq, 7u) << "the failed step, not the count";
  MigrationDirective arm = Recovery(kPhaseSwitchAt, false);
  arm.switch_seq = 6;  // a peer failed in step 6
  Send(arm);
  JoinRecover();
  ASSERT_EQ(result_, 0) << error_;
  EXPECT_EQ(redo_, 6u);
  CommBinding b;
  ASSERT_TRUE(g_table.Snapshot(handle_, &b));
  EXPECT_EQ(b.comm, &old_comm_) << "switched before Resume";
  std::string error;
  ASSERT_EQ(rebuilder_->Resume(6, &error), 0) << error;
  ASSERT_TRUE(g_table.Snapshot(handle_, &b));
  EXPECT_EQ(b.comm, &fake_.comms[1]);
  EXPECT_EQ(g_table.Enqueued(handle_), 0u) << "counts restart at the redo";
  auto acks = Acks();
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].phase, kPhaseSwitchAt);
  EXPECT_TRUE(acks[0].ok) << acks[0].error;
  EXPECT_EQ(Count(fake_.calls, "send"), 0) << "not the replica";
  Send(Recovery(kPhaseCommit, false));
  acks = AcksEventually();
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_TRUE(acks[0].ok) << acks[0].error;
  // The old communicator lost a member: aborted, never finalized.
  EXPECT_EQ(Count(fake_.calls, "abort"), 1);
  EXPECT_EQ(Count(fake_.calls, "finalize"), 0);
  EXPECT_EQ(Count(fake_.calls, "destroy"), 0);
}

TEST_F(RecoverTest, AbortWakesRecoverWithTheReason) {
  Send(Recovery(kPhasePrepare, false));
  fake_.async = abi::kNcclSuccess;
  StartRecover(7);
  ASSERT_EQ(AcksEventually().size(), 1u);  // READY
  MigrationDirective abort = Recovery(kPhaseAbort, false);
  abort.reason = "no spare node";
  Send(abort);
  JoinRecover();
  EXPECT_EQ(result_, Rebuilder::kError);
  EXPECT_EQ(error_, "migration aborted: no spare node");
  rebuilder_.reset();  // joins the worker that aborts the new communicator
  EXPECT_EQ(Count(fake_.calls, "abort"), 1);
  CommBinding b;
  ASSERT_TRUE(g_table.Snapshot(handle_, &b));
  EXPECT_EQ(b.comm, &old_comm_);
}

TEST_F(RecoverTest, RecoverTimesOutWithoutAMigration) {
  std::string error;
  uint64_t redo = 0;
  EXPECT_EQ(rebuilder_->Recover(3, &redo, 0, &error), Rebuilder::kError);
  EXPECT_EQ(error, "no recovery migration reached this rank within 0 ms");
}

TEST_F(RecoverTest, ARedoPastTheFailedStepIsRefused) {
  Send(Recovery(kPhasePrepare, false));
  fake_.async = abi::kNcclSuccess;
  StartRecover(7);
  ASSERT_EQ(AcksEventually().size(), 1u);
  MigrationDirective arm = Recovery(kPhaseSwitchAt, false);
  arm.switch_seq = 8;
  Send(arm);
  JoinRecover();
  EXPECT_EQ(result_, Rebuilder::kError);
  EXPECT_EQ(error_, "redo step 8 is past the step that failed here (7)");
}

TEST_F(RecoverTest, ResumeOnTheReplicaSendsTheStateAsOfTheRedoStep) {
  float params[4] = {1.5f, -2.0f, 3.25f, 0.0f};
  uint64_t next_step = 0;
  std::string error;
  ASSERT_EQ(rebuilder_->RegisterState("params", params, sizeof(params), &error),
            0);
  ASSERT_EQ(rebuilder_->RegisterState("next_step", &next_step, 8, &error), 0);
  Enqueue(12);
  Send(Recovery(kPhasePrepare, true));
  EXPECT_EQ(Count(fake_.calls, "init"), 2);  // the world and the transfer
  EXPECT_EQ(fake_.id_seen, std::string(kCommIdBytes, 't'));
  EXPECT_EQ(fake_.rank_seen, 0) << "the replica is transfer rank 0";
  fake_.async = abi::kNcclSuccess;
  StartRecover(7);
  ASSERT_EQ(AcksEventually().size(), 1u);
  MigrationDirective arm = Recovery(kPhaseSwitchAt, true);
  arm.switch_seq = 7;
  Send(arm);
  JoinRecover();
  ASSERT_EQ(result_, 0) << error_;
  next_step = 7;  // the trainer restored its state as of step 7
  ASSERT_EQ(rebuilder_->Resume(7, &error), 0) << error;
  // Header size, header, then the buffers in registration order, packed
  // into one message (consecutive buffers share messages of up to 16 MiB).
  ASSERT_EQ(fake_.sent.size(), 3u);
  TransferHeader h;
  ASSERT_TRUE(DecodeTransferHeader(fake_.sent[1], &h, &error)) << error;
  EXPECT_EQ(h.next_step, 7u);
  EXPECT_EQ(h.enqueued, std::vector<uint64_t>{0}) << "counts restart at zero";
  ASSERT_EQ(h.buffers.size(), 2u);
  EXPECT_EQ(h.buffers[0].first, "params");
  EXPECT_EQ(fake_.sent[2],
            std::string(reinterpret_cast<char*>(params), sizeof(params)) +
                std::string(reinterpret_cast<char*>(&next_step), 8));
  // The transfer communicator is freed right after; the world swapped.
  EXPECT_EQ(Count(fake_.calls, "finalize"), 1);
  EXPECT_EQ(Count(fake_.calls, "destroy"), 1);
  CommBinding b;
  ASSERT_TRUE(g_table.Snapshot(handle_, &b));
  EXPECT_EQ(b.comm, &fake_.comms[1]);
  const auto acks = Acks();
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].phase, kPhaseSwitchAt);
  EXPECT_TRUE(acks[0].ok) << acks[0].error;
}

TEST_F(RecoverTest, ResumeAtAnotherStepFailsTheMigration) {
  Send(Recovery(kPhasePrepare, false));
  fake_.async = abi::kNcclSuccess;
  StartRecover(7);
  ASSERT_EQ(AcksEventually().size(), 1u);
  MigrationDirective arm = Recovery(kPhaseSwitchAt, false);
  arm.switch_seq = 7;
  Send(arm);
  JoinRecover();
  ASSERT_EQ(result_, 0) << error_;
  std::string error;
  EXPECT_EQ(rebuilder_->Resume(6, &error), Rebuilder::kError);
  EXPECT_EQ(error,
            "pitstop_trainer_resume at step 6, the migration redoes step 7");
  const auto acks = Acks();
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_FALSE(acks[0].ok);
}

TEST(OwnedCommTest, AnAbortedCommunicatorIsNeverDestroyed) {
  Fake fake;
  g_fake = &fake;
  OwnedComm c = OwnedComm::Adopt(reinterpret_cast<NcclComm>(&fake.comms[0]));
  c.Abort(FakeOps());
  EXPECT_EQ(c.FinalizeAndDestroy(FakeOps()), abi::kNcclInvalidUsage);
  EXPECT_EQ(c.Abort(FakeOps()), abi::kNcclSuccess);  // and never twice
  EXPECT_EQ(fake.calls, std::vector<std::string>{"abort"});
  g_fake = nullptr;
}

TEST(OwnedCommTest, FreeingDrainsAnInitInProgressFirst) {
  Fake fake;
  g_fake = &fake;
  OwnedComm c;
  std::string error;
  ASSERT_TRUE(
      c.StartInit(FakeOps(), std::string(kCommIdBytes, 'x'), 0, 2, &error));
  EXPECT_EQ(c.state(), OwnedComm::State::kInitializing);
  // The init ends while the free waits: the fake answers in progress until
  // it has been asked three times.
  static int asked = 0;
  asked = 0;
  NcclOps ops = FakeOps();
  ops.get_async_error = [](NcclComm, NcclResult* r) {
    g_fake->calls.push_back("async");
    *r = ++asked < 3 ? abi::kNcclInProgress : abi::kNcclSuccess;
    return abi::kNcclSuccess;
  };
  EXPECT_EQ(c.FinalizeAndDestroy(ops), abi::kNcclSuccess);
  EXPECT_EQ(fake.calls,
            (std::vector<std::string>{"init", "async", "async", "async",
                                      "async", "finalize", "destroy"}));
  g_fake = nullptr;
}

TEST(OwnedCommTest, ACommunicatorInErrorIsAbortedNotFinalized) {
  Fake fake;
  g_fake = &fake;
  fake.async = abi::kNcclRemoteError;
  OwnedComm c = OwnedComm::Adopt(reinterpret_cast<NcclComm>(&fake.comms[0]));
  c.FinalizeAndDestroy(FakeOps());
  EXPECT_EQ(fake.calls, (std::vector<std::string>{"async", "abort"}));
  EXPECT_EQ(c.state(), OwnedComm::State::kAborted);
  g_fake = nullptr;
}

}  // namespace
}  // namespace pitstop::plugin
