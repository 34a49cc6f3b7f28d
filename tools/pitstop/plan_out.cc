// Where --plan-out may write, and writing there (plan_out.h).
#include "tools/pitstop/plan_out.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace pitstop::tool {
namespace {

absl::Status Refuse(const std::string& path, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("--plan-out '", path, "': ", why));
}

// Whether the regular file at `path` is empty or starts as WritePlan
// writes a plan: '{', then the key "epoch" (what may be replaced without
// --force).
bool EmptyOrAPlan(const std::string& path) {
  char head[64];
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  const ssize_t n = ::read(fd, head, sizeof(head));
  ::close(fd);
  if (n < 0) return false;
  absl::string_view s(head, static_cast<size_t>(n));
  if (s.empty()) return true;
  s = absl::StripLeadingAsciiWhitespace(s);
  if (!absl::ConsumePrefix(&s, "{")) return false;
  return absl::StartsWith(absl::StripLeadingAsciiWhitespace(s), "\"epoch\"");
}

// What is at `path` now (not following a link): OK when it may be
// replaced.
absl::Status CheckExisting(const std::string& path, bool force) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return absl::OkStatus();  // nothing
  if (S_ISLNK(st.st_mode)) {
    if (force) return absl::OkStatus();
    return Refuse(path,
                  "is a symbolic link; the plan would replace the link (not "
                  "write through it): give --force to replace it, or another "
                  "file name");
  }
  if (!S_ISREG(st.st_mode)) {
    return Refuse(path,
                  "is not a regular file (a device, FIFO or socket): give a "
                  "file name");
  }
  if (force || EmptyOrAPlan(path)) return absl::OkStatus();
  return Refuse(path,
                "exists and is not an earlier plan (it does not start with "
                "'{\"epoch\"'): give --force to replace it, or another file "
                "name");
}

}  // namespace

absl::Status CheckPlanOut(const std::string& path,
                          const std::vector<std::string>& inputs, bool force) {
  namespace fs = std::filesystem;
  if (path.empty()) return Refuse(path, "give a file name");
  std::error_code ec;
  for (const std::string& in : inputs) {
    // equivalent() follows links: a link to the input is the input.
    if (!in.empty() && fs::equivalent(path, in, ec)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--plan-out ", path, ": is the input file ", in,
          " (the plan would overwrite it; give another file name)"));
    }
  }
  if (fs::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--plan-out ", path, ": is a directory (give a file name, e.g. ",
        (fs::path(path) / "plan.json").string(), ")"));
  }
  const fs::path dir = fs::path(path).parent_path();
  if (!dir.empty() && !fs::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--plan-out ", path, ": ", dir.string(),
        fs::exists(dir, ec) ? " is not a directory" : " does not exist"));
  }
  return CheckExisting(path, force);
}

namespace {

// A new file next to `path` (".<name>.<pid>.<k>.tmp"), open for writing;
// -1 with errno set when none can be made.
int OpenTemp(const std::string& path, std::string* tmp) {
  const std::filesystem::path p(path);
  for (int k = 0; k < 100; ++k) {
    *tmp = (p.parent_path() / absl::StrCat(".", p.filename().string(), ".",
                                           ::getpid(), ".", k, ".tmp"))
               .string();
    const int fd =
        ::open(tmp->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

bool WriteAll(int fd, absl::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    text.remove_prefix(static_cast<size_t>(n));
  }
  return ::fsync(fd) == 0;
}

}  // namespace

absl::Status ReplaceFile(const std::string& path, const std::string& text) {
  std::string tmp;
  errno = 0;
  const int fd = OpenTemp(path, &tmp);
  if (fd < 0) {
    return Refuse(path, absl::StrCat("cannot create a file next to it: ",
                                     std::strerror(errno)));
  }
  bool ok = WriteAll(fd, text);
  int err = errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (ok) return absl::OkStatus();
  ::unlink(tmp.c_str());
  return Refuse(path, absl::StrCat("cannot write it: ",
                                   err != 0 ? std::strerror(err) : "failed"));
}

}  // namespace pitstop::tool
