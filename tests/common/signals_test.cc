#include "pitstop/signals.h"

#include <pthread.h>

#include "gtest/gtest.h"

namespace pitstop {
namespace {

TEST(ShutdownSignalsTest, TimesOutWithoutSignal) {
  auto signals = ShutdownSignals::Create();
  ASSERT_TRUE(signals.ok());
  EXPECT_EQ((*signals)->Wait(absl::Milliseconds(10)), 0);
}

TEST(ShutdownSignalsTest, ReceivesSigterm) {
  auto signals = ShutdownSignals::Create();
  ASSERT_TRUE(signals.ok());
  ASSERT_EQ(pthread_kill(pthread_self(), SIGTERM), 0);
  EXPECT_EQ((*signals)->Wait(absl::Seconds(5)), SIGTERM);
}

TEST(ShutdownSignalsTest, ReceivesSigint) {
  auto signals = ShutdownSignals::Create();
  ASSERT_TRUE(signals.ok());
  ASSERT_EQ(pthread_kill(pthread_self(), SIGINT), 0);
  EXPECT_EQ((*signals)->Wait(absl::Seconds(5)), SIGINT);
}

}  // namespace
}  // namespace pitstop
