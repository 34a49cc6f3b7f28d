// ApplySteering on NCCL's cost table and channel count.
#include "tuner/steering.h"

#include "gtest/gtest.h"

namespace pitstop::tuner {
namespace {

constexpr float kIgnore = -1.0f;

struct Table {
  float cells[kNumAlgos][kNumProtos];
  Table() {
    for (auto& row : cells) {
      for (float& c : row) c = kIgnore;
    }
    cells[kAlgoTree][kProtoSimple] = 10;
    cells[kAlgoTree][kProtoLl] = 30;
    cells[kAlgoRing][kProtoSimple] = 12;
    cells[kAlgoRing][kProtoLl128] = 20;
  }
  float* data() { return &cells[0][0]; }
};

TEST(SteeringTest, DisallowedCellsAreIgnoredOthersKeepTheirCost) {
  Table t;
  Steering s;
  s.comm_id = 1;
  s.algo_mask = 1u << kAlgoRing;
  int n = 0;
  SteerOutcome out = ApplySteering(s, t.data(), kNumAlgos, kNumProtos, &n);
  EXPECT_EQ(out.cells_disabled, 2);
  EXPECT_EQ(t.cells[kAlgoTree][kProtoSimple], kIgnore);
  EXPECT_EQ(t.cells[kAlgoTree][kProtoLl], kIgnore);
  EXPECT_EQ(t.cells[kAlgoRing][kProtoSimple], 12);
  EXPECT_EQ(t.cells[kAlgoRing][kProtoLl128], 20);
  EXPECT_EQ(n, 0);  // no channel steering asked
  EXPECT_FALSE(out.channels_set);
}

TEST(SteeringTest, ProtocolMaskCombinesWithAlgorithmMask) {
  Table t;
  Steering s;
  s.comm_id = 1;
  s.algo_mask = (1u << kAlgoRing) | (1u << kAlgoTree);
  s.proto_mask = 1u << kProtoLl128;
  int n = 0;
  ApplySteering(s, t.data(), kNumAlgos, kNumProtos, &n);
  EXPECT_EQ(t.cells[kAlgoRing][kProtoLl128], 20);
  EXPECT_EQ(t.cells[kAlgoRing][kProtoSimple], kIgnore);
  EXPECT_EQ(t.cells[kAlgoTree][kProtoSimple], kIgnore);
}

TEST(SteeringTest, AMaskThatLeavesNothingChangesNothing) {
  Table t;
  Table before;
  Steering s;
  s.comm_id = 1;
  s.algo_mask = 1u << kAlgoPat;  // NCCL offered no PAT cell
  int n = 0;
  SteerOutcome out = ApplySteering(s, t.data(), kNumAlgos, kNumProtos, &n);
  EXPECT_TRUE(out.nothing_allowed);
  EXPECT_EQ(out.cells_disabled, 0);
  for (int a = 0; a < kNumAlgos; ++a) {
    for (int p = 0; p < kNumProtos; ++p) {
      EXPECT_EQ(t.cells[a][p], before.cells[a][p]);
    }
  }
}

TEST(SteeringTest, ChannelCapAndFloor) {
  Steering s;
  s.comm_id = 1;
  s.max_channels = 4;
  int n = 0;
  EXPECT_TRUE(ApplySteering(s, nullptr, 0, 0, &n).channels_set);
  EXPECT_EQ(n, 4);  // NCCL's 0 ("decide") becomes the cap
  n = 2;
  EXPECT_FALSE(ApplySteering(s, nullptr, 0, 0, &n).channels_set);
  EXPECT_EQ(n, 2);  // already below the cap
  n = 16;
  ApplySteering(s, nullptr, 0, 0, &n);
  EXPECT_EQ(n, 4);
  s.min_channels = 3;
  n = 2;
  ApplySteering(s, nullptr, 0, 0, &n);
  EXPECT_EQ(n, 3);
  s.max_channels = 0;  // a floor alone: NCCL decides
  n = 0;
  ApplySteering(s, nullptr, 0, 0, &n);
  EXPECT_EQ(n, 0);
}

}  // namespace
}  // namespace pitstop::tuner
