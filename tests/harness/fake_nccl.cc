// A tiny stand-in for libnccl.so.2 for interposer tests (no GPU, no real
// NCCL): exports the pnccl* communicator entry points with weak nccl*
// aliases like NCCL does, loads the profiler plugin by NCCL's rules at the
// first communicator (NCCL_PROFILER_PLUGIN; probes v6 then v5 like 2.29) and
// calls its init/finalize. Communicators are heap objects with a hash of
// their unique id (children: parent hash mixed with the split color).
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "plugin/abi/profiler_v5.h"
#include "src/nccl/emulator/nccl_emulator.h"

namespace {

struct FakeComm {
  uint64_t hash;
  int n_ranks;
  int rank;
  void* profiler_ctx;
};
struct UniqueId {
  char internal[128];
};

std::mutex g_mu;
bool g_loaded = false;
pitstop::abi::ProfilerV5* g_profiler = nullptr;  // v5 and v6 share init
int g_mask = 0;

pitstop::abi::ProfilerV5* Profiler() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_loaded) return g_profiler;  // NCCL never retries a failed load
  g_loaded = true;
  const char* env = std::getenv("NCCL_PROFILER_PLUGIN");
  auto lib = pitstop::emu::OpenPluginLibrary(env != nullptr ? env : "");
  if (!lib.ok()) return nullptr;
  for (const char* sym : {"ncclProfiler_v6", "ncclProfiler_v5"}) {
    if (void* p = dlsym(*lib, sym)) {
      g_profiler = static_cast<pitstop::abi::ProfilerV5*>(p);
      break;
    }
  }
  return g_profiler;
}

int MakeComm(FakeComm** out, uint64_t hash, int n_ranks, int rank) {
  auto* c = new FakeComm{hash, n_ranks, rank, nullptr};
  if (auto* p = Profiler()) {
    if (p->init(&c->profiler_ctx, hash, &g_mask, "fake", 1, n_ranks, rank,
                nullptr) != 0) {
      c->profiler_ctx = nullptr;  // continue without profiler
    }
  }
  *out = c;
  return 0;
}

int FreeComm(FakeComm* c) {
  if (c == nullptr) return 4;
  if (g_profiler != nullptr && c->profiler_ctx != nullptr) {
    g_profiler->finalize(c->profiler_ctx);
  }
  delete c;
  return 0;
}

uint64_t HashId(const UniqueId& id) {
  uint64_t h = 1469598103934665603ull;
  for (char ch : id.internal)
    h = (h ^ static_cast<uint8_t>(ch)) * 1099511628211ull;
  return h;
}

}  // namespace

extern "C" {

int pncclGetVersion(int* v) {
  *v = 22809;
  return 0;
}
// A unique id "fail:TEXT" makes creation fail as a misconfigured job's
// does (NVIDIA/nccl#426): ncclSystemError, TEXT as NCCL's last error.
thread_local char t_last_error[256] = "";
int pncclCommInitRank(FakeComm** comm, int nranks, UniqueId id, int rank) {
  if (std::strncmp(id.internal, "fail:", 5) == 0) {
    std::snprintf(t_last_error, sizeof(t_last_error), "%s", id.internal + 5);
    *comm = nullptr;
    return 2;  // ncclSystemError
  }
  return MakeComm(comm, HashId(id), nranks, rank);
}
const char* pncclGetLastError(FakeComm*) { return t_last_error; }
int pncclCommInitRankConfig(FakeComm** comm, int nranks, UniqueId id, int rank,
                            void*) {
  return MakeComm(comm, HashId(id), nranks, rank);
}
int pncclCommInitAll(FakeComm** comms, int ndev, const int*) {
  for (int i = 0; i < ndev; ++i)
    MakeComm(&comms[i], 0xA11 + 0x100 * i, ndev, i);
  return 0;
}
int pncclCommInitRankScalable(FakeComm** comm, int nranks, int rank, int,
                              UniqueId* ids, void*) {
  return MakeComm(comm, HashId(ids[0]), nranks, rank);
}
int pncclCommSplit(FakeComm* comm, int color, int key, FakeComm** out, void*) {
  if (color < 0) {
    *out = nullptr;
    return 0;
  }
  return MakeComm(out, comm->hash * 31 + static_cast<uint64_t>(color) + 1,
                  comm->n_ranks / 2 > 0 ? comm->n_ranks / 2 : 1,
                  key % (comm->n_ranks / 2 > 0 ? comm->n_ranks / 2 : 1));
}
int pncclCommShrink(FakeComm* comm, int*, int count, FakeComm** out, void*,
                    int) {
  return MakeComm(out, comm->hash * 37 + 1, comm->n_ranks - count, 0);
}
int pncclCommFinalize(FakeComm* comm) { return comm != nullptr ? 0 : 4; }
int pncclCommDestroy(FakeComm* comm) { return FreeComm(comm); }
int pncclCommAbort(FakeComm* comm) { return FreeComm(comm); }
int pncclCommRevoke(FakeComm* comm, int) { return comm != nullptr ? 0 : 4; }
int pncclCommCuDevice(const FakeComm* comm, int* dev) {
  *dev = comm->rank % 8;
  return 0;
}

#define PITSTOP_WEAK_ALIAS(name) \
  __attribute__((weak, alias("p" #name))) decltype(p##name) name;
PITSTOP_WEAK_ALIAS(ncclGetVersion)
PITSTOP_WEAK_ALIAS(ncclCommInitRank)
PITSTOP_WEAK_ALIAS(ncclCommInitRankConfig)
PITSTOP_WEAK_ALIAS(ncclCommInitAll)
PITSTOP_WEAK_ALIAS(ncclCommInitRankScalable)
PITSTOP_WEAK_ALIAS(ncclCommSplit)
PITSTOP_WEAK_ALIAS(ncclCommShrink)
PITSTOP_WEAK_ALIAS(ncclCommFinalize)
PITSTOP_WEAK_ALIAS(ncclCommDestroy)
PITSTOP_WEAK_ALIAS(ncclCommAbort)
PITSTOP_WEAK_ALIAS(ncclCommRevoke)
PITSTOP_WEAK_ALIAS(ncclCommCuDevice)
PITSTOP_WEAK_ALIAS(ncclGetLastError)

}  // extern "C"
