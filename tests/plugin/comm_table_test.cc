// CommTable (plugin/comm_table.h): handles, lookups, the swap rules, and
// readers on several threads while another thread swaps; NCCL version ->
// rebuild primitives (plugin/nccl_caps.h).
#include "plugin/comm_table.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "plugin/nccl_caps.h"

namespace pitstop::plugin {
namespace {

// Fake communicators: never dereferenced by the table.
void* FakeComm(uint64_t n) { return reinterpret_cast<void*>(0x10000 + 16 * n); }

class CommTableTest : public ::testing::Test {
 protected:
  // 4096 slots of 64 bytes plus the cold state: too big for a stack.
  std::unique_ptr<CommTable> table_ = std::make_unique<CommTable>();
};

TEST_F(CommTableTest, HandlesAreOursAndNothingElseIs) {
  void* h = table_->Bind(FakeComm(1), 0, 2);
  ASSERT_NE(h, nullptr);
  EXPECT_NE(h, FakeComm(1));
  EXPECT_TRUE(table_->IsHandle(h));
  int on_stack = 0;
  auto on_heap = std::make_unique<int>(0);
  EXPECT_FALSE(table_->IsHandle(nullptr));
  EXPECT_FALSE(table_->IsHandle(&on_stack));
  EXPECT_FALSE(table_->IsHandle(on_heap.get()));
  EXPECT_FALSE(table_->IsHandle(FakeComm(1)));
  EXPECT_FALSE(table_->IsHandle(static_cast<char*>(h) + 8));  // inside a slot
  void* h2 = table_->Bind(FakeComm(2), 1, 2);
  EXPECT_TRUE(table_->IsHandle(h2));
  EXPECT_NE(h, h2);
}

TEST_F(CommTableTest, AcquireGivesTheBindingAndCountsTheCall) {
  void* h = table_->Bind(FakeComm(1), 3, 8);
  const CommBinding* b = table_->Acquire(h);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->comm, FakeComm(1));
  EXPECT_EQ(b->epoch, 1u);
  EXPECT_EQ(b->rank, 3);
  EXPECT_EQ(b->n_ranks, 8);
  EXPECT_EQ(table_->Holders(h), 1u);
  table_->Release(h);
  EXPECT_EQ(table_->Holders(h), 0u);
}

TEST_F(CommTableTest, SwapBumpsTheEpochAndHandsBackTheOldComm) {
  void* h = table_->Bind(FakeComm(1), 0, 2);
  for (uint64_t e = 2; e <= 5; ++e) {
    const SwapOutcome o = table_->Swap(h, FakeComm(e), 1, 3);
    ASSERT_EQ(o.code, SwapCode::kOk) << o.error;
    EXPECT_EQ(o.old_comm, FakeComm(e - 1));
    EXPECT_EQ(o.new_epoch, e);
    const CommBinding* b = table_->Acquire(h);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->comm, FakeComm(e));
    EXPECT_EQ(b->epoch, e);
    EXPECT_EQ(b->rank, 1);
    EXPECT_EQ(b->n_ranks, 3);
    table_->Release(h);
  }
}

TEST_F(CommTableTest, SwapIsRefusedWhileACallIsInFlight) {
  void* h = table_->Bind(FakeComm(1), 0, 2);
  ASSERT_NE(table_->Acquire(h), nullptr);
  SwapOutcome o = table_->Swap(h, FakeComm(2), 0, 2);
  EXPECT_EQ(o.code, SwapCode::kOutstanding);
  EXPECT_NE(o.error.find("in flight"), std::string::npos) << o.error;
  EXPECT_EQ(o.old_comm, nullptr);
  table_->Release(h);
  CommBinding now;
  ASSERT_TRUE(table_->Snapshot(h, &now));
  EXPECT_EQ(now.comm, FakeComm(1));  // the refusal changed nothing
  EXPECT_EQ(table_->Swap(h, FakeComm(2), 0, 2).code, SwapCode::kOk);
}

