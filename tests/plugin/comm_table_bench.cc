// Cost of communicator virtualisation on the hot path (docs/benchmarks.md,
// "Communicator lookup"), side by side in one run:
//
// - In process: the interposer's per-call mapping (virtual_comms.h OnComm:
//   range check, atomic add, binding, atomic subtract) around a do-nothing
//   "NCCL" call, against calling it directly; a foreign (not virtualised)
//   communicator, which is what every call costs with
//   PITSTOP_VIRTUALIZE_COMMS off; and inside an open group.
// - Through the built libnccl-profiler-pitstop.so (dlopened, as preloaded):
//   its exported ncclAllReduce on a handle it created and on a foreign
//   communicator, against calling the "NCCL" below directly. This binary
//   exports pncclCommInitRank / pncclAllReduce stand-ins (-rdynamic) that
//   the library finds with dlsym like the real ones.
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <stdlib.h>

#include <cstdio>
#include <vector>

#include "plugin/virtual_comms.h"

namespace pp = pitstop::plugin;

namespace {

int g_sink[64];

// Stands in for pncclAllReduce: not inlined, touches its argument.
__attribute__((noinline)) pp::NcclResult FakeCollective(pp::NcclComm comm) {
  benchmark::DoNotOptimize(comm);
  return pitstop::abi::kNcclSuccess;
}

// One handle per benchmark thread, so threads do not share a slot.
pp::NcclComm HandleFor(int thread) {
  static std::vector<void*>* handles = [] {
    auto* v = new std::vector<void*>();
    for (int i = 0; i < 64; ++i) {
      v->push_back(pp::g_comm_table.Bind(&g_sink[i], 0, 64));
    }
    return v;
  }();
  return static_cast<pp::NcclComm>((*handles)[thread]);
}

void BM_Direct(benchmark::State& state) {
  auto comm = reinterpret_cast<pp::NcclComm>(&g_sink[state.thread_index()]);
  for (auto _ : state) {
    benchmark::DoNotOptimize(FakeCollective(comm));
  }
}
BENCHMARK(BM_Direct)->Threads(1)->Threads(2);

void BM_LookupForeign(benchmark::State& state) {
  auto comm = reinterpret_cast<pp::NcclComm>(&g_sink[state.thread_index()]);
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        pp::OnComm(comm, [](pp::NcclComm c) { return FakeCollective(c); }));
  }
}
BENCHMARK(BM_LookupForeign)->Threads(1)->Threads(2);

void BM_LookupHandle(benchmark::State& state) {
  pp::NcclComm h = HandleFor(state.thread_index());
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        pp::OnComm(h, [](pp::NcclComm c) { return FakeCollective(c); }));
  }
}
BENCHMARK(BM_LookupHandle)->Threads(1)->Threads(2);

// Two threads on the same handle: both atomics hit one cache line (the
// worst case: one communicator driven from two threads).
void BM_LookupSharedHandle(benchmark::State& state) {
  pp::NcclComm h = HandleFor(0);
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        pp::OnComm(h, [](pp::NcclComm c) { return FakeCollective(c); }));
  }
}
BENCHMARK(BM_LookupSharedHandle)->Threads(2);

// 8 collectives on one handle inside a group, per iteration (the
// interposer's group bookkeeping without NCCL's ncclGroupStart/End).
void BM_LookupHandleInGroupOf8(benchmark::State& state) {
  pp::NcclComm h = HandleFor(state.thread_index());
  for (auto _ : state) {
    pp::OnGroupStart(pitstop::abi::kNcclSuccess);
    for (int i = 0; i < 8; ++i) {
      benchmark::DoNotOptimize(
          pp::OnComm(h, [](pp::NcclComm c) { return FakeCollective(c); }));
    }
    pp::OnGroupEnd();
  }
}
BENCHMARK(BM_LookupHandleInGroupOf8)->Threads(1);

void BM_DirectGroupOf8(benchmark::State& state) {
  auto comm = reinterpret_cast<pp::NcclComm>(&g_sink[state.thread_index()]);
  for (auto _ : state) {
    for (int i = 0; i < 8; ++i) benchmark::DoNotOptimize(FakeCollective(comm));
  }
}
BENCHMARK(BM_DirectGroupOf8)->Threads(1);

}  // namespace

// The stand-in NCCL the library forwards to (found by dlsym).
extern "C" __attribute__((visibility("default"), noinline)) int
pncclCommInitRank(void** comm, int, pp::NcclUniqueId, int) {
  static int fake_comm;
  *comm = &fake_comm;
  return 0;
}
extern "C" __attribute__((visibility("default"), noinline)) int pncclAllReduce(
    const void*, void*, size_t, int, int, void* comm, void*) {
  benchmark::DoNotOptimize(comm);
  return 0;
}

namespace {

using AllReduceFn = int (*)(const void*, void*, size_t, int, int, void*, void*);
using InitRankFn = int (*)(void**, int, pp::NcclUniqueId, int);

struct Library {
  AllReduceFn all_reduce = nullptr;
  void* handle = nullptr;   // made by the library's ncclCommInitRank
  void* foreign = nullptr;  // never seen by the library
};

const Library& Lib() {
  static Library lib = [] {
    Library l;
    void* so = dlopen(PITSTOP_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    if (so == nullptr) {
      std::fprintf(stderr, "dlopen: %s\n", dlerror());
      std::exit(1);
    }
    l.all_reduce = reinterpret_cast<AllReduceFn>(dlsym(so, "ncclAllReduce"));
    auto init = reinterpret_cast<InitRankFn>(dlsym(so, "ncclCommInitRank"));
    if (l.all_reduce == nullptr || init == nullptr ||
        init(&l.handle, 1, pp::NcclUniqueId{}, 0) != 0) {
      std::fprintf(stderr, "the library's entry points failed\n");
      std::exit(1);
    }
    static int foreign_comm;
    l.foreign = &foreign_comm;
    return l;
  }();
  return lib;
}

void BM_SoDirectNccl(benchmark::State& state) {
  void* comm = Lib().foreign;
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        pncclAllReduce(nullptr, nullptr, 0, 0, 0, comm, nullptr));
  }
}
BENCHMARK(BM_SoDirectNccl);

void BM_SoAllReduceForeign(benchmark::State& state) {
  const Library& l = Lib();
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        l.all_reduce(nullptr, nullptr, 0, 0, 0, l.foreign, nullptr));
  }
}
BENCHMARK(BM_SoAllReduceForeign);

void BM_SoAllReduceHandle(benchmark::State& state) {
  const Library& l = Lib();
  if (l.handle == l.foreign || l.handle == nullptr) {
    state.SkipWithError("the library did not virtualise the communicator");
    return;
  }
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        l.all_reduce(nullptr, nullptr, 0, 0, 0, l.handle, nullptr));
  }
}
BENCHMARK(BM_SoAllReduceHandle);

}  // namespace

int main(int argc, char** argv) {
  // Before the library's first communicator: it reads the variable once.
  setenv("PITSTOP_VIRTUALIZE_COMMS", "1", 1);
  setenv("NCCL_PROFILER_PLUGIN", "none", 1);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
