// Sanitizer canaries (docs/testing.md): each planted defect of
// canary_shapes.h, run by the canary program under this build's sanitizer
// with the project's own suppression files (tests/tsan.supp,
// tests/lsan.supp, as ctest passes them to every test), must be reported
// as that defect. If someone widens a suppression so that it matches
// pitstop's own frames, a canary here fails and prints the suppression that
// matched.
//
// Only sanitizer builds compile this test (tests/sanitizers/CMakeLists.txt):
// the TSan build registers the race canaries, the ASan build the leak
// canaries; neither sanitizer can see the other's defects.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/plugin/test_util.h"

namespace pitstop::canary {
namespace {

struct Outcome {
  int status = -1;  // wait status
  std::string log;  // the canary's stderr
};

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// The project's sanitizer options as ctest sets them for every test
// (cmake/pitstop_helpers.cmake); empty with a failure when absent.
std::string ProjectOptions(const char* variable, const char* supp_file) {
  const std::string options = Env(variable);
  const std::string supp = absl::StrCat(
      "suppressions=", Env("PITSTOP_SOURCE_DIR"), "/tests/", supp_file);
  if (Env("PITSTOP_SOURCE_DIR").empty() || !absl::StrContains(options, supp)) {
    ADD_FAILURE() << variable << "='" << options << "' does not name "
                  << supp_file << ": run through ctest, which sets the "
                  << "project's sanitizer options";
    return "";
  }
  return options;
}

Outcome RunCanary(const std::vector<std::string>& args,
                  const std::map<std::string, std::string>& env) {
  const std::string log = absl::StrCat(::testing::TempDir(), "pitstop-canary-",
                                       getpid(), "-", args[0], ".log");
  std::vector<std::string> argv = {PITSTOP_SANITIZER_CANARY};
  argv.insert(argv.end(), args.begin(), args.end());
  Outcome out;
  out.status = pitstop::emu::RunChild(argv, env, log);
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  out.log = text.str();
  unlink(log.c_str());
  return out;
}

int ExitCode(int status) {
  return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

#if defined(PITSTOP_TSAN)

// Runs `shape` under TSan and expects the first report to be a data race
// whose stacks name every function of `frames` (GCC's line tables name a
// function without its class), and whose SUMMARY line (the first access's
// top frame: file:line in function) contains every part of `top`.
void ExpectRace(const std::vector<std::string>& args,
                const std::vector<std::string>& top,
                const std::vector<std::string>& frames) {
  const std::string options = ProjectOptions("TSAN_OPTIONS", "tsan.supp");
  if (options.empty()) return;
  // The project's options, plus: stop at the first report with TSan's exit
  // code, and list the suppressions that matched (why a canary went quiet).
  const Outcome out =
      RunCanary(args, {{"TSAN_OPTIONS", absl::StrCat(options,
                                                     " halt_on_error=1 "
                                                     "exitcode=66 "
                                                     "print_suppressions=1")}});
  SCOPED_TRACE(absl::StrCat("canary ", args[0], " log:\n", out.log));
  ASSERT_EQ(ExitCode(out.status), 66)
      << "TSan did not report the planted race (66 = reported; 0 = ran "
         "clean, a suppression or a happens-before edge hid it; 3 = the "
         "race did not happen)";
  const size_t warning = out.log.find("WARNING: ThreadSanitizer: data race");
  ASSERT_NE(warning, std::string::npos) << "the report is not a data race";
  const size_t summary = out.log.find("SUMMARY: ThreadSanitizer", warning);
  ASSERT_NE(summary, std::string::npos);
  const std::string report = out.log.substr(warning, summary - warning);
  const std::string summary_line =
      out.log.substr(summary, out.log.find('\n', summary) - summary);
  for (const std::string& part : top) {
    EXPECT_TRUE(absl::StrContains(summary_line, part))
        << "the top frame is not the planted one (" << part
        << "): " << summary_line;
  }
  for (const std::string& frame : frames) {
    EXPECT_TRUE(absl::StrContains(report, frame))
        << "the race report does not name " << frame;
  }
}

TEST(SanitizerCanary, RaceInSyncHandlerIsReported) {
  ExpectRace({"sync-handler-race"}, {"canary_grpc.cc", " in GetStatus"},
             {"GetStatus"});
}

TEST(SanitizerCanary, RaceInCallbackReactorIsReported) {
  ExpectRace({"reactor-race"}, {"canary_grpc.cc", " in OnReadDone"},
             {"OnReadDone"});
}

TEST(SanitizerCanary, RaceOnAbseilMapBehindForgottenLockIsReported) {
  // The top frame is Abseil's (raw_hash_set::size(), compiled into the
  // canary); the forgetful method is further down.
  ExpectRace({"map-race"}, {"raw_hash_set"}, {"CountForgettingTheLock"});
}

TEST(SanitizerCanary, RaceOnProtobufFieldBehindForgottenLockIsReported) {
  // The top frame is protobuf's RepeatedField<int>::Add (a header).
  ExpectRace({"proto-race"}, {"RepeatedField"},
             {"AddToProtoForgettingTheLock"});
}

TEST(SanitizerCanary, RaceOnStringBehindForgottenLockIsReported) {
  // The top frame is libstdc++'s basic_string code, compiled into the
  // canary at the TSan build's -O1.
  ExpectRace({"string-race"}, {}, {"SetHostForgettingTheLock"});
}

TEST(SanitizerCanary, RaceWithInProcessLibraryThreadIsReported) {
  ExpectRace({"plugin-thread-race", PITSTOP_SANITIZER_CANARY_LIBRARY},
             {"canary_library.cc"},
             {"ExporterReadsRecordCount", "pitstop_canary_record"});
}

#elif defined(PITSTOP_ASAN)

// The paragraphs of a sanitizer log that start with `head`.
std::vector<std::string> Blocks(const std::string& log,
                                const std::string& head) {
  std::vector<std::string> out;
  for (absl::string_view para : absl::StrSplit(log, "\n\n")) {
    const size_t at = para.find(head);
    if (at != absl::string_view::npos) out.emplace_back(para.substr(at));
  }
  return out;
}

// Runs `shape` under ASan and expects LeakSanitizer to report a direct
// leak allocated in `frame`.
void ExpectLeak(const std::string& shape, const std::string& frame) {
  const std::string options = ProjectOptions("LSAN_OPTIONS", "lsan.supp");
  if (options.empty()) return;
  ASSERT_TRUE(absl::StrContains(Env("ASAN_OPTIONS"), "detect_leaks=1"))
      << "ASAN_OPTIONS='" << Env("ASAN_OPTIONS") << "'";
  const Outcome out = RunCanary(
      {shape}, {{"LSAN_OPTIONS", absl::StrCat(options,
                                              " exitcode=23 "
                                              "print_suppressions=1")}});
  SCOPED_TRACE(absl::StrCat("canary ", shape, " log:\n", out.log));
  ASSERT_EQ(ExitCode(out.status), 23)
      << "LeakSanitizer did not report the planted leak (23 = leaks "
         "reported; 0 = none, a suppression hid it; 3 = the leak did not "
         "happen)";
  bool named = false;
  for (const std::string& leak : Blocks(out.log, "Direct leak of")) {
    named = named || absl::StrContains(leak, frame);
  }
  EXPECT_TRUE(named) << "no direct leak allocated in " << frame;
}

TEST(SanitizerCanary, LeakInSyncHandlerIsReported) {
  ExpectLeak("handler-leak", "LeakySyncService::GetStatus");
}

TEST(SanitizerCanary, LeakedCallbackReactorIsReported) {
  ExpectLeak("reactor-leak", "ReactorService::StreamTelemetry");
}

#endif

}  // namespace
}  // namespace pitstop::canary
