// The rebuilder (plugin/rebuild.h) frees a communicator only with its lock
// released. Freeing the process's last communicator ends in the profiler's
// finalize (Runtime::FinalizeComm), which stops the exporter and waits for
// its last drain, and that drain takes the rebuilder's lock (TakeAcks). A
// joiner whose state transfer ended in an ABORT aborted its transfer
// communicator with the lock held and hung there for good
// (sim_torch_migration_test's leaver-dies-in-transfer, 1 run in ~15).
//
// The fake NCCL's abort does what that finalize does: it drains the acks on
// another thread and waits for the drain.
#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "plugin/comm_table.h"
#include "plugin/rebuild.h"
#include "plugin/rebuild_nccl.h"

namespace pitstop::plugin {
namespace {

// A drain that cannot take the lock never ends; past this the fake stops
// waiting so the test fails instead of hanging.
constexpr auto kDeadlock = std::chrono::seconds(30);

struct Fake {
  std::mutex mu;
  Rebuilder* rebuilder = nullptr;
  char comms[4] = {};
  int next_comm = 0;
  int aborts = 0;
  int drained = 0;  // aborts whose drain took the rebuilder's lock
  std::vector<std::thread> drains;
  std::vector<MigrationAck> acks;  // what the drains took
  std::string abort_reason;
  // Where the ABORT comes: during the transfer (before its send or receive
  // fails), or only after it (the leaver's death reported after the joiner
  // saw its connection close): from another thread at the first look at
  // the clock after the transfer communicator's abort.
  bool abort_after_transfer = false;
  bool abort_armed = false;
  // NCCL refuses every init at once, yet hands back a communicator (to
  // abort), as ncclCommInitRankConfig may.
  bool init_fails = false;
};
Fake* g_fake = nullptr;

NcclResult FakeInit(NcclComm* comm, int, NcclUniqueId, int, void*) {
  std::lock_guard<std::mutex> lock(g_fake->mu);
  *comm = reinterpret_cast<NcclComm>(&g_fake->comms[g_fake->next_comm++]);
  return g_fake->init_fails ? abi::kNcclSystemError : abi::kNcclSuccess;
}
NcclResult FakeAsync(NcclComm, NcclResult* r) {
  *r = abi::kNcclSuccess;
  return abi::kNcclSuccess;
}
void DeliverAbort() {
  std::vector<MigrationDirective> v(1);
  v[0].phase = kPhaseAbort;
  v[0].migration_id = "M1";
  v[0].epoch = 1;
  v[0].reason = g_fake->abort_reason;
  g_fake->rebuilder->OnDirectives(&v);
}
// The rebuilder's clock (always 0: no deadline passes).
uint64_t FakeNow() {
  std::lock_guard<std::mutex> lock(g_fake->mu);
  if (g_fake->abort_armed) {
    g_fake->abort_armed = false;
    g_fake->drains.emplace_back(DeliverAbort);
  }
  return 0;
}
NcclResult FakeAbort(NcclComm comm) {
  // The joiner's transfer communicator is its second (after the world's).
  if (g_fake->abort_after_transfer &&
      comm == reinterpret_cast<NcclComm>(&g_fake->comms[1])) {
    std::lock_guard<std::mutex> lock(g_fake->mu);
    g_fake->abort_armed = true;
  }
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> drained = done->get_future();
  {
    std::lock_guard<std::mutex> lock(g_fake->mu);
    ++g_fake->aborts;
    g_fake->drains.emplace_back([done] {
      std::vector<MigrationAck> acks;
      g_fake->rebuilder->TakeAcks(&acks);
      {
        std::lock_guard<std::mutex> lock(g_fake->mu);
        for (MigrationAck& a : acks) g_fake->acks.push_back(std::move(a));
      }
      done->set_value();
    });
  }
  const bool ok = drained.wait_for(kDeadlock) == std::future_status::ready;
  std::lock_guard<std::mutex> lock(g_fake->mu);
  g_fake->drained += ok;
  return abi::kNcclSuccess;
}
// The peer's connection closes (an ABORT may have come first).
NcclResult AbortThenFail() {
  if (!g_fake->abort_after_transfer) DeliverAbort();
  return abi::kNcclRemoteError;
}
NcclResult FakeSend(const void*, size_t, int, int, NcclComm, void*) {
  return AbortThenFail();
}
NcclResult FakeRecv(void*, size_t, int, int, NcclComm, void*) {
  return AbortThenFail();
}
const char* FakeErrorString(NcclResult) { return "remote process exited"; }

NcclOps FakeOps() {
  NcclOps o;
  o.init_rank_config = FakeInit;
  o.get_async_error = FakeAsync;
  o.abort = FakeAbort;
  o.send = FakeSend;
  o.recv = FakeRecv;
  o.error_string = FakeErrorString;
  return o;
}

constinit CommTable g_table;  // 4096 slots: static, not on the stack
constexpr uint64_t kWorldHash = 0x1234;

class RebuildAbortTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_fake = &fake_;
    rebuilder_ = std::make_unique<Rebuilder>(&g_table, FakeOps(), "", FakeNow);
    fake_.rebuilder = rebuilder_.get();
  }
  void TearDown() override {
    rebuilder_.reset();  // joins the worker (its aborts)
    for (std::thread& t : fake_.drains) t.join();
    if (sandbox_) {
      g_table.ReleaseSandbox(handle_);
    } else if (handle_ != nullptr) {
      g_table.Unbind(handle_);
    }
    g_fake = nullptr;
  }
  // PREPARE (READY at once) and SWITCH_AT at 0 for global rank 3 of 4.
  void PrepareAndArm(MigrationRole role) {
    MigrationDirective d;
    d.migration_id = "M1";
    d.epoch = 1;
    d.role = role;
    d.global_rank = 3;
    d.comms.push_back({kWorldHash, std::string(kCommIdBytes, 'n')});
    d.switch_comm_hash = kWorldHash;
    d.transfer_comm_id = std::string(kCommIdBytes, 't');
    for (MigrationPhase phase : {kPhasePrepare, kPhaseSwitchAt}) {
      d.phase = phase;
      std::vector<MigrationDirective> v = {d};
      rebuilder_->OnDirectives(&v);
    }
  }
  // Waits for `aborts` aborts (the worker's come when they come; the test's
  // deadline ends a hang) and their drains, which end once nothing holds
  // the lock, before the rebuilder goes.
  void ExpectEveryAbortDrained(int aborts) {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(fake_.mu);
        if (fake_.aborts >= aborts) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    for (std::thread& t : fake_.drains) t.join();
    fake_.drains.clear();
    rebuilder_.reset();
    EXPECT_EQ(fake_.aborts, aborts);
    EXPECT_EQ(fake_.drained, fake_.aborts)
        << "a communicator was aborted with the rebuilder's lock held: the "
           "exporter's last drain could not take it (a deadlock)";
  }

