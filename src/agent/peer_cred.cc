#include "src/agent/peer_cred.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace pitstop::agent {

std::string PeerCred::ToString() const {
  return absl::StrCat("pid ", pid, " uid ", uid, " gid ", gid);
}

absl::StatusOr<PeerCred> PeerCredOf(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return absl::InternalError(
        absl::StrCat("SO_PEERCRED: ", std::strerror(errno)));
  }
  return PeerCred{cred.pid, cred.uid, cred.gid};
}

bool PidMatchesPeer(uint32_t claimed, pid_t peer) {
  if (peer <= 0) return false;
  if (claimed == static_cast<uint32_t>(peer)) return true;
  // "NSpid:\t4711\t12" = the pid in each nested namespace, outermost first.
  std::ifstream status(absl::StrCat("/proc/", peer, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (!absl::StartsWith(line, "NSpid:")) continue;
    for (absl::string_view f :
         absl::StrSplit(absl::string_view(line).substr(6),
                        absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
      uint32_t v = 0;
      if (absl::SimpleAtoi(f, &v) && v == claimed) return true;
    }
    return false;
  }
  return false;
}

absl::Status CheckClaimedPid(uint32_t claimed, const PeerCred& peer) {
  if (PidMatchesPeer(claimed, peer.pid)) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("hello.pid ", claimed, " is not the connected process (",
                   peer.ToString(), "): a process may only report for itself"));
}

void PeerCredRegistry::Record(int fd, const PeerCred& cred) {
  MutexLock lock(&mu_);
  by_fd_[fd] = cred;
}

std::optional<PeerCred> PeerCredRegistry::Lookup(
    const std::string& grpc_peer) const {
  absl::string_view p = grpc_peer;
  if (!absl::ConsumePrefix(&p, "fd:")) return std::nullopt;
  int fd = -1;
  if (!absl::SimpleAtoi(p, &fd)) return std::nullopt;
  MutexLock lock(&mu_);
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return std::nullopt;
  return it->second;
}

}  // namespace pitstop::agent
