// ProcessLedger (src/agent/process_ledger.h): the agent's half of counting
// records a killed agent had read and never delivered.
#include "src/agent/process_ledger.h"

#include <vector>

#include "gtest/gtest.h"
#include "pitstop/clock.h"

namespace pitstop::agent {
namespace {

shm::HelloFrame HelloOf(uint32_t pid, uint64_t start, uint64_t delivered) {
  shm::HelloFrame h{};
  h.pid = pid;
  h.counters_start_unix_ns = start;
  h.records_delivered = delivered;
  h.counters = {delivered + 10, 3};
  return h;
}

std::vector<v1::ProcessRecords> Snap(ProcessLedger* l, uint64_t* sent) {
  std::vector<v1::ProcessRecords> out;
  *sent = l->Snapshot(&out);
  return out;
}

TEST(ProcessLedgerTest, FirstHelloIsTheBaseAndReadsAddUpOverConnections) {
  FakeClock clock;
  ProcessLedger l(&clock);
  l.Hello(1, HelloOf(7, 100, 500));  // 500 read by earlier agents
  l.RecordsRead(1, 40);
  l.Counters(1, {600, 5});
  l.Closed(1);
  // The same process reconnects to this agent: its hello now includes the
  // 40 this agent read; records_before stays what earlier agents read.
  l.Hello(2, HelloOf(7, 100, 540));
  l.RecordsRead(2, 2);
  uint64_t sent = 0;
  std::vector<v1::ProcessRecords> s = Snap(&l, &sent);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].records_before(), 500u);
  EXPECT_EQ(s[0].records_read(), 42u);
  EXPECT_EQ(s[0].records_produced(), 600u);  // never lowered
  EXPECT_EQ(s[0].records_dropped(), 5u);
  EXPECT_FALSE(s[0].ended());
  EXPECT_EQ(sent, 542u);
}

// A process stopped whole (SIGSTOP, a debugger) sends no heartbeat; its
// peers blocked in a collective still do. SilentNs is how long nothing came
// from it: any frame or record read resets it; unknown and ended processes
// are 0.
TEST(ProcessLedgerTest, SilenceIsTheTimeSinceTheLastFrameOrRecord) {
  FakeClock clock;
  ProcessLedger l(&clock);
  EXPECT_EQ(l.SilentNs(7), 0u);  // unknown
  l.Hello(1, HelloOf(7, 100, 0));
  l.Hello(2, HelloOf(8, 100, 0));
  clock.Advance(absl::Seconds(2));
  l.Counters(2, {20, 0});  // 8's heartbeat
  EXPECT_EQ(l.SilentNs(7), 2'000'000'000u);
  EXPECT_EQ(l.SilentNs(8), 0u);
  clock.Advance(absl::Milliseconds(1500));
  EXPECT_EQ(l.SilentNs(7), 3'500'000'000u);
  EXPECT_EQ(l.SilentNs(8), 1'500'000'000u);
  l.RecordsRead(1, 3);  // 7 wrote records again
  EXPECT_EQ(l.SilentNs(7), 0u);
  clock.Advance(absl::Seconds(5));
  l.Closed(2);  // 8 ended: not silent, gone
  EXPECT_EQ(l.SilentNs(8), 0u);
  EXPECT_EQ(l.SilentNs(7), 5'000'000'000u);
}

TEST(ProcessLedgerTest, RestartedProcessIsNewAndEndedOnesExpire) {
  FakeClock clock;
  ProcessLedger l(&clock);
  l.Hello(1, HelloOf(7, 100, 0));
  l.RecordsRead(1, 9);
  l.Closed(1);
  l.Hello(2, HelloOf(7, 200, 0));  // same pid, counters from zero
  uint64_t sent = 0;
  EXPECT_EQ(Snap(&l, &sent).size(), 2u);
  clock.Advance(absl::Seconds(61));
  std::vector<v1::ProcessRecords> s = Snap(&l, &sent);
  ASSERT_EQ(s.size(), 1u);  // the ended one is forgotten after 60 s...
  EXPECT_EQ(s[0].counters_start_unix_ns(), 200u);
  EXPECT_EQ(sent, 9u);  // ...its count stays in the sum
}

TEST(ProcessLedgerTest, OldLibraryIsNotAccountedAndTheTableIsBounded) {
  FakeClock clock;
  ProcessLedger l(&clock);
  l.Hello(1, HelloOf(7, 0, 0));  // 40-byte hello: no counters start
  uint64_t sent = 0;
  EXPECT_TRUE(Snap(&l, &sent).empty());
  for (uint64_t i = 0; i < ProcessLedger::kMaxProcesses + 5; ++i) {
    l.Hello(100 + i, HelloOf(static_cast<uint32_t>(i), 1, 0));
  }
  EXPECT_EQ(Snap(&l, &sent).size(), ProcessLedger::kMaxProcesses);
  EXPECT_EQ(l.untracked(), 5u);  // all live: nothing to forget
}

}  // namespace
}  // namespace pitstop::agent
