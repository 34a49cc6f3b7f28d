// Benchmarks of the in-process library (docs/benchmarks.md has the command
// and the numbers).
//
//   BM_Pair/<type>      start+stop of one event through the exported
//                       ncclProfiler_v5 table of the real .so, 1 and 2
//                       producing threads; counter allocs_per_pair comes from
//                       this binary's malloc wrappers (counted, not assumed).
//   BM_NullPair/<type>  the same harness driving a do-nothing plugin table:
//                       own cost = BM_Pair - BM_NullPair (same run).
//   BM_BasePair/<type>  the same harness driving another build of the
//                       library loaded into the same process
//                       (PITSTOP_BENCH_BASELINE_PLUGIN=path/to/.so, e.g.
//                       main's): ratio new/old in one run. Skipped, saying
//                       so, when unset. tools/bench-hotpath.sh runs these.
//   BM_ExporterThroughput  the real exporter draining one ring through the
//                       shared-memory transport into the agent's real
//                       ingest server: records/s, bytes/record.
//   BM_EightRanks       8 exporters (8 emulated ranks) x 50,000 records/s
//                       each for 2 s into one ingest server: drops must be 0.
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "plugin/abi/profiler_v5.h"
#include "plugin/comm_registry.h"
#include "plugin/config.h"
#include "plugin/exporter.h"
#include "plugin/recorder.h"
#include "plugin/ring.h"
#include "src/agent/shm_ingest_server.h"
#include "src/nccl/emulator/nccl_emulator.h"
#include "tests/harness/telemetry_receiver.h"

// Counting allocator: every malloc on the calling thread (the .so's
// included, and operator new, which calls malloc) bumps that thread's
// counter. Executable TLS (local-exec) needs no allocation itself.
thread_local uint64_t t_allocs = 0;
extern "C" void* __libc_malloc(size_t);
extern "C" void* __libc_calloc(size_t, size_t);
extern "C" void* __libc_realloc(void*, size_t);
extern "C" void* malloc(size_t n) {
  ++t_allocs;
  return __libc_malloc(n);
}
extern "C" void* calloc(size_t a, size_t b) {
  ++t_allocs;
  return __libc_calloc(a, b);
}
extern "C" void* realloc(void* p, size_t n) {
  ++t_allocs;
  return __libc_realloc(p, n);
}

