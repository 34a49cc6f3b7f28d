#include "pitstop/config.h"

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pitstop {
namespace {

using ::testing::HasSubstr;

struct Options {
  std::string socket = "/run/pitstop/agent.sock";
  uint32_t batch_ms = 1000;
  int32_t offset = -1;
  double ratio = 0.5;
  bool deep = false;
  std::vector<std::string> nics;
};

class ConfigTest : public ::testing::Test {
 protected:
  ConfigTest() : schema_("prog", "test program") {
    schema_.Add("ingest.socket", &opts_.socket, "socket path");
    schema_.Add("upstream.batch_ms", &opts_.batch_ms, "batch period");
    schema_.Add("offset", &opts_.offset, "signed");
    schema_.Add("ratio", &opts_.ratio, "a ratio");
    schema_.Add("deep", &opts_.deep, "deep profiling");
    schema_.Add("nics", &opts_.nics, "NIC list");
  }

  std::string WriteFile(const std::string& text) {
    const auto dir = std::filesystem::temp_directory_path();
    std::string path =
        (dir / ("pitstop_config_test_" + std::to_string(getpid()) + "_" +
                std::to_string(counter_++) + ".yaml"))
            .string();
    std::ofstream(path) << text;
    files_.push_back(path);
    return path;
  }

  ~ConfigTest() override {
    for (const auto& f : files_) std::remove(f.c_str());
  }

  absl::StatusOr<ConfigParse> Parse(std::vector<std::string> args) {
    args.insert(args.begin(), "prog");
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    return schema_.Parse(static_cast<int>(argv.size()), argv.data());
  }

  Options opts_;
  ConfigSchema schema_;
  std::vector<std::string> files_;
  int counter_ = 0;
};

TEST_F(ConfigTest, DefaultsWithoutInput) {
  ASSERT_TRUE(Parse({}).ok());
  EXPECT_EQ(opts_.socket, "/run/pitstop/agent.sock");
  EXPECT_EQ(opts_.batch_ms, 1000u);
}

TEST_F(ConfigTest, YamlSetsNestedKeysAndLists) {
  const std::string path = WriteFile(
      "ingest:\n  socket: /tmp/a.sock\nupstream:\n  batch_ms: 250\n"
      "offset: -7\nratio: 0.25\ndeep: yes\nnics: [mlx5_0, mlx5_1]\n");
  ASSERT_TRUE(Parse({"--config", path}).ok());
  EXPECT_EQ(opts_.socket, "/tmp/a.sock");
  EXPECT_EQ(opts_.batch_ms, 250u);
  EXPECT_EQ(opts_.offset, -7);
  EXPECT_DOUBLE_EQ(opts_.ratio, 0.25);
  EXPECT_TRUE(opts_.deep);
  EXPECT_EQ(opts_.nics, (std::vector<std::string>{"mlx5_0", "mlx5_1"}));
}

TEST_F(ConfigTest, FlagsWinOverYaml) {
  const std::string path = WriteFile("upstream:\n  batch_ms: 250\n");
  ASSERT_TRUE(
      Parse({"--config", path, "--upstream-batch-ms", "50", "--deep"}).ok());
  EXPECT_EQ(opts_.batch_ms, 50u);
  EXPECT_TRUE(opts_.deep);
}

TEST_F(ConfigTest, BadValueNamesFileLineAndKey) {
  const std::string path =
      WriteFile("ingest:\n  socket: x\nupstream:\n  batch_ms: soon\n");
  absl::StatusOr<ConfigParse> r = Parse({"--config", path});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr(path + ":4:"));
  EXPECT_THAT(r.status().message(), HasSubstr("upstream.batch_ms"));
  EXPECT_THAT(r.status().message(), HasSubstr("soon"));
}

TEST_F(ConfigTest, NegativeForUnsignedIsRejected) {
  const std::string path = WriteFile("upstream:\n  batch_ms: -5\n");
  absl::StatusOr<ConfigParse> r = Parse({"--config", path});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("unsigned"));
}

TEST_F(ConfigTest, UnknownKeyIsAnError) {
  const std::string path = WriteFile("ingest:\n  sokcet: /tmp/x\n");
  absl::StatusOr<ConfigParse> r = Parse({"--config", path});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr(path + ":2:"));
  EXPECT_THAT(r.status().message(), HasSubstr("unknown key 'ingest.sokcet'"));
}

TEST_F(ConfigTest, SyntaxErrorNamesLine) {
  const std::string path = WriteFile("ingest:\n  socket: [unterminated\n");
  absl::StatusOr<ConfigParse> r = Parse({"--config", path});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr(path + ":"));
  EXPECT_THAT(r.status().message(), HasSubstr("syntax error"));
}

TEST_F(ConfigTest, MissingFileIsNotFound) {
  absl::StatusOr<ConfigParse> r = Parse({"--config", "/nonexistent/x.yaml"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("/nonexistent/x.yaml"));
}

TEST_F(ConfigTest, BadFlagValueNamesFlag) {
  absl::StatusOr<ConfigParse> r = Parse({"--ratio", "abc"});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("--ratio"));
}

