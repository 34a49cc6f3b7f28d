// Small helpers shared by the agent tests.
#ifndef PITSTOP_TESTS_AGENT_TEST_UTIL_H_
#define PITSTOP_TESTS_AGENT_TEST_UTIL_H_

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace pitstop::agent::testing {

// A short temporary directory under /tmp (Unix socket paths < 108 bytes),
// removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/psa.XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A Unix socket of `type` (SOCK_STREAM, SOCK_DGRAM) bound to `path`, not
// listening; -1 on failure.
inline int BindUnixSocket(const std::string& path, int type) {
  const int fd = socket(AF_UNIX, type, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr))) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

// Polls `cond` every 10 ms until it holds or `timeout` passes.
inline bool Eventually(const std::function<bool()>& cond,
                       absl::Duration timeout = absl::Seconds(20)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!cond()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

}  // namespace pitstop::agent::testing

#endif  // PITSTOP_TESTS_AGENT_TEST_UTIL_H_
