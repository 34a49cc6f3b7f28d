// Issue #15, ingest off the lock: an agent batch that finds the
// controller's lock held (here by a detection cycle stuck in a fault
// watcher) is accepted at once and joined, in order, when the lock is free.
#include "src/controller/ingest_inbox.h"

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "gtest/gtest.h"
#include "pitstop/clock.h"
#include "src/controller/controller_core.h"
#include "tests/controller/sim_job.h"

namespace pitstop::controller::testing {
namespace {

class NullSink : public CommandSink {
 public:
  void Send(const v1::ConnectResponse&) override {}
};

TEST(IngestInboxTest, KeepsOrderAndRefusesBeyondItsBudget) {
  IngestInbox inbox(/*max_bytes=*/64);
  v1::ConnectRequest b;
  b.mutable_counters()->set_connected_ranks(1);
  EXPECT_TRUE(inbox.Push(1, b));
  b.mutable_counters()->set_connected_ranks(2);
  EXPECT_TRUE(inbox.Push(2, b));
  v1::ConnectRequest big;
  big.mutable_registration()->set_host(std::string(100, 'h'));
  EXPECT_FALSE(inbox.Push(3, big));  // over 64 bytes queued
  EXPECT_FALSE(inbox.empty());
  std::vector<IngestInbox::Entry> got = inbox.TakeAll();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].session, 1u);
  EXPECT_EQ(got[1].batch.counters().connected_ranks(), 2u);
  EXPECT_TRUE(inbox.empty());
  EXPECT_TRUE(inbox.Push(3, big));  // an empty inbox takes any one batch
  EXPECT_EQ(inbox.stats().queued, 3u);
  EXPECT_EQ(inbox.stats().full, 1u);
}

TEST(IngestOffLockTest, BatchDoesNotWaitForADetectionCycle) {
  FakeClock clock;
  ControllerCore::Options o;
  o.clock = &clock;
  o.ingest_off_lock = true;  // off by default (controller_core.h)
  auto core_or = ControllerCore::Create(o);
  ASSERT_TRUE(core_or.ok()) << core_or.status();
  ControllerCore* core = core_or->get();
  // A hang: rank 2 never enqueues seq 10, so the next cycle opens a fault.
  SimJob job(0xC8, 4, 2);
  NullSink sink;
  std::vector<uint64_t> sessions;
  for (const v1::NodeRegistration& reg : job.Nodes()) {
    absl::StatusOr<uint64_t> s = core->AgentConnected(reg, &sink);
    ASSERT_TRUE(s.ok()) << s.status();
    sessions.push_back(*s);
  }
  for (int32_t r = 0; r < 4; ++r) {
    v1::ConnectRequest b;
    *b.add_communicators() = job.Info(r);
    *b.add_progress() = job.Progress(r, r == 2 ? 9 : 10, 9);
    ASSERT_TRUE(core->AgentBatch(sessions[r / 2], b).ok());
  }
  // The watcher blocks the cycle (it runs with the core's lock held).
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> first{true};
  core->Subscribe("", false, [&](const v1::WatchFaultsResponse&) {
    if (!first.exchange(false)) return;
    entered.set_value();
    released.wait();
  });
  clock.Advance(absl::Seconds(6));
  std::thread cycle([&] { core->RunCycle(); });
  entered.get_future().wait();

  // The lock is held until release: the batch must not wait for it.
  v1::ConnectRequest counters;
  counters.mutable_counters()->set_connected_ranks(7);
  std::future<absl::Status> sent = std::async(std::launch::async, [&] {
    return core->AgentBatch(sessions[0], counters);
  });
  // A liveness bound, not a timing assertion: waiting for the lock would
  // never finish while the watcher blocks.
  ASSERT_EQ(sent.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_TRUE(sent.get().ok());
  release.set_value();
  cycle.join();

  EXPECT_EQ(core->input_stats().batches_queued, 1u);
  absl::StatusOr<v1::Node> node = core->Node(job.HostOf(0));
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(node->connected_ranks(), 7u);  // joined after the cycle
}

}  // namespace
}  // namespace pitstop::controller::testing
