// RecordLossLedger (src/controller/nodes/record_loss.h): records a killed agent
// had read and never delivered, from the ranks' counters at the next agent.
#include "src/controller/nodes/record_loss.h"

#include <cstdint>
#include <string>

#include "gtest/gtest.h"

namespace pitstop::controller {
namespace {

v1::ProcessRecords Rec(uint32_t pid, uint64_t start, uint64_t before,
                       uint64_t read, uint64_t produced = 0) {
  v1::ProcessRecords r;
  r.set_pid(pid);
  r.set_counters_start_unix_ns(start);
  r.set_records_before(before);
  r.set_records_read(read);
  r.set_records_produced(produced);
  return r;
}

class RecordLossTest : public ::testing::Test {
 protected:
  uint64_t Observe(const std::string& agent, const v1::ProcessRecords& r) {
    uint64_t lost = 0;
    EXPECT_TRUE(ledger_.Observe(agent, r, &budget_, &lost));
    return lost;
  }
  RecordLossLedger ledger_;
  int64_t budget_ = 100;
};

TEST_F(RecordLossTest, KilledAgentLossIsBeforeMinusDelivered) {
  EXPECT_EQ(Observe("a1", Rec(7, 1000, 0, 100)), 0u);
  EXPECT_EQ(Observe("a1", Rec(7, 1000, 0, 250)), 0u);
  // a1 read 400 (says the process) but its last batch said 250.
  EXPECT_EQ(Observe("a2", Rec(7, 1000, 400, 10, 500)), 150u);
  EXPECT_EQ(Observe("a2", Rec(7, 1000, 400, 100, 500)), 0u);
  RecordLossLedger::Totals t = ledger_.totals();
  EXPECT_EQ(t.lost_in_agent, 150u);
  EXPECT_EQ(t.received, 350u);  // 250 through a1, 100 through a2
  EXPECT_EQ(t.sent, 500u);
  // A third agent: cumulative, only the new loss counts (a2 read 100 of
  // which its batches said 100: nothing new).
  EXPECT_EQ(Observe("a3", Rec(7, 1000, 500, 0, 500)), 0u);
  EXPECT_EQ(ledger_.totals().lost_in_agent, 150u);
  EXPECT_EQ(Observe("a4", Rec(7, 1000, 520, 0, 520)), 20u);
  EXPECT_EQ(ledger_.totals().lost_in_agent, 170u);
}

TEST_F(RecordLossTest, RestartedRankWithTheSamePidIsANewProcess) {
  EXPECT_EQ(Observe("a1", Rec(1, 1000, 0, 5000)), 0u);
  // Same pid (a container's pid 1), counters from zero, new start: not a
  // loss of 5000, whatever agent reports it.
  EXPECT_EQ(Observe("a1", Rec(1, 2000, 0, 10)), 0u);
  EXPECT_EQ(Observe("a2", Rec(1, 2000, 10, 0)), 0u);
  EXPECT_EQ(ledger_.totals().lost_in_agent, 0u);
  EXPECT_EQ(ledger_.totals().processes, 2u);
}

TEST_F(RecordLossTest, FirstSightIsABaselineAndSmallerCountsAreNotLosses) {
  // Heard of first through a2 (the controller restarted, or a1 never got
  // through): what a1 read is not judged.
  EXPECT_EQ(Observe("a2", Rec(3, 1000, 900, 50)), 0u);
  EXPECT_EQ(ledger_.totals().received, 50u);
  // A lying or confused agent: before below what was delivered.
  EXPECT_EQ(Observe("a3", Rec(3, 1000, 10, 0)), 0u);
  EXPECT_EQ(Observe("a3", Rec(3, 1000, 10, 20)), 0u);
  EXPECT_EQ(ledger_.totals().lost_in_agent, 0u);
  // An older batch of the same agent does not lower what it read.
  EXPECT_EQ(Observe("a3", Rec(3, 1000, 10, 5)), 0u);
  EXPECT_EQ(ledger_.totals().received, 70u);
}

TEST_F(RecordLossTest, LibraryWithoutCountersIsNotAccounted) {
  uint64_t lost = 0;
  EXPECT_FALSE(ledger_.Observe("a1", Rec(9, 0, 0, 10), &budget_, &lost));
  EXPECT_EQ(ledger_.totals().processes, 0u);
}

TEST_F(RecordLossTest, BoundedPerHostAndByTheGlobalBudget) {
  int64_t budget = 3;
  uint64_t lost = 0;
  for (uint32_t pid = 1; pid <= 3; ++pid) {
    EXPECT_TRUE(ledger_.Observe("a1", Rec(pid, 1, 0, 10), &budget, &lost));
  }
  EXPECT_EQ(budget, 0);
  EXPECT_FALSE(ledger_.Observe("a1", Rec(4, 1, 0, 10), &budget, &lost));
  EXPECT_EQ(ledger_.totals().processes, 3u);
  ledger_.Release(&budget);
  EXPECT_EQ(budget, 3);

  RecordLossLedger big;
  int64_t plenty = 1 << 20;
  for (uint32_t pid = 0; pid < RecordLossLedger::kMaxProcessesPerHost + 100;
       ++pid) {
    ASSERT_TRUE(big.Observe("a1", Rec(pid, 1, 0, 1), &plenty, &lost));
  }
  EXPECT_EQ(big.totals().processes, RecordLossLedger::kMaxProcessesPerHost);
  // Forgotten processes stay in the totals.
  EXPECT_EQ(big.totals().received,
            RecordLossLedger::kMaxProcessesPerHost + 100);
  EXPECT_EQ(plenty,
            (1 << 20) - int64_t{RecordLossLedger::kMaxProcessesPerHost});
}

}  // namespace
}  // namespace pitstop::controller
