// The first failure of a CPU NCCL communicator, kept where every member can
// read it: a file next to the communicator's rendezvous keys in its store
// directory.
//
// Why: when a member dies, its ring neighbours see its connections close
// and fail; each failed rank then closes its own connections so that peers
// blocked on it fail at once (CpuComm::CloseConnections). A rank two hops
// from the dead one therefore learns of the failure from a live neighbour
// ("connection closed by rank 1", where rank 3 died), which names the wrong
// rank. The first rank to fail writes what it saw before it closes its
// connections, so a rank that fails because of it finds the note and
// reports the failure's origin ("...; the communicator's first failure:
// rank 2: AllReduce: connection closed by rank 3 (exited or failed)").
//
// Best effort: a note that cannot be written or read leaves the error as
// it was. Thread-safe (no shared state; the file system orders writers).
#ifndef PITSTOP_SRC_NCCL_CPU_FIRST_FAILURE_H_
#define PITSTOP_SRC_NCCL_CPU_FIRST_FAILURE_H_

#include <string>

#include "absl/status/status.h"

namespace pitstop::cpunccl {

// The note's path for the communicator whose store keys start with `prefix`
// in `store_dir`.
std::string FirstFailurePath(const std::string& store_dir,
                             const std::string& prefix);

// Records `failure` of `rank` as the communicator's first failure when no
// member recorded one (created atomically: one writer wins, its note is
// whole). When another member's note is there, returns `failure` with that
// note appended; otherwise `failure` unchanged.
absl::Status WithFirstFailure(const std::string& path, int rank,
                              const absl::Status& failure);

}  // namespace pitstop::cpunccl

#endif  // PITSTOP_SRC_NCCL_CPU_FIRST_FAILURE_H_