TEST_F(ConfigTest, UnknownFlagIsAnError) {
  absl::StatusOr<ConfigParse> r = Parse({"--no-such-flag"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ConfigTest, HelpAsksToExit) {
  absl::StatusOr<ConfigParse> r = Parse({"--help"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, ConfigParse::kExit);
}

TEST_F(ConfigTest, EmptyFileKeepsDefaults) {
  const std::string path = WriteFile("");
  ASSERT_TRUE(Parse({"--config", path}).ok());
  EXPECT_EQ(opts_.batch_ms, 1000u);
}

TEST(ConfigSchemaTest, FlagForKey) {
  EXPECT_EQ(ConfigSchema::FlagForKey("ingest.socket_path"),
            "--ingest-socket-path");
}

// Issue #33 F8: yaml-cpp expands aliases while it builds its nodes; an
// alias bomb of 644 bytes (24 levels, each naming the one before twice)
// took 27 s and 2.6 GB. Anchors and aliases are refused before any node is
// built, naming the file, line, column and byte offset.
TEST_F(ConfigTest, AnchorsAndAliasesAreRefused) {
  std::string bomb = "l0: &l0 [x, x]\n";
  for (int i = 1; i < 12; ++i) {
    bomb += "l" + std::to_string(i) + ": &l" + std::to_string(i) + " [*l" +
            std::to_string(i - 1) + ", *l" + std::to_string(i - 1) + "]\n";
  }
  bomb += "nics: *l11\n";
  const std::string path = WriteFile(bomb);
  absl::StatusOr<ConfigParse> r = Parse({"--config", path});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr(path + ":1:5 (byte offset 4)"));
  EXPECT_THAT(r.status().message(),
              HasSubstr("an anchor ('&' or '*'): YAML anchors and aliases are "
                        "not accepted"));
  // An alias alone (of an anchor the parser did not see as ours) is
  // refused too; so is an anchor nobody uses.
  const std::string alias = WriteFile("ratio: 1\nnics: [a, *x]\n");
  r = Parse({"--config", alias});
  ASSERT_FALSE(r.ok());
  const std::string unused = WriteFile("ratio: 1\ndeep: &d true\n");
  r = Parse({"--config", unused});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr(unused + ":2:7"));
  EXPECT_THAT(r.status().message(), HasSubstr("an anchor"));
  // A '&' or '*' inside a quoted value is just text.
  const std::string quoted = WriteFile("ingest:\n  socket: \"/tmp/&*x\"\n");
  r = Parse({"--config", quoted});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(opts_.socket, "/tmp/&*x");
}

// Issue #33: yaml-cpp keeps both entries of a repeated key and the later
// one silently won.
TEST_F(ConfigTest, DuplicateKeyIsRefusedWithLine) {
  const std::string path =
      WriteFile("upstream:\n  batch_ms: 5\n  batch_ms: 7\n");
  absl::StatusOr<ConfigParse> r = Parse({"--config", path});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr(path + ":3:3"));
  EXPECT_THAT(r.status().message(),
              HasSubstr("duplicate key 'upstream.batch_ms'"));
  const std::string top = WriteFile("deep: true\nratio: 1\ndeep: false\n");
  r = Parse({"--config", top});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr(top + ":3:1"));
  EXPECT_THAT(r.status().message(), HasSubstr("duplicate key 'deep'"));
}

TEST_F(ConfigTest, BoundRefusesOutOfRangeFromFileAndFlag) {
  schema_.Bound("upstream.batch_ms", 1, 60000);
  schema_.Bound("ratio", 0, 1);
  absl::StatusOr<ConfigParse> r = Parse({"--upstream-batch-ms", "0"});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("--upstream-batch-ms"));
  EXPECT_THAT(r.status().message(), HasSubstr("must be in [1, 60000]"));
  r = Parse({"--ratio", "1.5"});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("--ratio"));
  ASSERT_TRUE(Parse({"--upstream-batch-ms", "60000", "--ratio", "1"}).ok());
  EXPECT_EQ(opts_.batch_ms, 60000u);
  // Last: the schema keeps --config for later Parse() calls.
  const std::string path = WriteFile("upstream:\n  batch_ms: 60001\n");
  r = Parse({"--config", path});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr(path + ":2:13"));
  EXPECT_THAT(r.status().message(),
              HasSubstr("'upstream.batch_ms' (--upstream-batch-ms)"));
}

// Issue #33: --config refuses what is not a regular file by name, and a
// FIFO without a writer does not block the open.
TEST_F(ConfigTest, ConfigMustBeARegularFile) {
  absl::StatusOr<ConfigParse> r = Parse({"--config", "/dev/zero"});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr("--config: /dev/zero: not a regular file (a "
                        "character device)"));
  const std::string fifo = WriteFile("") + ".fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  files_.push_back(fifo);
  r = Parse({"--config", fifo});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("not a regular file (a FIFO)"));
}

}  // namespace
}  // namespace pitstop
