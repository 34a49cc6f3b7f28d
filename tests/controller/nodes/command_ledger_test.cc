// CommandLedger: what the controller keeps of the commands agents ack, and
// what it writes again to a reconnected agent.
#include "src/controller/nodes/command_ledger.h"

#include "gtest/gtest.h"
#include "pitstop/clock.h"

namespace pitstop::controller {
namespace {

v1::AgentCommand Mask(uint64_t id, uint32_t duration_ms) {
  v1::AgentCommand c;
  c.set_command_id(id);
  c.mutable_set_activation_mask()->set_comm_hash(0xabc);
  c.mutable_set_activation_mask()->set_rank(-1);
  c.mutable_set_activation_mask()->set_event_mask(0x58);
  c.mutable_set_activation_mask()->set_duration_ms(duration_ms);
  return c;
}

v1::AgentCommand Path(uint64_t id, const std::string& job, uint64_t epoch) {
  v1::AgentCommand c;
  c.set_command_id(id);
  c.mutable_path()->set_job_id(job);
  c.mutable_path()->set_epoch(epoch);
  return c;
}

TEST(CommandLedgerTest, UnackedCommandsAreWrittenAgainOnceAcked) {
  FakeClock clock;
  CommandLedger ledger(&clock);
  ledger.Sent("node0", Mask(1, 30'000));
  ledger.Sent("node0", Path(2, "job", 1));
  ledger.Sent("node1", Path(3, "job", 1));
  EXPECT_TRUE(ledger.Acked("node1", 3));
  EXPECT_FALSE(ledger.Acked("node1", 3));  // once
  EXPECT_FALSE(ledger.Acked("node1", 2));  // another host's

  std::vector<v1::AgentCommand> again = ledger.ForReconnect("node0");
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].command_id(), 1u);  // oldest first, same ids
  EXPECT_EQ(again[1].command_id(), 2u);
  EXPECT_TRUE(ledger.ForReconnect("node1").empty());
  // Still unacked: a second reconnect writes them again.
  EXPECT_EQ(ledger.ForReconnect("node0").size(), 2u);
  EXPECT_TRUE(ledger.Acked("node0", 1));
  EXPECT_TRUE(ledger.Acked("node0", 2));
  EXPECT_TRUE(ledger.ForReconnect("node0").empty());

  const CommandLedger::Counts c = ledger.HostCounts("node0");
  EXPECT_EQ(c.sent, 2u);
  EXPECT_EQ(c.resent, 4u);
  EXPECT_EQ(c.acked, 2u);
  EXPECT_EQ(c.pending, 0u);
  const CommandLedger::Counts t = ledger.Total();
  EXPECT_EQ(t.sent, 3u);
  EXPECT_EQ(t.acked, 3u);
}

TEST(CommandLedgerTest, DeepProfilingAsksForWhatIsLeftAndExpires) {
  FakeClock clock;
  CommandLedger ledger(&clock);
  ledger.Sent("node0", Mask(1, 30'000));
  clock.Advance(absl::Seconds(10));
  std::vector<v1::AgentCommand> again = ledger.ForReconnect("node0");
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].set_activation_mask().duration_ms(), 20'000u);
  clock.Advance(absl::Seconds(21));
  EXPECT_TRUE(ledger.ForReconnect("node0").empty());  // over: not asked again
  EXPECT_EQ(ledger.HostCounts("node0").dropped, 1u);
  EXPECT_EQ(ledger.HostCounts("node0").pending, 0u);
}

TEST(CommandLedgerTest, ANewerPlanOfAJobReplacesTheUnackedOne) {
  FakeClock clock;
  CommandLedger ledger(&clock);
  ledger.Sent("node0", Path(1, "a", 1));
  ledger.Sent("node0", Path(2, "b", 1));
  ledger.Sent("node0", Path(3, "a", 2));
  std::vector<v1::AgentCommand> again = ledger.ForReconnect("node0");
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].path().job_id(), "b");
  EXPECT_EQ(again[1].path().job_id(), "a");
  EXPECT_EQ(again[1].path().epoch(), 2u);
  EXPECT_EQ(ledger.HostCounts("node0").dropped, 1u);
}

TEST(CommandLedgerTest, QueuedForAnAbsentAgentCountsAsSentWhenWritten) {
  FakeClock clock;
  CommandLedger ledger(&clock);
  ledger.Sent("node0", Path(1, "a", 1), /*delivered=*/false);
  EXPECT_EQ(ledger.HostCounts("node0").sent, 0u);
  ASSERT_EQ(ledger.ForReconnect("node0").size(), 1u);
  EXPECT_EQ(ledger.HostCounts("node0").sent, 1u);
  EXPECT_EQ(ledger.HostCounts("node0").resent, 0u);
}

TEST(CommandLedgerTest, UntrackedCommandsAndTheBudget) {
  FakeClock clock;
  CommandLedger ledger(&clock, {.max_pending_per_host = 3});
  v1::AgentCommand ping;
  ping.set_command_id(9);
  ping.set_ping(true);
  EXPECT_FALSE(CommandLedger::Tracked(ping));
  ledger.Sent("node0", ping);
  v1::AgentCommand trainer;
  trainer.set_command_id(10);
  trainer.mutable_trainer_directive();
  EXPECT_FALSE(CommandLedger::Tracked(trainer));
  ledger.Sent("node0", trainer);
  EXPECT_TRUE(ledger.ForReconnect("node0").empty());
  for (uint64_t id = 1; id <= 5; ++id) ledger.Sent("node0", Mask(id, 0));
  std::vector<v1::AgentCommand> again = ledger.ForReconnect("node0");
  ASSERT_EQ(again.size(), 3u);
  EXPECT_EQ(again[0].command_id(), 3u);  // the oldest two dropped
  EXPECT_EQ(ledger.HostCounts("node0").dropped, 2u);
  ledger.Forget("node0");
  EXPECT_EQ(ledger.HostCounts("node0").pending, 0u);
  EXPECT_EQ(ledger.Total().dropped, 5u);  // 2 + the 3 pending forgotten
  EXPECT_EQ(ledger.Total().sent, 5u);
}

}  // namespace
}  // namespace pitstop::controller
