#include "pitstop/grpc_util.h"

#include "gtest/gtest.h"

namespace pitstop {
namespace {

TEST(GrpcUtilTest, StatusRoundTripKeepsCodeAndMessage) {
  const absl::Status in = absl::InvalidArgumentError("field 'host' is empty");
  const grpc::Status g = ToGrpcStatus(in);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(g.error_message(), "field 'host' is empty");
  const absl::Status out = FromGrpcStatus(g);
  EXPECT_EQ(out, in);
}

TEST(GrpcUtilTest, OkMapsToOk) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

TEST(GrpcUtilTest, NotFoundMaps) {
  EXPECT_EQ(ToGrpcStatus(absl::NotFoundError("x")).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST(GrpcUtilTest, ChannelArgumentsCarryKeepalive) {
  const grpc::ChannelArguments owner = StreamChannelArguments();
  grpc_channel_args args = owner.c_channel_args();
  bool found = false;
  for (size_t i = 0; i < args.num_args; ++i) {
    if (std::string(args.args[i].key) == GRPC_ARG_KEEPALIVE_TIME_MS) {
      found = true;
      EXPECT_EQ(args.args[i].value.integer, 10'000);
    }
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace pitstop
