// The built libnccl-profiler-pitstop.so and libnccl-tuner-pitstop.so must
// load in any training container (docs/plugin.md, "What the library
// links"; docs/planning.md for the tuner): their NEEDED entries are only
// the C runtime and libstdc++, and it needs no symbol version newer than
// GLIBC_2.34 / GLIBCXX_3.4.29 (Ubuntu 22.04, RHEL 9). Reads the real file
// with readelf and objdump, so no later change can bring a dependency back
// silently.
#include <cstdio>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace {

std::string RunTool(const std::string& cmd) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  const int rc = pclose(f);
  if (rc != 0) out = "FAILED(" + std::to_string(rc) + "): " + out;
  return out;
}

// "2.34" -> {2, 34}; "3.4.29" -> {3, 4, 29}.
std::vector<int> Version(const std::string& v) {
  std::vector<int> out;
  size_t i = 0;
  while (i < v.size()) {
    size_t j = v.find('.', i);
    if (j == std::string::npos) j = v.size();
    out.push_back(std::stoi(v.substr(i, j - i)));
    i = j + 1;
  }
  return out;
}

#if defined(PITSTOP_ASAN) || defined(PITSTOP_TSAN)
#define PITSTOP_SKIP_IF_SANITIZED()                                       \
  GTEST_SKIP() << "SKIPPED: sanitizer builds link the sanitizer runtime " \
                  "into the library; the default build is checked"
#else
#define PITSTOP_SKIP_IF_SANITIZED()
#endif

// Each built in-process library: the profiler (+ interposer) and the tuner.
class DepsTest : public ::testing::TestWithParam<const char*> {
 protected:
  std::string Lib() const { return GetParam(); }
};

TEST_P(DepsTest, NeededEntriesAreOnlyTheCRuntimeAndLibstdcxx) {
  PITSTOP_SKIP_IF_SANITIZED();
  const std::string out = RunTool("readelf -d '" + Lib() + "' 2>&1");
  ASSERT_EQ(out.rfind("FAILED", 0), std::string::npos) << out;
  const std::set<std::string> allowed = {"libc.so.6",
                                         "libm.so.6",
                                         "libdl.so.2",
                                         "libpthread.so.0",
                                         "librt.so.1",
                                         "libgcc_s.so.1",
                                         "ld-linux-x86-64.so.2",
                                         "ld-linux-aarch64.so.1",
                                         "libstdc++.so.6"};
  const std::regex needed(R"(\(NEEDED\)\s+Shared library: \[([^\]]+)\])");
  int count = 0;
  for (std::sregex_iterator it(out.begin(), out.end(), needed), end; it != end;
       ++it) {
    ++count;
    EXPECT_TRUE(allowed.count((*it)[1].str()))
        << Lib() << " needs " << (*it)[1].str()
        << ", which a training container may not have";
  }
  EXPECT_GT(count, 0) << "no NEEDED entry parsed from:\n" << out;
  EXPECT_EQ(out.find("RUNPATH"), std::string::npos) << out;
  EXPECT_EQ(out.find("RPATH"), std::string::npos) << out;
}

TEST_P(DepsTest, NoSymbolVersionNewerThanGlibc234AndGlibcxx3429) {
  PITSTOP_SKIP_IF_SANITIZED();
  const std::string out = RunTool("objdump -T '" + Lib() + "' 2>&1");
  ASSERT_EQ(out.rfind("FAILED", 0), std::string::npos) << out;
  const std::regex ver(R"((GLIBC|GLIBCXX|CXXABI|GCC)_([0-9.]+))");
  const std::map<std::string, std::vector<int>> limit = {
      {"GLIBC", {2, 34}},
      {"GLIBCXX", {3, 4, 29}},
      {"CXXABI", {1, 3, 13}},  // GCC 11's, as GLIBCXX_3.4.29
      {"GCC", {7, 0, 0}}};
  int count = 0;
  // Each undefined symbol line: "... *UND* ... (GLIBC_2.34) name" or
  // "... DF *UND* ... GLIBC_2.34 name".
  size_t start = 0;
  while (start < out.size()) {
    size_t end = out.find('\n', start);
    if (end == std::string::npos) end = out.size();
    const std::string line = out.substr(start, end - start);
    start = end + 1;
    std::smatch m;
    if (!std::regex_search(line, m, ver)) continue;
    ++count;
    const auto it = limit.find(m[1].str());
    ASSERT_NE(it, limit.end());
    EXPECT_LE(Version(m[2].str()), it->second)
        << "needs " << m[1].str() << "_" << m[2].str() << ": " << line;
  }
  EXPECT_GT(count, 5) << "no versioned symbol parsed from:\n" << out;
}

TEST_P(DepsTest, ExportsNoThirdPartySymbols) {
  const std::string out =
      RunTool("nm -D --undefined-only '" + Lib() + "' 2>&1");
  ASSERT_EQ(out.rfind("FAILED", 0), std::string::npos) << out;
  for (const char* lib : {"grpc", "protobuf", "absl", "gpr_"}) {
    EXPECT_EQ(out.find(lib), std::string::npos)
        << "the library references " << lib << ":\n"
        << out;
  }
}

INSTANTIATE_TEST_SUITE_P(Libraries, DepsTest,
                         ::testing::Values(PITSTOP_PLUGIN_PATH,
                                           PITSTOP_TUNER_PATH),
                         [](const auto& info) {
                           return std::string(info.index == 0 ? "profiler"
                                                              : "tuner");
                         });

// The tuner exports exactly NCCL's three tuner tables, nothing else.
TEST(TunerExportsTest, OnlyTheTunerTables) {
  const std::string out =
      RunTool("nm -D --defined-only '" PITSTOP_TUNER_PATH "' 2>&1");
  ASSERT_EQ(out.rfind("FAILED", 0), std::string::npos) << out;
  std::set<std::string> names;
  const std::regex sym(R"(\s[A-Za-z]\s(\S+))");
  for (std::sregex_iterator it(out.begin(), out.end(), sym), end; it != end;
       ++it) {
    names.insert((*it)[1].str());
  }
  EXPECT_EQ(names,
            (std::set<std::string>{"ncclTunerPlugin_v4", "ncclTunerPlugin_v5",
                                   "ncclTunerPlugin_v6"}))
      << out;
}

}  // namespace