TEST_F(CommTableTest, SwapRefusesBadArguments) {
  void* h = table_->Bind(FakeComm(1), 0, 2);
  void* other = table_->Bind(FakeComm(7), 0, 2);
  EXPECT_EQ(table_->Swap(FakeComm(1), FakeComm(2), 0, 2).code,
            SwapCode::kNotAHandle);
  EXPECT_EQ(table_->Swap(h, nullptr, 0, 2).code, SwapCode::kBadArgument);
  EXPECT_EQ(table_->Swap(h, other, 0, 2).code, SwapCode::kBadArgument);
  EXPECT_EQ(table_->Swap(h, FakeComm(2), 2, 2).code, SwapCode::kBadArgument);
  EXPECT_EQ(table_->Swap(h, FakeComm(2), -1, 2).code, SwapCode::kBadArgument);
  // Bound to another handle already: two handles never share a comm.
  EXPECT_EQ(table_->Swap(h, FakeComm(7), 0, 2).code, SwapCode::kBadArgument);
  EXPECT_EQ(table_->Swap(h, FakeComm(1), 0, 2).code, SwapCode::kBadArgument);
}

TEST_F(CommTableTest, UserObjectsOnTheOldCommBlockTheSwap) {
  void* h = table_->Bind(FakeComm(1), 0, 2);
  table_->AddUserObjects(h, 1);
  table_->AddUserObjects(h, 1);
  const SwapOutcome o = table_->Swap(h, FakeComm(2), 0, 2);
  EXPECT_EQ(o.code, SwapCode::kUserObjects);
  EXPECT_NE(o.error.find("2 user reduction op(s)"), std::string::npos)
      << o.error;
  table_->AddUserObjects(h, -1);
  EXPECT_EQ(table_->Swap(h, FakeComm(2), 0, 2).code, SwapCode::kUserObjects);
  table_->AddUserObjects(h, -1);
  EXPECT_EQ(table_->Swap(h, FakeComm(2), 0, 2).code, SwapCode::kOk);
}

TEST_F(CommTableTest, RevokeIsReportedByTheNextSwapOnly) {
  void* h = table_->Bind(FakeComm(1), 0, 2);
  table_->MarkRevoked(h);
  SwapOutcome o = table_->Swap(h, FakeComm(2), 0, 2);
  ASSERT_EQ(o.code, SwapCode::kOk);
  EXPECT_TRUE(o.old_revoked);
  o = table_->Swap(h, FakeComm(3), 0, 2);
  ASSERT_EQ(o.code, SwapCode::kOk);
  EXPECT_FALSE(o.old_revoked);
}

TEST_F(CommTableTest, UnbindReleasesOnceAndRefusesLaterUse) {
  void* h = table_->Bind(FakeComm(1), 0, 2);
  EXPECT_EQ(table_->Unbind(h), FakeComm(1));
  EXPECT_EQ(table_->Unbind(h), nullptr);  // a second destroy/abort
  EXPECT_EQ(table_->Acquire(h), nullptr);
  EXPECT_EQ(table_->Holders(h), 0u);
  EXPECT_EQ(table_->Swap(h, FakeComm(2), 0, 2).code, SwapCode::kReleased);
  CommBinding b;
  EXPECT_FALSE(table_->Snapshot(h, &b));
  EXPECT_TRUE(table_->IsHandle(h));  // still ours: never passed to NCCL
}

TEST_F(CommTableTest, AFullTableSaysSoAndReusesReleasedSlotsLast) {
  std::vector<void*> handles;
  for (int i = 0; i < CommTable::kCapacity; ++i) {
    void* h = table_->Bind(FakeComm(i + 1), 0, 1);
    ASSERT_NE(h, nullptr) << i;
    handles.push_back(h);
  }
  EXPECT_EQ(table_->Bind(FakeComm(99999), 0, 1), nullptr);
  ASSERT_EQ(table_->Unbind(handles[17]), FakeComm(18));
  void* again = table_->Bind(FakeComm(99999), 0, 1);
  EXPECT_EQ(again, handles[17]);
  CommBinding b;
  ASSERT_TRUE(table_->Snapshot(again, &b));
  EXPECT_EQ(b.comm, FakeComm(99999));
  EXPECT_EQ(b.epoch, 1u);
}

