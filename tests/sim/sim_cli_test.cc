// The `pitstop sim` command line, run as the installed tool is.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/harness/run_command.h"

namespace pitstop::sim {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using ::pitstop::harness::RunCommand;

// The built tool, or "" outside ctest.
std::string PitstopBinary() {
  const char* bin_dir = std::getenv("PITSTOP_BINARY_DIR");
  return bin_dir == nullptr ? ""
                            : std::string(bin_dir) + "/tools/pitstop/pitstop";
}

// `--print` was bound to a local of the function that registers the
// command; the callback wrote through a dangling reference (segfault).
TEST(SimCliTest, PrintShowsEveryScenarioAndExitsZero) {
  const char* bin_dir = std::getenv("PITSTOP_BINARY_DIR");
  if (bin_dir == nullptr) {
    GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set (run through ctest)";
  }
  const std::string pitstop = std::string(bin_dir) + "/tools/pitstop/pitstop";
  for (const char* scenario : {"nic-degraded", "comm-hang"}) {
    std::string out;
    EXPECT_EQ(RunCommand(pitstop + " sim --print -s " + scenario, &out), 0)
        << scenario << ": " << out;
    EXPECT_THAT(out, HasSubstr("name: ")) << scenario;
  }
  std::string out;
  EXPECT_EQ(RunCommand(pitstop + " sim --print -s no-such-scenario", &out), 2)
      << out;
}

// torch-migration's settings, its own flag refused elsewhere, and options
// that cannot move a node refused before anything starts.
TEST(SimCliTest, TorchMigrationPrintsItsSettings) {
  const std::string pitstop = PitstopBinary();
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  std::string out;
  EXPECT_EQ(
      RunCommand(pitstop + " sim --print -s torch-migration --leaver-node 0 "
                           "--steps 300",
                 &out),
      0)
      << out;
  EXPECT_THAT(out, HasSubstr("leaver_node: node0"));
  EXPECT_THAT(out, HasSubstr("steps: 300"));
  EXPECT_THAT(out, HasSubstr("migrate_after_step: 10"));
  out.clear();
  EXPECT_EQ(
      RunCommand(pitstop + " sim --print -s torch-migration --steps 25", &out),
      2)
      << out;
  EXPECT_THAT(out, HasSubstr("--steps 25 must leave the switch margin"));
  out.clear();
  EXPECT_EQ(
      RunCommand(pitstop + " sim -s torch-straggler --leaver-node 0", &out), 2)
      << out;
  EXPECT_THAT(out, HasSubstr("--leaver-node does nothing for torch-straggler"));
  out.clear();
  EXPECT_EQ(
      RunCommand(pitstop + " sim -s torch-migration --keep-running", &out), 2)
      << out;
  EXPECT_THAT(out, HasSubstr("--keep-running does nothing for "
                             "torch-migration"));
  out.clear();
  EXPECT_EQ(RunCommand(pitstop + " sim --print -s torch-migration --fault "
                                 "leaver-dies-in-transfer",
                       &out),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr("fault: leaver-dies-in-transfer"));
  out.clear();
  EXPECT_EQ(RunCommand(pitstop + " sim --print -s torch-migration --fault oops",
                       &out),
            2)
      << out;
  EXPECT_THAT(out, HasSubstr("--fault oops: expected none"));
  out.clear();
  EXPECT_EQ(RunCommand(pitstop + " sim -s torch-straggler --fault "
                                 "joiner-dies-in-sandbox",
                       &out),
            2)
      << out;
  EXPECT_THAT(out, HasSubstr("--fault does nothing for torch-straggler"));
}

// The default scenario and the other migration scenarios are not YAML: --print
// shows the settings a run would get, the scenario's own defaults where the
// command line is silent.
TEST(SimCliTest, PrintShowsAMigrationScenariosSettings) {
  const std::string pitstop = PitstopBinary();
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  std::string out;
  EXPECT_EQ(RunCommand(pitstop + " sim --print", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("scenario: degraded-node-migration\n"));
  EXPECT_THAT(out, HasSubstr("steps: 700 "));
  EXPECT_THAT(out, HasSubstr("switch_margin: 20 "));
  EXPECT_THAT(out, HasSubstr("slow_factor: 3 "));
  out.clear();
  EXPECT_EQ(RunCommand(pitstop + " sim --print -s standby-migration --steps " +
                           "900 --nodes 3",
                       &out),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr("steps: 900 "));
  EXPECT_THAT(out, HasSubstr("nodes: 3 "));
  EXPECT_THAT(out, HasSubstr("switch_margin: 100 "));
  EXPECT_THAT(out, Not(HasSubstr("slow_factor")));
}

TEST(SimCliTest, UnknownScenarioListsEveryScenario) {
  const std::string pitstop = PitstopBinary();
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  std::string out;
  EXPECT_EQ(RunCommand(pitstop + " sim --scenario nope", &out), 2) << out;
  for (const char* name : {"degraded-node-migration", "standby-migration",
                           "node-failure-migration", "nic-degraded"}) {
    EXPECT_THAT(out, HasSubstr(name));
  }
}

// A mistyped command is named, with the list of commands (CLI11 alone said
// "A subcommand is required").
TEST(SimCliTest, UnknownCommandIsNamed) {
  const std::string pitstop = PitstopBinary();
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  std::string out;
  EXPECT_EQ(RunCommand(pitstop + " simm", &out), 2) << out;
  EXPECT_THAT(out, HasSubstr("pitstop: unknown command 'simm'; commands: "));
  EXPECT_THAT(out, HasSubstr(" sim, "));
}

// A flag the chosen run would ignore is an error naming it, before anything
// starts.
TEST(SimCliTest, FlagsARunIgnoresAreErrors) {
  const std::string pitstop = PitstopBinary();
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  const struct {
    const char* args;
    const char* flag;
  } cases[] = {
      {"--timeline t.json", "--timeline"},
      {"--duration-s 5", "--duration-s"},
      {"-s node-failure-migration --seed 3", "--seed"},
      {"-s standby-migration --slow-factor 2", "--slow-factor"},
      {"-s nic-degraded --steps 900", "--steps"},
      {"--quick", "--quick"},
      {"--bench --nodes 3", "--nodes"},
      {"-s torch-hang --duration-s 5", "--duration-s"},
      {"-s torch-straggler --steps 9", "--steps"},
      {"-s crash --backend gloo", "--backend"},
      {"-s torch-straggler -o json", "--output"},
      {"--bench -o json", "--output"},
  };
  for (const auto& c : cases) {
    std::string out;
    EXPECT_EQ(RunCommand(pitstop + " sim " + c.args, &out), 2)
        << c.args << ": " << out;
    EXPECT_THAT(out, HasSubstr(std::string(c.flag) + " does nothing"))
        << c.args;
  }
}

// A scenario file whose fault names a link that does not exist is refused
// before anything starts, naming the file and the fault's line; so is an
// output format the command does not have.
TEST(SimCliTest, AFaultOnALinkThatDoesNotExistIsAnError) {
  const std::string pitstop = PitstopBinary();
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  const std::string path = ::testing::TempDir() + "/no-such-link.yaml";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs(
      "name: no-such-link\ncluster: {nodes: 2, gpus_per_node: 2}\n"
      "faults:\n  - {kind: slow_link, at_s: 1, node: 0, peer_node: 4, "
      "factor: 2}\n",
      f);
  std::fclose(f);
  std::string out;
  EXPECT_EQ(RunCommand(pitstop + " sim -s " + path + " -o json", &out), 2)
      << out;
  EXPECT_THAT(out, HasSubstr(path + ":4:5: faults[0] (slow_link): peer_node "
                                    "must be another node in [0, 2)"));
  out.clear();
  EXPECT_EQ(RunCommand(pitstop + " sim -s crash -o yaml", &out), 2) << out;
  EXPECT_THAT(out, HasSubstr("--output"));
}

// The default scenario's defaults differ from the other migration
// scenarios': the help names both, never one misleading value.
TEST(SimCliTest, HelpNamesEachScenariosDefaults) {
  const std::string pitstop = PitstopBinary();
  if (pitstop.empty()) GTEST_SKIP() << "SKIPPED: PITSTOP_BINARY_DIR not set";
  std::string out;
  EXPECT_EQ(RunCommand(pitstop + " sim --help", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("700 for degraded-node-migration"));
  EXPECT_THAT(out, HasSubstr("20 for degraded-node-migration"));
  EXPECT_THAT(out, Not(HasSubstr("=600")));
  EXPECT_THAT(out, Not(HasSubstr("=100")));
  EXPECT_THAT(out, HasSubstr("policy ACT"));
}

}  // namespace
}  // namespace pitstop::sim
