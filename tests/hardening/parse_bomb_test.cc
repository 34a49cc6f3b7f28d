// Issue #33, F6, against a real pitstop-controller over loopback gRPC: an
// AgentLink batch of empty CollectiveSummary entries (2 bytes each on the
// wire, ~100 times that parsed) is refused before it is parsed, counted in
// refused_total{what="batch_parse_cost"}, and the controller stays small
// (before: an 8 MiB batch took it to 916 MB); another host's collectives
// are still joined.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "tests/controller/test_agent.h"
#include "tests/hardening/daemons.h"

namespace pitstop::hardening {
namespace {

using agent::testing::Eventually;
using agent::testing::TempDir;
using controller::testing::TestAgent;

constexpr uint64_t kGood = 0x600D3;
// docs/reliability.md, "Parse cost": the batch's wire bytes, read and
// held by gRPC, plus the controller's own ~30 MB; before, ~110x the bytes.
constexpr size_t kControllerRssBound = size_t{160} << 20;

// PITSTOP_PARSE_BOMB_MIB (default 8): the batch's size in MiB.
int BombMiB() {
  const char* n = std::getenv("PITSTOP_PARSE_BOMB_MIB");
  return n != nullptr ? std::atoi(n) : 8;
}

TEST(ParseBombTest, EmptyEntriesAreRefusedBeforeTheyAreParsed) {
  TempDir dir;
  ControllerDaemon c(dir);
  ASSERT_TRUE(c.ok());
  TestAgent good(c.target(), Registration("good-node"));
  ASSERT_TRUE(good.Send(BothMembers(kGood, "good")));

  std::atomic<bool> stop{false};
  size_t peak = 0;
  std::thread sampler([&] {
    while (!stop.load()) {
      peak = std::max(peak, RssOf(c.process().pid()));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  {
    TestAgent evil(c.target(), Registration("evil-node"));
    v1::ConnectRequest bomb;
    for (int i = 0; i < (BombMiB() << 20) / 2; ++i) bomb.add_summaries();
    ASSERT_TRUE(evil.Send(bomb));
    // Whether refused or (before) parsed and joined, the batch is done
    // when the good host's next batch is.
    v1::ConnectRequest b;
    AddCollectives(&b, kGood, 0, 20);
    ASSERT_TRUE(good.Send(b));
    EXPECT_TRUE(Eventually([&] { return c.Joined(kGood) >= 20; })) << c.log();
    EXPECT_TRUE(Eventually([&] {
      return MetricValue(c.metrics_port(), "pitstop_controller_refused_total",
                         "what=\"batch_parse_cost\"") >= 1;
    })) << c.log();
    const grpc::Status closed = evil.Close();
    EXPECT_EQ(closed.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << closed.error_message();
  }
  stop.store(true);
  sampler.join();
  std::cout << "controller peak RSS under a " << BombMiB()
            << " MiB batch of empty summaries: " << (peak >> 20) << " MiB\n";
  EXPECT_LT(peak, kControllerRssBound);
}

}  // namespace
}  // namespace pitstop::hardening