// Readers hammer one handle while a writer swaps it. A comm handed back by
// a successful swap is "retired" at once (as the rebuild would destroy it);
// no reader may hold a retired comm, and each reader's epochs only grow.
TEST_F(CommTableTest, ConcurrentReadersNeverUseASwappedOutComm) {
  void* h = table_->Bind(FakeComm(1), 0, 2);
  std::atomic<uint64_t> retired_up_to{0};  // every epoch <= this is freed
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> violations{0}, reads{0};
  auto reader = [&] {
    uint64_t last = 0, local_reads = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      const CommBinding* b = table_->Acquire(h);
      if (b == nullptr) break;
      const uint64_t e = b->epoch;
      if (b->comm != FakeComm(e) || e < last) violations.fetch_add(1);
      // Hold the call a little, as a real one would.
      for (int i = 0; i < 50; ++i)
        std::atomic_signal_fence(std::memory_order_seq_cst);
      if (retired_up_to.load(std::memory_order_acquire) >= e) {
        violations.fetch_add(1);
      }
      last = e;
      table_->Release(h);
      reads.fetch_add(1, std::memory_order_relaxed);
      if (++local_reads % 16 == 0) std::this_thread::yield();
    }
  };
  std::vector<std::thread> readers;
  for (int i = 0; i < 3; ++i) readers.emplace_back(reader);
  uint64_t swaps = 0, refused = 0, epoch = 1;
  bool failed = false;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  // Until enough of both happened, interleaved (the readers start late),
  // and a swap was refused once (a reader held the handle). Bounded in
  // swaps too: starved readers must not let the writer run the handle
  // out of epochs (CommTable::kMaxEpoch).
  constexpr uint64_t kMaxSwaps = 200'000;
  while ((swaps < 1000 || reads.load() < 200000 || refused == 0) &&
         swaps < kMaxSwaps && !failed &&
         std::chrono::steady_clock::now() < deadline) {
    const SwapOutcome o = table_->Swap(h, FakeComm(epoch + 1), 0, 2);
    if (o.code == SwapCode::kOk) {
      EXPECT_EQ(o.old_comm, FakeComm(epoch));
      failed |= o.old_comm != FakeComm(epoch);
      retired_up_to.store(epoch, std::memory_order_release);
      ++epoch;
      ++swaps;
    } else {
      EXPECT_EQ(o.code, SwapCode::kOutstanding) << o.error;
      failed |= o.code != SwapCode::kOutstanding;
      ++refused;
      std::this_thread::yield();
    }
  }
  stop.store(true);
  for (auto& t : readers) t.join();  // before any assertion can return
  EXPECT_EQ(violations.load(), 0u);
  EXPECT_GE(swaps, 1000u) << "refused " << refused;
  EXPECT_GT(reads.load(), 0u);
  // Whether a reader held the handle while the writer tried depends on the
  // scheduler (on 2 loaded cores it may not happen in 20 s); the refusal
  // itself is pinned deterministically by SwapIsRefusedWhileACallIsInFlight.
  std::cout << "swaps " << swaps << ", refused " << refused << ", reads "
            << reads.load() << "\n";
  EXPECT_EQ(table_->Holders(h), 0u);
}

TEST(NcclCapsTest, VersionCodesGiveTheRebuildPrimitives) {
  const NcclCapabilities v2289 = CapabilitiesOf(22809);
  EXPECT_EQ(v2289.major, 2);
  EXPECT_EQ(v2289.minor, 28);
  EXPECT_EQ(v2289.patch, 9);
  EXPECT_TRUE(v2289.shrink);
  EXPECT_TRUE(v2289.revoke);
  EXPECT_FALSE(v2289.grow);
  EXPECT_FALSE(CapabilitiesOf(22806).revoke);
  EXPECT_TRUE(CapabilitiesOf(22807).revoke);
  EXPECT_FALSE(CapabilitiesOf(22605).shrink);
  EXPECT_TRUE(CapabilitiesOf(22700).shrink);
  EXPECT_FALSE(CapabilitiesOf(22901).grow);
  EXPECT_TRUE(CapabilitiesOf(22902).grow);
  const NcclCapabilities old = CapabilitiesOf(2804);  // 2.8.4, old scheme
  EXPECT_EQ(old.major, 2);
  EXPECT_EQ(old.minor, 8);
  EXPECT_EQ(old.patch, 4);
  EXPECT_FALSE(old.shrink);
  EXPECT_EQ(CapabilitiesOf(0).version, 0);
  EXPECT_EQ(DescribeCapabilities(v2289),
            "NCCL 2.28.9: shrink yes, revoke yes, grow no");
  EXPECT_EQ(DescribeCapabilities(CapabilitiesOf(0)), "no NCCL loaded");
}

TEST(NcclCapsTest, ProbeWithoutNcclInTheProcessSaysSo) {
  // This test binary does not load libnccl.
  EXPECT_EQ(ProbeNcclCapabilities().version, 0);
}

}  // namespace
}  // namespace pitstop::plugin
