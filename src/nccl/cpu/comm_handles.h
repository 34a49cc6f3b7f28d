// Communicator handles of the CPU NCCL backend: what an ncclComm_t points
// at, the table of live handles (a call on a destroyed or aborted handle is
// ncclInvalidArgument, never a use of freed memory), blocking and
// non-blocking init, and the mapping of errors to ncclResult_t with a
// per-thread last-error message.
//
// Threads: any thread; one communicator is used by one thread at a time
// (NCCL's rule), except ncclCommGetAsyncError, which any thread may call.
#ifndef PITSTOP_SRC_NCCL_CPU_COMM_HANDLES_H_
#define PITSTOP_SRC_NCCL_CPU_COMM_HANDLES_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "src/nccl/cpu/cpu_comm.h"
#include "src/nccl/cpu/nccl_api.h"

namespace pitstop::cpunccl {

struct CommState {
  std::mutex mu;
  std::unique_ptr<CpuComm> comm;  // set once init completed
  std::atomic<int> init_result{ncclInProgress};
  std::string init_error;  // guarded by mu
  bool aborted = false;    // guarded by mu
  std::thread init_thread;
};

}  // namespace pitstop::cpunccl

// What an ncclComm_t points at. The state is shared with a non-blocking
// init's thread, so an abort can drop the handle while the thread runs on.
struct ncclComm {
  std::shared_ptr<pitstop::cpunccl::CommState> state;
  bool revoked = false;
  bool finalized = false;
};

namespace pitstop::cpunccl {

// Sets this thread's last error (ncclGetLastError) and returns r.
ncclResult_t Fail(ncclResult_t r, const std::string& msg);
// ncclSuccess, or the ncclResult_t for a failed status (last error set).
ncclResult_t FromStatus(const absl::Status& st);
const char* LastError();

bool IsLive(ncclComm_t comm);

// The usable communicator behind a handle, waiting for a non-blocking init
// to finish. Sets *r and returns nullptr when there is none.
CpuComm* Ready(ncclComm_t comm, ncclResult_t* r, bool allow_revoked = false);

struct ParsedConfig {
  bool blocking = true;
  std::string name;
};
ncclResult_t ParseConfig(const ncclConfig_t* config, ParsedConfig* out);

// commHash of a communicator made from a unique id: NCCL's (getHash of its
// bytes, DJB2a), so a hash computed before init matches.
uint64_t HashId(const ncclUniqueId& id);

// What NCCL's ncclTopoGetSystem does with NCCL_TOPO_FILE at every
// communicator init and split: when set, the file must be readable (else
// ncclSystemError, as NCCL fails the init); with NCCL_DEBUG=INFO it logs
// "NCCL_TOPO_FILE set by environment to PATH" and, per <net> of the file,
// its name and speed (the NICs the init would see), tagged with the comm
// hash and rank. The backend has no NICs of its own: this is what lets a
// test see the topology a creation was given.
ncclResult_t ReadTopologyFile(uint64_t comm_hash, int rank);

// Makes a handle and connects it (on a background thread when
// !blocking: returns ncclInProgress).
ncclResult_t StartComm(ncclComm_t* out, CommOptions options, bool blocking);
// A handle for a child communicator already built (split, shrink).
ncclResult_t Adopt(ncclComm_t* out, std::unique_ptr<CpuComm> comm);
// ncclCommDestroy (waits for a running init) or ncclCommAbort (does not).
ncclResult_t Release(ncclComm_t comm, bool abort);

}  // namespace pitstop::cpunccl

#endif  // PITSTOP_SRC_NCCL_CPU_COMM_HANDLES_H_