namespace pitstop {
namespace {

namespace abi = ::pitstop::abi;

struct Loaded {
  abi::ProfilerV5* p = nullptr;
  void* ctx = nullptr;
  int mask = 0;
};

Loaded* Load(const std::string& path) {
  auto* l = new Loaded();
  // No agent: the exporter drains and drops (counted), so the rings
  // never fill and only the hot path is measured.
  setenv("PITSTOP_AGENT_SOCKET", "/tmp/pitstop-bench-no-agent.sock", 1);
  setenv("PITSTOP_EVENT_MASK", "coll|p2p|proxyop|kernelch|proxystep", 1);
  auto lib = emu::OpenPluginLibrary(path);
  if (!lib.ok()) {
    fprintf(stderr, "cannot load %s: %s\n", path.c_str(),
            std::string(lib.status().message()).c_str());
    std::abort();
  }
  l->p = static_cast<abi::ProfilerV5*>(dlsym(*lib, "ncclProfiler_v5"));
  if (l->p == nullptr ||
      l->p->init(&l->ctx, 0xBE7C, &l->mask, "bench", 1, 8, 0, nullptr) != 0) {
    std::abort();
  }
  return l;
}

Loaded& Plugin() {
  static Loaded* l = Load(emu::BuiltPluginPath());
  return *l;
}

// Another build of the library (RTLD_LOCAL: its own runtime, exporter and
// symbols), or null.
Loaded* Baseline() {
  static Loaded* l = [] {
    const char* path = getenv("PITSTOP_BENCH_BASELINE_PLUGIN");
    return path != nullptr && path[0] != '\0' ? Load(path) : nullptr;
  }();
  return l;
}

enum PairType { kColl, kKernelCh, kProxyOp, kProxyStep };

// The do-nothing plugin: what NCCL's call through a table costs, and what
// this harness costs per pair.
int g_null_handle;
abi::NcclResult NullStart(void*, void** h, abi::DescrV5*) {
  *h = &g_null_handle;
  return abi::kNcclSuccess;
}
abi::NcclResult NullStop(void*) { return abi::kNcclSuccess; }
abi::NcclResult NullRecord(void*, int, abi::StateArgsV5*) {
  return abi::kNcclSuccess;
}
abi::NcclResult NullFinalize(void*) { return abi::kNcclSuccess; }
abi::NcclResult NullInit(void** c, uint64_t, int*, const char*, int, int, int,
                         abi::NcclLogger) {
  *c = &g_null_handle;
  return abi::kNcclSuccess;
}
abi::ProfilerV5 g_null_table = {"null",   NullInit,   NullStart,
                                NullStop, NullRecord, NullFinalize};
// Opaque to the optimizer, like the dlsym'd table.
abi::ProfilerV5* volatile g_null = &g_null_table;

void BM_TscClock(benchmark::State& state) {
  // This binary's own copy of the clock (the .so calibrates its own).
  plugin::CpuClock::Calibrate(true);
  for (auto _ : state) benchmark::DoNotOptimize(plugin::CpuClock::NowNs());
  state.counters["tsc"] = plugin::CpuClock::uses_tsc() ? 1 : 0;
}

void BM_ClockGettime(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(plugin::MonotonicNs());
}
BENCHMARK(BM_ClockGettime);

void PairLoop(benchmark::State& state, abi::ProfilerV5* p, void* ctx);

void BM_Pair(benchmark::State& state) {
  Loaded& l = Plugin();
  Baseline();  // both loaded whichever runs first
  PairLoop(state, l.p, l.ctx);
}

void BM_NullPair(benchmark::State& state) {
  Plugin();  // same process state (exporter thread running)
  Baseline();
  PairLoop(state, g_null, &g_null_handle);
}

void BM_BasePair(benchmark::State& state) {
  Plugin();
  Loaded* l = Baseline();
  if (l == nullptr) {
    return state.SkipWithError(
        "PITSTOP_BENCH_BASELINE_PLUGIN not set: no baseline library");
  }
  PairLoop(state, l->p, l->ctx);
}

void PairLoop(benchmark::State& state, abi::ProfilerV5* p, void* ctx) {
  struct {
    abi::ProfilerV5* p;
    void* ctx;
  } l{p, ctx};
  const auto type = static_cast<PairType>(state.range(0));
  abi::DescrV5 d;
  std::memset(&d, 0, sizeof(d));
  // Parents for the child types: one Coll (kept open) and one ProxyOp.
  void* coll = nullptr;
  void* proxy = nullptr;
  d.type = abi::kColl;
  d.coll.func = "AllReduce";
  d.coll.datatype = "ncclFloat32";
  d.coll.algo = "RING";
  d.coll.proto = "SIMPLE";
  d.coll.count = 1024;
  d.coll.n_channels = 2;
  l.p->start_event(l.ctx, &coll, &d);
  abi::DescrV5 pd;
  std::memset(&pd, 0, sizeof(pd));
  pd.type = abi::kProxyOp;
  pd.parent_obj = coll;
  pd.proxy_op.pid = getpid();
  pd.proxy_op.n_steps = 8;
  l.p->start_event(l.ctx, &proxy, &pd);

  abi::DescrV5 e;
  std::memset(&e, 0, sizeof(e));
  switch (type) {
    case kColl:
      e = d;
      break;
    case kKernelCh:
      e.type = abi::kKernelCh;
      e.parent_obj = coll;
      break;
    case kProxyOp:
      e = pd;
      break;
    case kProxyStep:
      e.type = abi::kProxyStep;
      e.parent_obj = proxy;
      break;
  }
  abi::StateArgsV5 args;
  // GPU timers move as on a GPU: a channel runs 0.8 us and one starts every
  // microsecond (a dense stream: a million kernel channels a second).
  uint64_t gpu_ns = 1'700'000'000'000'000'000ull;
  const uint64_t allocs_before = t_allocs;
  for (auto _ : state) {
    void* h = nullptr;
    if (type == kColl) e.coll.seq_number++;
    if (type == kKernelCh) e.kernel_ch.p_timer = gpu_ns;
    l.p->start_event(l.ctx, &h, &e);
    if (type == kKernelCh) {
      args.kernel_ch.p_timer = gpu_ns + 800;
      l.p->record_event_state(h, abi::kKernelChStop, &args);
    }
    gpu_ns += 1000;
    l.p->stop_event(h);
    benchmark::DoNotOptimize(h);
  }
  // Allocations made by this (NCCL-emulating) thread inside the loop.
  state.counters["allocs_per_pair"] =
      benchmark::Counter(static_cast<double>(t_allocs - allocs_before) /
                         static_cast<double>(state.iterations()));
  l.p->stop_event(proxy);
  l.p->stop_event(coll);
}
BENCHMARK(BM_Pair)
    ->ArgName("type")  // 0 Coll, 1 KernelCh, 2 ProxyOp, 3 ProxyStep
    ->DenseRange(0, 3)
    ->Threads(1)
    ->Threads(2)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);
BENCHMARK(BM_NullPair)
    ->ArgName("type")
    ->DenseRange(0, 3)
    ->Threads(1)
    ->Threads(2)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);
BENCHMARK(BM_BasePair)
    ->ArgName("type")
    ->DenseRange(0, 3)
    ->Threads(1)
    ->Threads(2)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);
BENCHMARK(BM_TscClock);

