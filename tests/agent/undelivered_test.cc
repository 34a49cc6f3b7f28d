// Issue #11, "lost without a count": an agent that stops while the
// controller is unreachable says how many summaries/events it had accepted
// and not delivered, and the next agent on the socket reports that count
// upstream (AgentCounters.undelivered).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/agent/fake_rank.h"
#include "tests/agent/process_util.h"
#include "tests/agent/test_receiver.h"
#include "tests/agent/test_util.h"

namespace pitstop::agent {
namespace {

using ::testing::HasSubstr;
using testing::Process;
using testing::ReadFile;
using testing::TempDir;

TEST(UndeliveredTest, StoppedAgentCountsWhatItCouldNotDeliver) {
  TempDir dir;
  const std::string sock = dir.file("a.sock");
  const std::string agent = testing::BinaryPath("src/agent/pitstop-agent");
  {
    // Port 1 on loopback: nothing listens, the summaries stay buffered.
    Process a({agent, "--ingest-socket", sock, "--controller", "127.0.0.1:1",
               "--metrics-address", ""},
              {}, dir.file("1.out"), dir.file("1.err"));
    ASSERT_GE(testing::WaitAgentReady(dir.file("1.out"), &a), 0)
        << ReadFile(dir.file("1.err"));
    testing::FakeRank rank(sock);
    v1::StreamTelemetryRequest req =
        testing::MakeHello(getpid(), 0, 0xAB, 0, 2);
    testing::AddCompleteOps(&req, 0xAB, 0, 1, 10);
    ASSERT_TRUE(rank.Send(req));
    ASSERT_TRUE(rank.Send(testing::MakeGoodbye()));
    EXPECT_TRUE(rank.Close().ok());
    absl::SleepFor(absl::Milliseconds(500));
    a.Signal(SIGTERM);
    const int st = a.Wait();
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  }
  // 10 summaries and the STREAM_OPENED and CLEAN_EXIT events.
  EXPECT_THAT(ReadFile(dir.file("1.err")),
              HasSubstr("stopping with 12 summaries/lifecycle events"));
  uint64_t left = 0;
  ASSERT_TRUE(absl::SimpleAtoi(
      absl::StripAsciiWhitespace(ReadFile(sock + ".undelivered")), &left));
  EXPECT_EQ(left, 12u);

  // The next agent reports it to the controller.
  testing::TestReceiver receiver;
  Process b({agent, "--ingest-socket", sock, "--controller",
             absl::StrCat("127.0.0.1:", receiver.port()), "--metrics-address",
             "", "--batch-ms", "100"},
            {}, dir.file("2.out"), dir.file("2.err"));
  ASSERT_GE(testing::WaitAgentReady(dir.file("2.out"), &b), 0);
  EXPECT_TRUE(testing::Eventually([&] {
    for (const v1::ConnectRequest& r : receiver.requests()) {
      if (r.counters().undelivered() == 12) return true;
    }
    return false;
  })) << ReadFile(dir.file("2.err"));
  EXPECT_THAT(ReadFile(dir.file("2.err")), HasSubstr("previous agent"));
}

}  // namespace
}  // namespace pitstop::agent
