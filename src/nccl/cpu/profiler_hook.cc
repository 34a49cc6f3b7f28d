#include "src/nccl/cpu/profiler_hook.h"

#include <strings.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace pitstop::cpunccl {
namespace {

uint64_t MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<uint64_t>(ts.tv_nsec);
}

// Process-global like NCCL's plugin state: loaded at the first
// communicator, never retried after a failure, never unloaded (NCCL
// dlcloses at refcount zero; keeping it is what a pinned plugin sees).
emu::Emulator* Loaded() {
  static std::once_flag once;
  static emu::Emulator* emulator = nullptr;
  std::call_once(once, [] {
    const char* env = std::getenv("NCCL_PROFILER_PLUGIN");
    std::string value = env != nullptr ? env : "";
    if (strcasecmp(value.c_str(), "none") == 0) return;
    // NCCL: unset or empty -> libnccl-profiler.so.
    if (value.empty()) value = "libnccl-profiler.so";
    auto emu = emu::Emulator::Create({.plugin = value});
    if (!emu.ok()) {
      if (env != nullptr) {
        std::fprintf(stderr, "cpu-nccl: profiler plugin %s: %s\n",
                     value.c_str(), emu.status().ToString().c_str());
      }
      return;
    }
    emulator = emu->release();  // lives as long as the process
  });
  return emulator;
}

}  // namespace

std::unique_ptr<CommProfiler> CommProfiler::Init(uint64_t comm_hash,
                                                 const std::string& name,
                                                 int n_ranks, int rank,
                                                 int n_nodes) {
  emu::Emulator* emulator = Loaded();
  if (emulator == nullptr) return nullptr;
  auto comm = emulator->InitComm({.comm_hash = comm_hash,
                                  .name = name,
                                  .n_ranks = n_ranks,
                                  .rank = rank,
                                  .n_nodes = n_nodes});
  if (!comm.ok()) return nullptr;
  return std::unique_ptr<CommProfiler>(new CommProfiler(std::move(*comm)));
}

CommProfiler::CommProfiler(std::unique_ptr<emu::Comm> comm)
    : comm_(std::move(comm)) {}

CommProfiler::~CommProfiler() { comm_->Finalize(); }

std::unique_ptr<emu::Op> CommProfiler::Begin(const OpInfo& info) {
  emu::OpSpec spec;
  spec.p2p = info.p2p;
  spec.func = info.func;
  spec.count = info.count;
  spec.datatype = info.datatype;
  spec.root = info.root;
  spec.peer = info.peer;
  spec.algo = "RING";
  spec.proto = "SIMPLE";
  spec.n_channels = 1;
  spec.seq_number = info.seq_number;
  return comm_->StartOp(spec);
}

void CommProfiler::Run(emu::Op* op, const OpInfo& info,
                       const std::function<void()>& transfer) {
  op->EnqueueDone();
  const int proxy =
      op->ProxyOpStart({.channel = 0,
                        .peer = info.proxy_peer,
                        .is_send = info.proxy_send,
                        .n_steps = 1,
                        .chunk_size = static_cast<int>(
                            info.bytes < (1u << 30) ? info.bytes : 1u << 30),
                        .pid = 0});
  op->ProxyOpInProgress(proxy);
  op->KernelStart(0, MonoNs());
  transfer();
  op->ProxyStep(proxy, 0, info.bytes);
  op->ProxyOpStop(proxy);
  op->KernelStop(0, MonoNs());
}

}  // namespace pitstop::cpunccl