void Fill(plugin::Ring* ring, uint64_t i) {
  plugin::Record* r = ring->Reserve();
  if (r == nullptr) return;
  r->type = plugin::RecordType::kKernelCh;
  // Realistic magnitudes (op ids, GPU globaltimer, CPU monotonic ns) so the
  // varint sizes, hence bytes/record, are honest.
  constexpr uint64_t kGpu = 1'795'000'000'000'000'000ull;
  constexpr uint64_t kCpu = 1'600'000'000'000ull;
  r->kernel = {(uint64_t{1} << 48) | i, static_cast<uint32_t>(i % 32),
               kGpu + i * 1000,         kGpu + i * 1000 + 40'000,
               kCpu + i * 1000,         kCpu + i * 1000 + 45'000};
  ring->Publish();
}

void BM_ExporterThroughput(benchmark::State& state) {
  const std::string sock = "/tmp/pitstop-bench-thr.sock";
  auto receiver = emu::TelemetryReceiver::Start(sock, /*keep_batches=*/false);
  if (!receiver.ok()) return state.SkipWithError("no receiver");
  constexpr uint64_t kRecords = 200000;
  for (auto _ : state) {
    plugin::RingSet rings(2, 1 << 16);
    plugin::CommRegistry registry(plugin::kDefaultEventMask, 0);
    plugin::ExporterOptions o;
    o.socket_path = sock;
    const uint64_t base = (*receiver)->records_received();
    const uint64_t base_bytes = (*receiver)->bytes_received();
    auto exporter = plugin::Exporter::Start(o, &rings, &registry);
    plugin::Ring* ring = rings.ThreadRing();
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t i = 0; i < kRecords;) {
      // Produce as fast as the ring takes it.
      if (ring->published() - (*receiver)->records_received() + base <
          ring->capacity() / 2) {
        for (int k = 0; k < 1024; ++k) Fill(ring, i++);
      } else {
        std::this_thread::yield();
      }
    }
    (*receiver)->WaitFor(
        [&](const auto&) {
          return (*receiver)->records_received() - base >= kRecords;
        },
        absl::Seconds(60));
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    exporter->Stop(plugin::kGoodbyeExit);
    state.SetIterationTime(secs);
    state.counters["records_per_s"] =
        static_cast<double>((*receiver)->records_received() - base) / secs;
    state.counters["bytes_per_record"] =
        static_cast<double>((*receiver)->bytes_received() - base_bytes) /
        static_cast<double>(kRecords);
    state.counters["ring_full"] = static_cast<double>(rings.TotalFullDrops());
  }
}
BENCHMARK(BM_ExporterThroughput)
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);

void BM_EightRanks(benchmark::State& state) {
  const std::string sock = "/tmp/pitstop-bench-8r.sock";
  auto receiver = emu::TelemetryReceiver::Start(sock, /*keep_batches=*/false);
  if (!receiver.ok()) return state.SkipWithError("no receiver");
  constexpr int kRanks = 8;
  constexpr int kPerSecond = 50000;
  constexpr int kSeconds = 2;
  for (auto _ : state) {
    const uint64_t base = (*receiver)->records_received();
    std::vector<std::unique_ptr<plugin::RingSet>> rings;
    std::vector<std::unique_ptr<plugin::CommRegistry>> registries;
    std::vector<std::unique_ptr<plugin::Exporter>> exporters;
    for (int r = 0; r < kRanks; ++r) {
      rings.push_back(std::make_unique<plugin::RingSet>(2, 4096));
      // (500 records per 10 ms tick; the exporter drains every 5 ms.)
      registries.push_back(
          std::make_unique<plugin::CommRegistry>(plugin::kDefaultEventMask, 0));
      plugin::ExporterOptions o;
      o.socket_path = sock;
      o.hello.global_rank = r;
      exporters.push_back(plugin::Exporter::Start(o, rings.back().get(),
                                                  registries.back().get()));
    }
    std::vector<std::thread> producers;
    for (int r = 0; r < kRanks; ++r) {
      producers.emplace_back([&, r] {
        plugin::Ring* ring = rings[r]->ThreadRing();
        // kPerSecond / 100 records every 10 ms.
        auto next = std::chrono::steady_clock::now();
        uint64_t i = 0;
        for (int tick = 0; tick < kSeconds * 100; ++tick) {
          for (int k = 0; k < kPerSecond / 100; ++k) Fill(ring, i++);
          next += std::chrono::milliseconds(10);
          std::this_thread::sleep_until(next);
        }
      });
    }
    for (auto& t : producers) t.join();
    uint64_t drops = 0;
    for (auto& e : exporters) {
      e->Stop(plugin::kGoodbyeExit);
      drops += e->export_dropped();
    }
    for (auto& r : rings) drops += r->TotalFullDrops();
    const uint64_t want = uint64_t{kRanks} * kPerSecond * kSeconds;
    state.counters["records"] =
        static_cast<double>((*receiver)->records_received() - base);
    state.counters["expected"] = static_cast<double>(want);
    state.counters["drops"] = static_cast<double>(drops);
    const auto st = (*receiver)->server()->stats();
    state.counters["messages"] = static_cast<double>(st.messages);
  }
}
BENCHMARK(BM_EightRanks)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pitstop

BENCHMARK_MAIN();
