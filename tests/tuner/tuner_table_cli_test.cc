// `pitstop tuner-table`: prints what the agent wrote, as a table and as
// JSON; a missing table is exit 2 naming the path.
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "pitstop/tuner_table.h"
#include "tests/harness/run_command.h"

namespace pitstop::tuner {
namespace {

using ::testing::HasSubstr;

using ::pitstop::harness::RunCommand;

TEST(TunerTableCliTest, PrintsTheEntriesTheAgentWrote) {
  const char* bin_dir = std::getenv("PITSTOP_BINARY_DIR");
  if (bin_dir == nullptr) {
    GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set (run through ctest)";
  }
  const std::string pitstop = std::string(bin_dir) + "/tools/pitstop/pitstop";
  char tmpl[] = "/tmp/pitstop-tuner-cli-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl, path = dir + "/table";

  std::string out;
  EXPECT_EQ(RunCommand(pitstop + " tuner-table " + path, &out), 2) << out;
  EXPECT_THAT(out, HasSubstr(path));

  std::string error;
  auto w = TunerTableWriter::Create(path, 8, &error);
  ASSERT_NE(w, nullptr) << error;
  Steering s;
  s.comm_id = 0xabcdef;
  s.plan_epoch = 42;
  s.n_ranks = 16;
  s.n_nodes = 2;
  s.max_channels = 4;
  s.algo_mask = 1u << kAlgoRing;
  ASSERT_TRUE(w->Upsert(s, &error)) << error;

  out.clear();
  ASSERT_EQ(RunCommand(pitstop + " tuner-table " + path, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("1 steered communicator"));
  EXPECT_THAT(out, HasSubstr("0x0000000000abcdef"));
  EXPECT_THAT(out, HasSubstr("RING"));

  out.clear();
  ASSERT_EQ(RunCommand(pitstop + " tuner-table -o json " + path, &out), 0)
      << out;
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  ASSERT_EQ(j["entries"].size(), 1u);
  EXPECT_EQ(j["entries"][0]["comm_id"], "0x0000000000abcdef");
  EXPECT_EQ(j["entries"][0]["plan_epoch"], 42);
  EXPECT_EQ(j["entries"][0]["max_channels"], 4);
  EXPECT_EQ(j["entries"][0]["algorithms"], nlohmann::json({"RING"}));
  EXPECT_EQ(j["entries"][0]["protocols"], nlohmann::json::array());
  EXPECT_EQ(j["retired"], false);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pitstop::tuner
