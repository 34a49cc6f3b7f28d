// Issue #33: addresses and host names given as flags are range-checked
// once for every binary; the libraries behind them wrap instead.
#include "pitstop/address.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pitstop {
namespace {

using ::testing::HasSubstr;

TEST(AddressTest, AcceptsHostPortForms) {
  absl::StatusOr<HostPort> a = ValidateAddress("127.0.0.1:7070", "--listen");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 7070);
  a = ValidateAddress("[::1]:65535", "--listen");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, "::1");
  EXPECT_TRUE(ValidateAddress("node-7.cluster_a.local:1", "--x").ok());
  EXPECT_TRUE(
      ValidateAddress("0.0.0.0:0", "--x", {.allow_port_zero = true}).ok());
  EXPECT_TRUE(
      ValidateAddress("unix:/run/x.sock", "--x", {.allow_unix = true}).ok());
}

TEST(AddressTest, PortOutOfRangeNamesTheFlag) {
  // gRPC took 99999 as 34463.
  absl::StatusOr<HostPort> a = ValidateAddress(
      "127.0.0.1:99999", "listen (--listen)", {.allow_port_zero = true});
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("listen (--listen)"));
  EXPECT_THAT(a.status().message(), HasSubstr("'127.0.0.1:99999'"));
  EXPECT_THAT(a.status().message(), HasSubstr("0..65535"));
  EXPECT_FALSE(ValidateAddress("127.0.0.1:0", "--controller").ok());
  EXPECT_FALSE(ValidateAddress("127.0.0.1:-1", "--x").ok());
  EXPECT_FALSE(ValidateAddress("127.0.0.1:", "--x").ok());
  EXPECT_FALSE(ValidateAddress("127.0.0.1:0x50", "--x").ok());
  EXPECT_FALSE(ValidateAddress("127.0.0.1:0000080", "--x").ok());
  EXPECT_FALSE(ValidateAddress("127.0.0.1", "--x").ok());
  EXPECT_FALSE(ValidateAddress(":80", "--x").ok());
}

TEST(AddressTest, BadHostsAreRefused) {
  // civetweb took 999.1.1.1 as 231.1.1.1.
  absl::StatusOr<HostPort> a =
      ValidateAddress("999.1.1.1:9470", "--metrics-address");
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("--metrics-address"));
  EXPECT_THAT(a.status().message(), HasSubstr("not an IPv4 address"));
  EXPECT_FALSE(ValidateAddress("10.1:80", "--x").ok());
  EXPECT_FALSE(ValidateAddress("[::g]:80", "--x").ok());
  EXPECT_FALSE(ValidateAddress("a b:80", "--x").ok());
  EXPECT_FALSE(ValidateAddress("host/x:80", "--x").ok());
  EXPECT_FALSE(ValidateAddress("unix:/x", "--metrics-address").ok());
  EXPECT_FALSE(ValidateAddress("unix:", "--x", {.allow_unix = true}).ok());
}

TEST(AddressTest, HostNames) {
  EXPECT_TRUE(ValidateHostName("node-01.rack_3", "--host").ok());
  absl::Status s = ValidateHostName("a b", "host (--host)");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("host (--host): 'a b'"));
  EXPECT_FALSE(ValidateHostName("", "--host").ok());
  EXPECT_FALSE(ValidateHostName("-x", "--host").ok());
  EXPECT_FALSE(ValidateHostName("a\nb", "--host").ok());
  EXPECT_FALSE(ValidateHostName("a/b", "--host").ok());
  EXPECT_FALSE(ValidateHostName(std::string(254, 'a'), "--host").ok());
  EXPECT_TRUE(ValidateHostName(std::string(253, 'a'), "--host").ok());
}

}  // namespace
}  // namespace pitstop
