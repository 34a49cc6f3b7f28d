#include "src/agent/gpu_clock_fit.h"

#include "gtest/gtest.h"

namespace pitstop::agent {
namespace {

TEST(GpuClockFitTest, LowerEnvelopeIsTheOffset) {
  GpuClockFit fit;
  EXPECT_FALSE(fit.fitted());
  EXPECT_EQ(fit.ToCpu(5), 0u);
  const int64_t offset = -700'000;  // GPU timer ahead of the CPU clock
  const uint64_t delays[] = {3000, 150, 9000, 400};
  for (int i = 0; i < 4; ++i) {
    const uint64_t gpu = 10'000'000 + i * 1'000'000;
    fit.AddSample(gpu + offset + delays[i], gpu);
  }
  EXPECT_TRUE(fit.fitted());
  EXPECT_EQ(fit.offset_ns(), offset + 150);
  EXPECT_EQ(fit.ToCpu(20'000'000), 20'000'000u + offset + 150);
  EXPECT_EQ(fit.ToCpu(0), 0u);
}

TEST(GpuClockFitTest, IgnoresUnknownValues) {
  GpuClockFit fit;
  fit.AddSample(0, 100);
  fit.AddSample(100, 0);
  EXPECT_FALSE(fit.fitted());
}

TEST(GpuClockFitTest, FollowsDriftAcrossWindows) {
  GpuClockFit fit(/*window=*/4);
  for (int i = 0; i < 4; ++i) fit.AddSample(1000 + 10 + i, 1000 + i);  // 10
  EXPECT_EQ(fit.offset_ns(), 10);
  for (int i = 0; i < 8; ++i) fit.AddSample(2000 + 50 + i, 2000 + i);  // 50
  // Two full windows later the old minimum has rotated out.
  EXPECT_EQ(fit.offset_ns(), 50);
}

}  // namespace
}  // namespace pitstop::agent
