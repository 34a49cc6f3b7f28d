// libnccl-profiler-counter.so: a second profiler plugin for the chaining
// tests (PITSTOP_CHAIN_PROFILER_PLUGIN=counter). Exports ncclProfiler_v5
// and _v6; counts what it is given and checks that it only ever sees its
// own handles and the event types its mask implies.
//
//   COUNTER_MASK       event bits it asks for (decimal; default Coll |
//                      KernelLaunch = 2050)
//   COUNTER_FAIL_INIT  "1": init fails (ncclInternalError)
//
// The test reads the counts with counter_get_stats (dlsym on the loaded
// library).
#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "plugin/abi/profiler_v5.h"
#include "plugin/abi/profiler_v6.h"

namespace {

namespace abi = pitstop::abi;

struct Event {
  uint32_t type;
  std::atomic<int> stopped;
};
constexpr uint32_t kMaxEvents = 1u << 20;
Event g_events[kMaxEvents];
std::atomic<uint32_t> g_next{0};

struct Stats {
  std::atomic<uint64_t> inits{0}, finalizes{0}, failed_inits{0};
  std::atomic<uint64_t> starts[16]{}, stops[16]{}, states{0};
  std::atomic<uint64_t> unexpected_types{0}, foreign_parents{0},
      foreign_handles{0}, double_stops{0}, coll_with_own_parent{0}, overflow{0};
  uint32_t mask = 0;
} g_stats;

// The types NCCL emits for a mask, restated from the ABI notes (sec. 8,
// 2.28.9 table) independently of pitstop's chain.cc.
bool Emitted(uint32_t mask, uint32_t type) {
  using namespace abi;
  struct Rule {
    uint32_t type, any_of;
  };
  static constexpr Rule kRules[] = {
      {kGroupApi, kGroupApi | kCollApi | kP2pApi | kKernelLaunch | kGroup |
                      kColl | kP2p | kProxyOp | kProxyStep | kKernelCh |
                      kNetPlugin},
      {kCollApi,
       kCollApi | kColl | kProxyOp | kProxyStep | kKernelCh | kNetPlugin},
      {kP2pApi,
       kP2pApi | kP2p | kProxyOp | kProxyStep | kKernelCh | kNetPlugin},
      {kKernelLaunch, kKernelLaunch},
      {kGroup,
       kGroup | kColl | kP2p | kProxyOp | kProxyStep | kKernelCh | kNetPlugin},
      {kColl, kColl | kProxyOp | kProxyStep | kKernelCh | kNetPlugin},
      {kP2p, kP2p | kProxyOp | kProxyStep | kKernelCh | kNetPlugin},
      {kProxyOp, kProxyOp | kProxyStep | kNetPlugin},
      {kProxyStep, kProxyStep | kNetPlugin},
      {kNetPlugin, kNetPlugin},
      {kKernelCh, kKernelCh},
      {kProxyCtrl, kProxyCtrl},
  };
  for (const Rule& r : kRules) {
    if (r.type == type) return (mask & r.any_of) != 0;
  }
  return false;
}

int Bit(uint32_t type) { return type == 0 ? 15 : __builtin_ctz(type) & 15; }

bool Ours(const void* p) {
  return p >= static_cast<const void*>(g_events) &&
         p < static_cast<const void*>(g_events + kMaxEvents);
}

abi::NcclResult Init(void** ctx, uint64_t, int* mask, const char*, int, int,
                     int, abi::NcclLogger) {
  const char* fail = std::getenv("COUNTER_FAIL_INIT");
  if (fail != nullptr && fail[0] == '1') {
    g_stats.failed_inits++;
    *ctx = nullptr;
    return abi::kNcclInternalError;
  }
  const char* m = std::getenv("COUNTER_MASK");
  g_stats.mask = m != nullptr ? static_cast<uint32_t>(std::atoi(m))
                              : (abi::kColl | abi::kKernelLaunch);
  *mask = static_cast<int>(g_stats.mask);
  g_stats.inits++;
  *ctx = &g_stats;
  return abi::kNcclSuccess;
}

abi::NcclResult Start(void* ctx, void** handle, abi::DescrV5* d) {
  *handle = nullptr;
  if (ctx != &g_stats) return abi::kNcclSuccess;
  const auto type = static_cast<uint32_t>(d->type);
  if (!Emitted(g_stats.mask, type)) {
    g_stats.unexpected_types++;
  }
  if (d->parent_obj != nullptr && !Ours(d->parent_obj)) {
    g_stats.foreign_parents++;
  }
  if (type == abi::kColl && d->parent_obj != nullptr && Ours(d->parent_obj)) {
    g_stats.coll_with_own_parent++;
  }
  const uint32_t i = g_next.fetch_add(1);
  if (i >= kMaxEvents) {
    g_stats.overflow++;
    return abi::kNcclSuccess;
  }
  g_events[i].type = type;
  g_events[i].stopped = 0;
  g_stats.starts[Bit(type)]++;
  *handle = &g_events[i];
  return abi::kNcclSuccess;
}

abi::NcclResult Stop(void* handle) {
  if (!Ours(handle)) {
    g_stats.foreign_handles++;
    return abi::kNcclSuccess;
  }
  auto* e = static_cast<Event*>(handle);
  if (e->stopped.exchange(1) != 0) g_stats.double_stops++;
  g_stats.stops[Bit(e->type)]++;
  return abi::kNcclSuccess;
}

abi::NcclResult Record(void* handle, int, abi::StateArgsV5*) {
  if (!Ours(handle)) {
    g_stats.foreign_handles++;
    return abi::kNcclSuccess;
  }
  g_stats.states++;
  return abi::kNcclSuccess;
}

abi::NcclResult Finalize(void* ctx) {
  if (ctx == &g_stats) g_stats.finalizes++;
  return abi::kNcclSuccess;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) abi::ProfilerV5 ncclProfiler_v5 = {
    "counter", Init, Start, Stop, Record, Finalize};

__attribute__((visibility("default"))) abi::ProfilerV6 ncclProfiler_v6 = {
    "counter",
    Init,
    reinterpret_cast<decltype(abi::ProfilerV6::start_event)>(Start),
    Stop,
    Record,
    Finalize};

// [0..15] starts per type bit, [16..31] stops, then inits, finalizes,
// failed_inits, states, unexpected_types, foreign_parents, foreign_handles,
// double_stops, coll_with_own_parent, overflow.
__attribute__((visibility("default"))) void counter_get_stats(uint64_t* out) {
  for (int i = 0; i < 16; ++i) {
    out[i] = g_stats.starts[i];
    out[16 + i] = g_stats.stops[i];
  }
  uint64_t* o = out + 32;
  o[0] = g_stats.inits;
  o[1] = g_stats.finalizes;
  o[2] = g_stats.failed_inits;
  o[3] = g_stats.states;
  o[4] = g_stats.unexpected_types;
  o[5] = g_stats.foreign_parents;
  o[6] = g_stats.foreign_handles;
  o[7] = g_stats.double_stops;
  o[8] = g_stats.coll_with_own_parent;
  o[9] = g_stats.overflow;
}

}  // extern "C"
