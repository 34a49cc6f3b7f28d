#include "pitstop/bounded_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pitstop {
namespace {

const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

std::string Prefix(absl::string_view what, const std::string& path) {
  return what.empty() ? absl::StrCat(path, ": ")
                      : absl::StrCat(what, ": ", path, ": ");
}

}  // namespace

absl::StatusOr<RegularFile> RegularFile::Open(const std::string& path,
                                              absl::string_view what) {
  // O_NONBLOCK: opening a FIFO without a writer would otherwise wait for
  // one, forever and deaf to SIGTERM.
  const int fd =
      ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    const std::string msg =
        absl::StrCat(Prefix(what, path), "cannot open: ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg)
                         : absl::InvalidArgumentError(msg);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(Prefix(what, path), "cannot stat: ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        Prefix(what, path), "not a regular file (", KindOf(st.st_mode), ")"));
  }
  return RegularFile(fd, static_cast<uint64_t>(st.st_size));
}

absl::Status CheckAppendableRegularFile(const std::string& path,
                                        absl::string_view what) {
  // O_NONBLOCK: a FIFO without a reader fails (ENXIO) instead of waiting.
  const int fd = ::open(
      path.c_str(),
      O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, 0666);
  struct stat st {};
  if (fd < 0) {
    const int err = errno;
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(
          Prefix(what, path), "not a regular file (", KindOf(st.st_mode), ")"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(Prefix(what, path), "cannot open: ", std::strerror(err)));
  }
  const bool fstat_ok = ::fstat(fd, &st) == 0;
  const int err = errno;
  ::close(fd);
  if (!fstat_ok) {
    return absl::InvalidArgumentError(
        absl::StrCat(Prefix(what, path), "cannot stat: ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        Prefix(what, path), "not a regular file (", KindOf(st.st_mode), ")"));
  }
  return absl::OkStatus();
}

RegularFile::RegularFile(RegularFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), size_(other.size_) {}

RegularFile& RegularFile::operator=(RegularFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
  }
  return *this;
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

int RegularFile::Release() { return std::exchange(fd_, -1); }

absl::StatusOr<std::string> ReadRegularFile(const std::string& path,
                                            absl::string_view what,
                                            uint64_t max_bytes) {
  absl::StatusOr<RegularFile> file = RegularFile::Open(path, what);
  if (!file.ok()) return file.status();
  auto too_large = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        Prefix(what, path), "larger than the limit of ", max_bytes, " bytes"));
  };
  if (file->size() > max_bytes) return too_large();
  std::string out;
  out.resize(static_cast<size_t>(file->size()) + 1);
  size_t used = 0;
  while (true) {
    if (used == out.size()) {
      // The file grew since fstat: read on, but never past the limit.
      if (used > max_bytes) return too_large();
      out.resize(std::min<uint64_t>(max_bytes + 1, out.size() * 2 + 4096));
    }
    const ssize_t got =
        ::read(file->fd(), out.data() + used, out.size() - used);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(Prefix(what, path), "read error at byte ", used, ": ",
                       std::strerror(errno)));
    }
    if (got == 0) break;
    used += static_cast<size_t>(got);
  }
  if (used > max_bytes) return too_large();
  out.resize(used);
  return out;
}

}  // namespace pitstop