  Fake fake_;
  void* handle_ = nullptr;
  bool sandbox_ = false;
  std::unique_ptr<Rebuilder> rebuilder_;
};

// The joiner's new world and transfer communicators: ABORT aborts the
// world on the worker, the join aborts the transfer when its receive ends.
TEST_F(RebuildAbortTest, AJoinerAbortsItsTransferWithoutTheLock) {
  handle_ = g_table.BindSandbox(3, 4, kWorldHash);
  sandbox_ = true;
  ASSERT_NE(handle_, nullptr);
  fake_.abort_reason = "leaver node1 died";
  PrepareAndArm(kRoleJoiner);
  uint64_t next_step = 0;
  std::string error;
  EXPECT_EQ(rebuilder_->Join(&next_step, 60000, &error), Rebuilder::kError);
  EXPECT_EQ(error, "migration aborted: leaver node1 died");
  ExpectEveryAbortDrained(2);
}

// The leaver died: the joiner's receive fails (its connection closed)
// before the ABORT for the death comes. The joiner waits for it instead of
// answering its receive's failure, which the controller would have taken
// for the abort's reason (the two reports race).
TEST_F(RebuildAbortTest, AJoinerWhoseLeaverVanishedReturnsTheAbortsReason) {
  handle_ = g_table.BindSandbox(3, 4, kWorldHash);
  sandbox_ = true;
  ASSERT_NE(handle_, nullptr);
  fake_.abort_reason = "leaver node1 died";
  fake_.abort_after_transfer = true;
  PrepareAndArm(kRoleJoiner);
  uint64_t next_step = 0;
  std::string error;
  EXPECT_EQ(rebuilder_->Join(&next_step, 60000, &error), Rebuilder::kError);
  EXPECT_EQ(error, "migration aborted: leaver node1 died");
  ExpectEveryAbortDrained(2);
  for (const MigrationAck& a : fake_.acks) {
    EXPECT_FALSE(a.phase == kPhaseSwitchAt && !a.ok)
        << "SWITCH_AT answered failed before the ABORT: " << a.error;
  }
}

// The leaver's send fails after the ABORT came: it aborts its transfer
// communicator, training goes on.
TEST_F(RebuildAbortTest, ALeaverAbortsItsTransferWithoutTheLock) {
  static char old_comm = 0;
  handle_ = g_table.Bind(&old_comm, 3, 4);
  ASSERT_NE(handle_, nullptr);
  g_table.SetCommHash(handle_, kWorldHash);
  fake_.abort_reason = "joiner spare0 died";
  PrepareAndArm(kRoleLeaver);
  std::string error;
  EXPECT_EQ(rebuilder_->Poll(0, &error), Rebuilder::kError);
  EXPECT_NE(error.find("remote process exited"), std::string::npos) << error;
  ExpectEveryAbortDrained(1);
}

// NCCL refuses the joiner's first init at once and returns a communicator:
// PREPARE fails, and that communicator is aborted off the lock (PREPARE
// runs under it, in OnDirectives), not inside the refused init.
TEST_F(RebuildAbortTest,
       ACommunicatorWhoseInitWasRefusedIsAbortedWithoutTheLock) {
  handle_ = g_table.BindSandbox(3, 4, kWorldHash);
  sandbox_ = true;
  ASSERT_NE(handle_, nullptr);
  fake_.init_fails = true;
  PrepareAndArm(kRoleJoiner);
  ExpectEveryAbortDrained(1);
  bool prepare_failed = false;
  for (const MigrationAck& a : fake_.acks) {
    if (a.phase == kPhasePrepare && !a.ok) {
      prepare_failed = true;
      EXPECT_NE(a.error.find("ncclCommInitRankConfig"), std::string::npos)
          << a.error;
    }
  }
  EXPECT_TRUE(prepare_failed) << "PREPARE was not answered failed";
}

}  // namespace
}  // namespace pitstop::plugin
