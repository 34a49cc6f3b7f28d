// Peer credentials of the agent's Unix socket connections (SO_PEERCRED):
// the kernel's word on which process connected, recorded at accept and
// compared with the pid a rank's hello claims (docs/reliability.md,
// "Trust"). A process may only speak for itself.
#ifndef PITSTOP_AGENT_PEER_CRED_H_
#define PITSTOP_AGENT_PEER_CRED_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "pitstop/sync.h"

namespace pitstop::agent {

struct PeerCred {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string ToString() const;  // "pid P uid U gid G"
};

// SO_PEERCRED of a connected Unix socket; Internal on failure.
absl::StatusOr<PeerCred> PeerCredOf(int fd);

// True when `claimed` (a hello's pid) is the connected process `peer`: the
// same number, or the number the process has in its own pid namespace (a
// rank in a container sees another pid than the agent on the host;
// /proc/PID/status NSpid lists all of them).
bool PidMatchesPeer(uint32_t claimed, pid_t peer);

// Why a hello claiming `claimed` on a connection of `peer` is refused, or
// OK. PermissionDenied names both pids.
absl::Status CheckClaimedPid(uint32_t claimed, const PeerCred& peer);

// fd -> credentials of the connections the IngestListener handed to gRPC.
// gRPC names such a connection's peer "fd:N" (AddInsecureChannelFromFd), so
// a stream finds its process by its context's peer(). A descriptor number
// is reused only after gRPC closed it, and Record() then overwrites it.
// Thread-safe.
class PeerCredRegistry {
 public:
  void Record(int fd, const PeerCred& cred);
  // The credentials of gRPC peer "fd:N"; nullopt for other peers.
  std::optional<PeerCred> Lookup(const std::string& grpc_peer) const;

 private:
  mutable Mutex mu_;
  absl::flat_hash_map<int, PeerCred> by_fd_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pitstop::agent

#endif  // PITSTOP_AGENT_PEER_CRED_H_
