// Issue #15: a durable write (a drain's SQLite transaction, an fsync) does
// not hold the controller's lock, so an agent batch is joined while the
// write is still on its way to the disk. Issue #33 round 23: the same for
// the scheduler's naming of a job's hosts, now stored. The store's SetDrain is
// held open here; before round 6 the drain held the core's lock meanwhile and
// the batch waited for it.
#include <future>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "pitstop/sync.h"
#include "src/controller/controller.h"
#include "src/controller/store/fault_store.h"
#include "tests/controller/listed_comm.h"

namespace pitstop::controller {
namespace {

// SQLite (":memory:") whose SetDrain and SaveJobHosts wait until Release().
class HeldDrainStore final : public FaultStore {
 public:
  explicit HeldDrainStore(std::unique_ptr<FaultStore> s) : s_(std::move(s)) {}
  void Release() {
    MutexLock l(&mu_);
    released_ = true;
    cv_.SignalAll();
  }
  bool entered() {
    MutexLock l(&mu_);
    return entered_;
  }
  absl::Status SetDrain(absl::string_view host,
                        absl::string_view reason) override {
    Hold();
    return s_->SetDrain(host, reason);
  }
  absl::StatusOr<v1::Fault> Upsert(const v1::Fault& f, bool* i) override {
    return s_->Upsert(f, i);
  }
  absl::StatusOr<v1::Fault> Get(absl::string_view id) const override {
    return s_->Get(id);
  }
  absl::StatusOr<std::vector<v1::Fault>> List(absl::string_view j, bool r,
                                              uint32_t n) const override {
    return s_->List(j, r, n);
  }
  absl::StatusOr<v1::Fault> Acknowledge(absl::string_view id,
                                        absl::string_view w,
                                        absl::string_view n,
                                        uint64_t t) override {
    return s_->Acknowledge(id, w, n, t);
  }
  absl::StatusOr<v1::Fault> Resolve(absl::string_view id, absl::string_view w,
                                    absl::string_view n, uint64_t t) override {
    return s_->Resolve(id, w, n, t);
  }
  uint64_t NextFaultNumber() const override { return s_->NextFaultNumber(); }
  uint32_t OpenCount() const override { return s_->OpenCount(); }
  absl::Status ClearDrain(absl::string_view h) override {
    return s_->ClearDrain(h);
  }
  std::map<std::string, std::string> Drains() const override {
    return s_->Drains();
  }
  absl::Status SavePolicy(absl::string_view j,
                          const v1::JobPolicy& p) override {
    return s_->SavePolicy(j, p);
  }
  std::map<std::string, v1::JobPolicy> Policies() const override {
    return s_->Policies();
  }
  absl::Status SaveSyncPolicy(absl::string_view j,
                              const v1::SyncSettings& p) override {
    return s_->SaveSyncPolicy(j, p);
  }
  absl::StatusOr<std::map<std::string, v1::SyncSettings>> SyncPolicies()
      const override {
    return s_->SyncPolicies();
  }
  absl::Status SaveLoraPolicy(absl::string_view j,
                              const v1::LoraSettings& p) override {
    return s_->SaveLoraPolicy(j, p);
  }
  absl::StatusOr<std::map<std::string, v1::LoraSettings>> LoraPolicies()
      const override {
    return s_->LoraPolicies();
  }
  absl::Status SaveJobHosts(const v1::SetJobHostsRequest& n) override {
    Hold();
    return s_->SaveJobHosts(n);
  }
  absl::StatusOr<std::map<std::string, v1::SetJobHostsRequest>> ScheduledHosts()
      const override {
    return s_->ScheduledHosts();
  }
  absl::Status SaveMigration(const v1::Migration& m) override {
    return s_->SaveMigration(m);
  }
  absl::StatusOr<std::vector<v1::Migration>> Migrations() const override {
    return s_->Migrations();
  }
  absl::Status SavePlan(const StoredPlan& p) override {
    return s_->SavePlan(p);
  }
  absl::StatusOr<std::vector<StoredPlan>> Plans() const override {
    return s_->Plans();
  }
  const std::string& path() const override { return s_->path(); }

