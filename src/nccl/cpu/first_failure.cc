#include "src/nccl/cpu/first_failure.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"

namespace pitstop::cpunccl {
namespace {

constexpr size_t kMaxNoteBytes = 2048;

bool WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

std::string ReadNote(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string out(kMaxNoteBytes, '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  out.resize(got);
  return out;
}

// Writes `note` to a private file and links it to `path`: link(2) fails
// with EEXIST when another member was first, and a reader never sees a
// partly written note. True when this note became the first.
bool CreateNote(const std::string& path, const std::string& note, int rank) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid(), ".", rank);
  const int fd =
      open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  const bool written = WriteAll(fd, note);
  close(fd);
  const bool linked = written && link(tmp.c_str(), path.c_str()) == 0;
  unlink(tmp.c_str());
  return linked;
}

}  // namespace

std::string FirstFailurePath(const std::string& store_dir,
                             const std::string& prefix) {
  return absl::StrCat(store_dir, "/", prefix, ".first-failure");
}

absl::Status WithFirstFailure(const std::string& path, int rank,
                              const absl::Status& failure) {
  if (failure.ok()) return failure;
  std::string mine = absl::StrCat("rank ", rank, ": ", failure.message());
  if (mine.size() > kMaxNoteBytes) mine.resize(kMaxNoteBytes);
  if (CreateNote(path, mine, rank)) return failure;
  const std::string first = ReadNote(path);
  if (first.empty() || first == mine) return failure;
  return absl::Status(
      failure.code(),
      absl::StrCat(failure.message(),
                   "; the communicator's first failure: ", first));
}

}  // namespace pitstop::cpunccl
