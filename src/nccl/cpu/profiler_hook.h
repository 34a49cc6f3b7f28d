// The CPU NCCL backend's profiler side: loads the profiler plugin the way
// NCCL does (once per process, at the first communicator;
// NCCL_PROFILER_PLUGIN naming rules and the v6..v3 probe, through the NCCL
// emulator's loader) and emits the events of each real operation with its
// real timings, so telemetry flows from the collectives the backend runs.
//
// Per operation (NCCL's order, ../shared/docs/nccl-plugin-abi.md §9):
// Begin() at the API call (GroupApi, CollApi/P2pApi, KernelLaunch on the
// calling thread), then Run() when the group ends: Group + Coll/P2p (host
// task), one ProxyOp on channel 0 and a KernelCh whose "GPU" timer values
// are CLOCK_MONOTONIC ns taken around the transfer, one ProxyStep with the
// bytes moved. One channel per operation: the host does the work.
//
// Thread safety: CommProfiler is used by the thread that owns the
// communicator (NCCL's rule for one communicator); the loader is
// thread-safe.
#ifndef PITSTOP_SRC_NCCL_CPU_PROFILER_HOOK_H_
#define PITSTOP_SRC_NCCL_CPU_PROFILER_HOOK_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "src/nccl/emulator/nccl_emulator.h"

namespace pitstop::cpunccl {

struct OpInfo {
  bool p2p = false;
  const char* func = "AllReduce";  // NCCL's strings
  size_t count = 0;
  const char* datatype = "ncclFloat32";
  int root = -1;
  int peer = -1;
  uint64_t seq_number = 0;
  size_t bytes = 0;  // moved by this rank (ProxyStep)
  int proxy_peer = 0;
  bool proxy_send = true;
};

class CommProfiler {
 public:
  // nullptr when the process has no profiler (NCCL_PROFILER_PLUGIN=none, no
  // library, no ncclProfiler symbol) or the plugin's init failed for this
  // communicator (NCCL then runs it without profiler).
  static std::unique_ptr<CommProfiler> Init(uint64_t comm_hash,
                                            const std::string& name,
                                            int n_ranks, int rank, int n_nodes);
  ~CommProfiler();  // the plugin's finalize

  // API-call events; the returned op is passed to Run.
  std::unique_ptr<emu::Op> Begin(const OpInfo& info);
  // Host task, proxy and kernel events around `transfer`.
  void Run(emu::Op* op, const OpInfo& info,
           const std::function<void()>& transfer);

 private:
  explicit CommProfiler(std::unique_ptr<emu::Comm> comm);
  std::unique_ptr<emu::Comm> comm_;
};

}  // namespace pitstop::cpunccl

#endif  // PITSTOP_SRC_NCCL_CPU_PROFILER_HOOK_H_
