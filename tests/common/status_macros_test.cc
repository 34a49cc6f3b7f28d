#include "pitstop/status_macros.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace pitstop {
namespace {

absl::Status FailIf(bool fail) {
  return fail ? absl::InvalidArgumentError("bad") : absl::OkStatus();
}

int g_after_return_if_error = 0;

absl::Status Chain(bool fail) {
  RETURN_IF_ERROR(FailIf(fail));
  ++g_after_return_if_error;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<int>> MakeInt(bool fail) {
  if (fail) return absl::NotFoundError("no int");
  return std::make_unique<int>(42);
}

absl::StatusOr<int> UseInt(bool fail) {
  ASSIGN_OR_RETURN(std::unique_ptr<int> value, MakeInt(fail));
  return *value + 1;
}

absl::StatusOr<int> AssignTwiceInOneScope() {
  int a = 0;
  int b = 0;
  ASSIGN_OR_RETURN(a, absl::StatusOr<int>(1));
  ASSIGN_OR_RETURN(b, absl::StatusOr<int>(2));
  return a + b;
}

TEST(StatusMacrosTest, ReturnIfErrorPropagatesAndStops) {
  g_after_return_if_error = 0;
  absl::Status s = Chain(true);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "bad");
  EXPECT_EQ(g_after_return_if_error, 0);
  EXPECT_TRUE(Chain(false).ok());
  EXPECT_EQ(g_after_return_if_error, 1);
}

TEST(StatusMacrosTest, AssignOrReturnMovesValue) {
  absl::StatusOr<int> ok = UseInt(false);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 43);
}

TEST(StatusMacrosTest, AssignOrReturnPropagatesError) {
  absl::StatusOr<int> err = UseInt(true);
  EXPECT_EQ(err.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(err.status().message(), "no int");
}

TEST(StatusMacrosTest, AssignOrReturnTwiceInOneScope) {
  absl::StatusOr<int> v = AssignTwiceInOneScope();
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 3);
}

}  // namespace
}  // namespace pitstop