 private:
  void Hold() {
    MutexLock l(&mu_);
    entered_ = true;
    while (!released_) cv_.Wait(&mu_);
  }
  std::unique_ptr<FaultStore> s_;
  Mutex mu_;
  CondVar cv_;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  bool entered_ ABSL_GUARDED_BY(mu_) = false;
};

class NullSink : public CommandSink {
 public:
  void Send(const v1::ConnectResponse&) override {}
};

// A controller on a HeldDrainStore with `host`'s agent connected (core
// null on failure).
struct HeldCore {
  // Once the store holds a write: sends `batch`, waits for it (generous for
  // a loaded CI machine: it needs microseconds), then lets the write go.
  // Whether the batch was joined while the write was held; its status.
  bool JoinedWhileHeld(const v1::ConnectRequest& batch, absl::Status* status) {
    for (int i = 0; i < 6000 && !held->entered(); ++i) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_TRUE(held->entered()) << "the write never reached the store";
    auto joined = std::async(std::launch::async,
                             [&] { return core->AgentBatch(session, batch); });
    const bool in_time =
        joined.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
    held->Release();
    *status = joined.get();
    return in_time;
  }
  HeldDrainStore* held = nullptr;
  std::unique_ptr<Controller> core;
  uint64_t session = 0;
};
HeldCore StartHeld(const std::string& host, CommandSink* sink) {
  HeldCore h;
  Controller::Options o;
  o.open_store = [&h]() -> absl::StatusOr<std::unique_ptr<FaultStore>> {
    auto s = FaultStore::Open(":memory:");
    if (!s.ok()) return s.status();
    auto w = std::make_unique<HeldDrainStore>(std::move(*s));
    h.held = w.get();
    return std::unique_ptr<FaultStore>(std::move(w));
  };
  auto core = Controller::Create(o);
  EXPECT_TRUE(core.ok()) << core.status();
  if (!core.ok()) return h;
  v1::NodeRegistration reg;
  reg.set_host(host);
  auto session = (*core)->AgentConnected(reg, sink);
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return h;
  h.session = *session;
  h.core = std::move(*core);
  return h;
}

TEST(DurableWriteLockTest, ABatchIsJoinedWhileADrainIsBeingWritten) {
  NullSink sink;
  HeldCore h = StartHeld("n1", &sink);
  ASSERT_NE(h.core, nullptr);
  Controller* core = h.core.get();
  auto drain = std::async(std::launch::async,
                          [&] { return core->nodes().Drain("n1", "bad NIC"); });
  // The drain's write is on its way: a batch is joined meanwhile (before:
  // it waited for the drain, which held the lock until the write ended).
  v1::CommunicatorInfo info;
  info.set_comm_hash(0xabc);
  info.set_n_ranks(2);
  info.set_rank(0);
  info.set_job_id("j");
  info.set_host("n1");
  v1::ConnectRequest batch;
  *batch.add_communicators() = info;
  absl::Status joined;
  EXPECT_TRUE(h.JoinedWhileHeld(batch, &joined))
      << "the batch waited for the drain's disk write";
  EXPECT_TRUE(joined.ok()) << joined;
  auto node = drain.get();
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(node->state(), v1::NODE_STATE_DRAINED);
  EXPECT_EQ(core->ingest().Communicators("j").size(), 1u);
}

// Round 23: SetJobHosts stores the naming before it sets it, without the
// lock batches need: a batch of another job is joined while the write is
// held, and the naming takes effect once it is stored.
TEST(DurableWriteLockTest, ABatchIsJoinedWhileAJobsHostsAreBeingWritten) {
  NullSink sink;
  HeldCore h = StartHeld("n3", &sink);
  ASSERT_NE(h.core, nullptr);
  Controller* core = h.core.get();
  auto naming = std::async(std::launch::async, [&] {
    return core->ingest().SetJobHosts("good", {"n1", "n2"}, "slurm");
  });
  v1::ConnectRequest batch;
  *batch.add_communicators() = testing::ListedComm(0xabc, "other", 0, 0, 2);
  absl::Status joined;
  EXPECT_TRUE(h.JoinedWhileHeld(batch, &joined))
      << "the batch waited for the naming's store write";
  EXPECT_TRUE(joined.ok()) << joined;
  auto named = naming.get();
  ASSERT_TRUE(named.ok()) << named.status();
  batch.clear_communicators();
  *batch.add_communicators() = testing::ListedComm(0xabd, "good", 0, 0, 2);
  EXPECT_TRUE(absl::IsPermissionDenied(core->AgentBatch(h.session, batch)));
  core->AgentDisconnected(h.session);
}

}  // namespace
}  // namespace pitstop::controller
