// Issue #33: a file a flag names is read as a regular file of bounded size;
// /dev/zero, a FIFO or a directory is refused by name without blocking.
#include "pitstop/bounded_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pitstop {
namespace {

using ::testing::HasSubstr;

class BoundedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pitstop-bounded-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(BoundedFileTest, ReadsARegularFile) {
  std::ofstream(dir_ + "/a") << "token viewer alice\n";
  absl::StatusOr<std::string> text = ReadRegularFile(dir_ + "/a", "--x");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "token viewer alice\n");
  std::ofstream(dir_ + "/empty").flush();
  EXPECT_EQ(*ReadRegularFile(dir_ + "/empty", "--x"), "");
}

TEST_F(BoundedFileTest, RefusesDevicesFifosAndDirectoriesByName) {
  absl::StatusOr<std::string> r = ReadRegularFile("/dev/zero", "--tls-ca");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(),
              HasSubstr("--tls-ca: /dev/zero: not a regular file (a "
                        "character device)"));
  // No writer: a blocking open would wait forever.
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  r = ReadRegularFile(fifo, "--auth-tokens-file");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("--auth-tokens-file: " + fifo +
                                              ": not a regular file (a FIFO)"));
  r = ReadRegularFile(dir_, "--config");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr(dir_ + ": not a regular file (a directory)"));
}

TEST_F(BoundedFileTest, MissingIsNotFoundAndNamesFlagAndPath) {
  absl::StatusOr<std::string> r = ReadRegularFile(dir_ + "/none", "--ca");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("--ca: " + dir_ + "/none"));
}

TEST_F(BoundedFileTest, RefusesAFileOverTheLimit) {
  std::ofstream(dir_ + "/big") << std::string(1000, 'x');
  absl::StatusOr<std::string> r = ReadRegularFile(dir_ + "/big", "--x", 999);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("larger than the limit of 999"));
  EXPECT_TRUE(ReadRegularFile(dir_ + "/big", "--x", 1000).ok());
}

TEST_F(BoundedFileTest, OpenGivesTheDescriptorAndSize) {
  std::ofstream(dir_ + "/f") << "12345";
  absl::StatusOr<RegularFile> f = RegularFile::Open(dir_ + "/f", "");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->size(), 5u);
  char buf[8];
  EXPECT_EQ(read(f->fd(), buf, sizeof(buf)), 5);
  RegularFile moved = std::move(*f);
  EXPECT_GE(moved.fd(), 0);
  const int fd = moved.Release();
  EXPECT_EQ(moved.fd(), -1);
  EXPECT_EQ(close(fd), 0);
}

}  // namespace
}  // namespace pitstop
