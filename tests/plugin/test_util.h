// Helpers shared by the plugin tests: a temp Unix socket path and a receiver
// plus emulator set up together.
#ifndef PITSTOP_TESTS_PLUGIN_TEST_UTIL_H_
#define PITSTOP_TESTS_PLUGIN_TEST_UTIL_H_

#include <stdlib.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace pitstop::emu {

// A fresh short socket path under /tmp (< 108 bytes), unique per process
// and call.
inline std::string TempSocketPath(const std::string& tag) {
  static int n = 0;
  return absl::StrCat("/tmp/pst-", tag, "-", getpid(), "-", n++, ".sock");
}

}  // namespace pitstop::emu

#endif  // PITSTOP_TESTS_PLUGIN_TEST_UTIL_H_
