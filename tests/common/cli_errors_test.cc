#include "pitstop/cli_errors.h"

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pitstop {
namespace {

using ::testing::IsEmpty;

// A tool shaped like pitstopctl: a global option, leaf commands and a
// command group that requires one of its own.
class CliErrorsTest : public ::testing::Test {
 protected:
  CliErrorsTest() : app_("test tool", "tool") {
    app_.require_subcommand(1);
    app_.add_option("--controller", controller_);
    app_.add_subcommand("nodes", "list nodes");
    CLI::App* fault = app_.add_subcommand("fault", "one fault");
    fault->require_subcommand(1);
    fault->add_subcommand("show", "show it")->add_option("id", id_);
    fault->add_subcommand("ack", "acknowledge it");
    app_.add_subcommand("sim", "simulate")->add_flag("--quick", quick_);
  }

  // Parses `args`; returns the helper's message when parsing failed.
  std::string ErrorFor(std::vector<std::string> args) {
    std::vector<const char*> argv = {"tool"};
    for (const std::string& a : args) argv.push_back(a.c_str());
    try {
      app_.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const CLI::ParseError&) {
      return UnknownSubcommandError(app_);
    }
    return "parsed";
  }

  CLI::App app_;
  std::string controller_, id_;
  bool quick_ = false;
};

TEST_F(CliErrorsTest, NamesTheUnknownTopLevelCommandAndListsTheKnownOnes) {
  EXPECT_EQ(ErrorFor({"frobnicate"}),
            "tool: unknown command 'frobnicate'; commands: nodes, fault, sim "
            "(--help explains each)");
}

TEST_F(CliErrorsTest, GlobalOptionsBeforeTheWordDoNotHideIt) {
  EXPECT_EQ(ErrorFor({"--controller", "h:1", "nodez", "x"}),
            "tool: unknown command 'nodez'; commands: nodes, fault, sim "
            "(--help explains each)");
}

TEST_F(CliErrorsTest, NamesTheGroupWhoseSubcommandIsUnknown) {
  EXPECT_EQ(ErrorFor({"fault", "shwo", "F1"}),
            "tool fault: unknown command 'shwo'; commands: show, ack "
            "(--help explains each)");
}

TEST_F(CliErrorsTest, OtherMistakesKeepCliElevensOwnMessage) {
  EXPECT_THAT(ErrorFor({}), IsEmpty());                 // nothing given
  EXPECT_THAT(ErrorFor({"fault"}), IsEmpty());          // group, no command
  EXPECT_THAT(ErrorFor({"sim", "--frob"}), IsEmpty());  // unknown option
  EXPECT_THAT(ErrorFor({"--frob"}), IsEmpty());
}

TEST_F(CliErrorsTest, AGoodCommandLineParses) {
  EXPECT_EQ(ErrorFor({"fault", "show", "F1"}), "parsed");
  EXPECT_EQ(id_, "F1");
}

}  // namespace
}  // namespace pitstop
