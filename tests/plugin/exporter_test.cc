// Exporter thread behaviour that needs no agent: the fork() handshake
// (PauseForFork / ResumeAfterFork) that keeps the thread out of its tick,
// and so out of the allocator, while a process forks.
#include "plugin/exporter.h"

#include <time.h>

#include <atomic>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "plugin/comm_registry.h"
#include "plugin/config.h"
#include "plugin/ring.h"

namespace pitstop::plugin {
namespace {

void SleepMs(int ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, nullptr);
}

TEST(ExporterForkTest, PauseWaitsForTheTickInFlightAndHoldsTheNextOnes) {
  RingSet rings(1, 1024);
  CommRegistry registry(kDefaultEventMask, 0);
  std::atomic<int> ticks{0};
  std::atomic<bool> inside{false};
  ExporterOptions o;
  o.socket_path = "/nonexistent/pitstop-exporter-test.sock";  // no agent
  o.flush_interval_ms = 1;
  // Each tick spends 20 ms here, so a pause that did not wait would almost
  // always return while one is in flight.
  o.on_tick = [&] {
    inside.store(true);
    ticks.fetch_add(1);
    SleepMs(20);
    inside.store(false);
  };
  std::unique_ptr<Exporter> exporter =
      Exporter::Start(std::move(o), &rings, &registry);
  for (int i = 0; i < 5000 && ticks.load() < 2; ++i) SleepMs(2);
  ASSERT_GE(ticks.load(), 2) << "the exporter thread never ticked";

  for (int round = 0; round < 3; ++round) {
    exporter->PauseForFork();
    EXPECT_FALSE(inside.load()) << "PauseForFork returned mid-tick";
    const int paused_at = ticks.load();
    SleepMs(50);  // many flush intervals
    EXPECT_EQ(ticks.load(), paused_at) << "a tick ran while paused";
    exporter->ResumeAfterFork();
    for (int i = 0; i < 5000 && ticks.load() == paused_at; ++i) SleepMs(2);
    EXPECT_GT(ticks.load(), paused_at) << "no tick after ResumeAfterFork";
  }
  exporter->Stop(kGoodbyeFinalize);
}

}  // namespace
}  // namespace pitstop::plugin
