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

namespace pitstop::c4p {

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
