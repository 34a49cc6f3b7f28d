// Files named by a flag or a configuration key, opened so that no name can
// hang or exhaust the process (docs/reliability.md, "Bounded inputs").
//
//   ASSIGN_OR_RETURN(std::string pem,
//                    ReadRegularFile(path, "tls.ca (--tls-ca)"));
//
// Only regular files are read: /dev/zero, a FIFO, a socket or a directory is
// refused by name before a byte is read. The file is opened with O_NONBLOCK,
// so opening a FIFO that has no writer returns at once instead of blocking,
// and the type is checked on the opened descriptor (fstat), so a path swapped
// between a check and the open cannot slip through. Reads stop at a size
// limit: a file that grows while it is read is refused, not followed.
#ifndef PITSTOP_BOUNDED_FILE_H_
#define PITSTOP_BOUNDED_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pitstop {

// The default limit of ReadRegularFile: certificates, keys, CA bundles,
// token lists and YAML configurations are kilobytes; 16 MiB is far above
// any real one and far below what hurts a daemon.
inline constexpr uint64_t kMaxFlagFileBytes = uint64_t{16} << 20;

// An open, read-only regular file. Movable, closes on destruction. Not
// thread-safe; one owner.
class RegularFile {
 public:
  // Opens `path` (O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY) and refuses
  // anything but a regular file. Errors start with `what` (the flag or key
  // that named the file; may be empty) and name the path: NotFound when it
  // does not exist, InvalidArgument otherwise ("--tls-ca: /dev/zero: not a
  // regular file (a character device)").
  static absl::StatusOr<RegularFile> Open(const std::string& path,
                                          absl::string_view what);

  RegularFile(RegularFile&& other) noexcept;
  RegularFile& operator=(RegularFile&& other) noexcept;
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  ~RegularFile();

  int fd() const { return fd_; }
  // Size when opened (fstat).
  uint64_t size() const { return size_; }
  // Hands the descriptor to the caller (e.g. fdopen); this object no longer
  // closes it.
  int Release();

 private:
  RegularFile(int fd, uint64_t size) : fd_(fd), size_(size) {}
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Reads the whole regular file `path`, at most `max_bytes`: InvalidArgument
// "<what>: <path>: larger than <max_bytes> bytes" beyond, and the errors of
// RegularFile::Open.
absl::StatusOr<std::string> ReadRegularFile(
    const std::string& path, absl::string_view what,
    uint64_t max_bytes = kMaxFlagFileBytes);

// Opens `path` for appending (creating it, mode 0666 & ~umask) without
// blocking and refuses anything but a regular file, as RegularFile::Open
// does for reading: a FIFO named by --log-file would otherwise block the
// daemon's start forever. The caller then opens the name itself (spdlog).
absl::Status CheckAppendableRegularFile(const std::string& path,
                                        absl::string_view what);

}  // namespace pitstop

#endif  // PITSTOP_BOUNDED_FILE_H_
