// Files of ../shared/data/topology (real fabrics from other tools; see
// ../shared/data/README.md). Tests that read them skip, saying so, when the
// folder is absent.
#ifndef PITSTOP_TESTS_C4P_SHARED_TOPOLOGY_H_
#define PITSTOP_TESTS_C4P_SHARED_TOPOLOGY_H_

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "src/c4p/fabric.h"

namespace pitstop::c4p {

// Skips the calling test, saying so, when a shared file's text is empty.
#define SKIP_WITHOUT(text, name)                                               \
  if ((text).empty()) {                                                        \
    GTEST_SKIP() << "../shared/data/topology is absent (no " << (name) << ")"; \
  }

inline std::string AllWarnings(const Fabric& f) {
  return absl::StrJoin(f.warnings(), "\n");
}

// Line `n` (1-based) of `text` replaced by `with`.
inline std::string WithLine(const std::string& text, int n,
                            const std::string& with) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  lines[n - 1] = with;
  return absl::StrJoin(lines, "\n");
}

inline std::filesystem::path SharedTopology(const std::string& name) {
  const char* src = std::getenv("PITSTOP_SOURCE_DIR");
  return std::filesystem::path(src ? src : ".") / ".." / "shared" / "data" /
         "topology" / name;
}

// The file's text; "" when it is absent (the caller skips).
inline std::string SharedTopologyText(const std::string& name) {
  std::ifstream in(SharedTopology(name));
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace pitstop::c4p

#endif  // PITSTOP_TESTS_C4P_SHARED_TOPOLOGY_H_
