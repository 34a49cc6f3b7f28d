#include "plugin/stats.h"

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "plugin/packer.h"
#include "plugin/plugin_sync.h"
#include "plugin/runtime.h"

namespace pitstop::plugin::stats {

std::atomic<bool> g_enabled{false};

namespace {

// Threads that may count on their own slot; later ones share the last.
constexpr int kSlots = 256;
ThreadCounters g_slots[kSlots];
std::atomic<int> g_claimed{0};
// initial-exec TLS: no allocation on first use even when dlopened.
__attribute__((tls_model(
    "initial-exec"))) thread_local ThreadCounters* t_counters = nullptr;

// Cold counters (init/finalize paths: fetch_add is fine).
std::atomic<uint64_t> g_inits[7];  // by ABI version 0..6
std::atomic<uint64_t> g_init_failed{0};
std::atomic<uint64_t> g_finalizes{0};
// Exporter thread only (one exporter at a time): load + store.
std::atomic<uint64_t> g_records[8];  // by RecordType
std::atomic<uint64_t> g_ops[16];     // by MapFunc value (common.proto)

// PITSTOP_STATS_FILE, copied at load (a fixed buffer: nothing to destroy
// before the exit handler runs).
char g_path[4096];
Mutex g_write_mu;

constexpr const char* kEventNames[kEventTypes] = {
    "group",      "coll",       "p2p",       "proxy_op",
    "proxy_step", "proxy_ctrl", "kernel_ch", "net_plugin",
    "group_api",  "coll_api",   "p2p_api",   "kernel_launch",
    "ce_coll",    "ce_sync",    "ce_batch",  "other"};

// RecordType values 1..6.
constexpr const char* kRecordNames[] = {"op",       "completion", "kernel_ch",
                                        "proxy_op", "proxy_step", "net_plugin"};

// common.proto CollFunc values (packer.cc kFuncs), 13 = other.
constexpr const char* kFuncNames[] = {
    "unspecified", "AllReduce", "AllGather", "ReduceScatter", "Broadcast",
    "Reduce",      "AlltoAll",  "Gather",    "Scatter",       "Send",
    "Recv",        "SendRecv",  "",          "other"};

constexpr const char* kInterposedNames[] = {
#define PITSTOP_STATS_NAME(name) #name,
    PITSTOP_INTERPOSED_FUNCTIONS(PITSTOP_STATS_NAME)
#undef PITSTOP_STATS_NAME
};
static_assert(sizeof(kInterposedNames) / sizeof(kInterposedNames[0]) ==
              kInterposedCount);

void Inc(std::atomic<uint64_t>* a) {
  a->store(a->load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

struct Sums {
  uint64_t started[kEventTypes] = {};
  uint64_t stops = 0;
  uint64_t states = 0;
  uint64_t interposed[kInterposedCount] = {};
};

Sums Sum() {
  Sums s;
  const int n = std::min(g_claimed.load(std::memory_order_acquire), kSlots);
  for (int i = 0; i < n; ++i) {
    const ThreadCounters& c = g_slots[i];
    for (int t = 0; t < kEventTypes; ++t) {
      s.started[t] += c.started[t].load(std::memory_order_relaxed);
    }
    s.stops += c.stops.load(std::memory_order_relaxed);
    s.states += c.states.load(std::memory_order_relaxed);
    for (int f = 0; f < kInterposedCount; ++f) {
      s.interposed[f] += c.interposed[f].load(std::memory_order_relaxed);
    }
  }
  return s;
}

uint64_t Total(const uint64_t* v, int n) {
  uint64_t t = 0;
  for (int i = 0; i < n; ++i) t += v[i];
  return t;
}

uint64_t Load(const std::atomic<uint64_t>& a) {
  return a.load(std::memory_order_relaxed);
}

// A forked child counts from zero: what the parent saw is the parent's.
void ResetInChild() {
  for (auto& c : g_slots) {
    for (auto& a : c.started) a.store(0);
    c.stops.store(0);
    c.states.store(0);
    for (auto& a : c.interposed) a.store(0);
  }
  for (auto& a : g_inits) a.store(0);
  g_init_failed.store(0);
  g_finalizes.store(0);
  for (auto& a : g_records) a.store(0);
  for (auto& a : g_ops) a.store(0);
}

void WriteAtExit() { WriteStatsFile(); }

// Reads PITSTOP_STATS_FILE when the library is loaded (by LD_PRELOAD or by
// NCCL's dlopen, before any communicator exists).
__attribute__((constructor)) void OnLoad() {
  const char* v = std::getenv("PITSTOP_STATS_FILE");
  if (v == nullptr || *v == '\0') return;
  if (std::strlen(v) >= sizeof(g_path) - 32) {
    std::fprintf(stderr, "pitstop: PITSTOP_STATS_FILE is too long; ignored\n");
    return;
  }
  std::strcpy(g_path, v);
  pthread_atfork(nullptr, nullptr, ResetInChild);
  // Registered before the runtime's exit handler (at the first init), so
  // it runs after it: the exporter has drained the rings by then.
  std::atexit(WriteAtExit);
  g_enabled.store(true);
}

// A minimal JSON object writer (keys are ours; strings escaped).
class Json {
 public:
  void Num(const char* k, uint64_t v) {
    Key(k);
    Value(std::to_string(v));
  }
  void Str(const char* k, const std::string& v) {
    Key(k);
    std::string q = "\"";
    for (char ch : v) {
      if (ch == '"' || ch == '\\') q += '\\';
      if (static_cast<unsigned char>(ch) >= 0x20) q += ch;
    }
    Value(q + "\"");
  }
  void Bool(const char* k, bool v) {
    Key(k);
    Value(v ? "true" : "false");
  }
  // An object: the top level (k null) or the value of key k.
  void Open(const char* k) {
    if (k != nullptr) {
      Key(k);
    } else if (need_comma_) {
      out_ += ", ";
    }
    out_ += '{';
    need_comma_ = false;
  }
  void Close() {
    out_ += '}';
    need_comma_ = true;
  }
  std::string Take() { return std::move(out_); }

 private:
  void Key(const char* k) {
    if (need_comma_) out_ += ", ";
    out_ += '"';
    out_ += k;
    out_ += "\": ";
    need_comma_ = false;
  }
  void Value(const std::string& v) {
    out_ += v;
    need_comma_ = true;
  }
  std::string out_;
  bool need_comma_ = false;
};

std::string LibraryPath() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&WriteAtExit), &info) != 0 &&
      info.dli_fname != nullptr) {
    return info.dli_fname;
  }
  return "";
}

uint32_t NcclVersion() {
  using GetVersionFn = int (*)(int*);
  auto fn =
      reinterpret_cast<GetVersionFn>(dlsym(RTLD_DEFAULT, "pncclGetVersion"));
  int v = 0;
  if (fn != nullptr && fn(&v) == 0 && v > 0) return static_cast<uint32_t>(v);
  return 0;
}

}  // namespace

ThreadCounters* Local() noexcept {
  if (t_counters != nullptr) [[likely]] {
    return t_counters;
  }
  const int i = g_claimed.fetch_add(1, std::memory_order_acq_rel);
  ThreadCounters* c = &g_slots[std::min(i, kSlots - 1)];
  if (i >= kSlots - 1) c->shared.store(true, std::memory_order_relaxed);
  t_counters = c;
  return c;
}

void CountInit(int version, int result) noexcept {
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  g_inits[version >= 0 && version <= 6 ? version : 0].fetch_add(1);
  if (result != 0) g_init_failed.fetch_add(1);
}

void CountFinalize() noexcept {
  if (g_enabled.load(std::memory_order_relaxed)) g_finalizes.fetch_add(1);
}

void CountRecord(const Record& r) noexcept {
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  const int t = static_cast<int>(r.type);
  if (t > 0 && t < 8) Inc(&g_records[t]);
  if (r.type == RecordType::kOp) {
    const int f = MapFunc(r.op.func);
    Inc(&g_ops[f >= 0 && f < 16 ? f : 13]);
  }
}

std::string ResolvedPath() {
  std::string out;
  for (const char* p = g_path; *p != '\0'; ++p) {
    if (p[0] == '%' && p[1] == 'p') {
      out += std::to_string(getpid());
      ++p;
    } else {
      out += *p;
    }
  }
  return out;
}

std::string RenderJson() {
  const Sums s = Sum();
  Runtime* rt = Runtime::Get();
  const RuntimeCounters rc = rt != nullptr ? rt->Counters() : RuntimeCounters{};
  const bool preloaded = Runtime::Preloaded();
  Json j;
  j.Open(nullptr);
  j.Str("format", "pitstop-stats/1");
  j.Num("pid", static_cast<uint64_t>(getpid()));
  j.Str("library", LibraryPath());
  j.Str("load_mode", preloaded ? "both" : "profiler");
  j.Bool("preloaded", preloaded);
  j.Num("nccl_version", NcclVersion());
  j.Open("profiler");
  uint64_t inits = 0;
  for (const auto& a : g_inits) inits += Load(a);
  j.Num("init_calls", inits);
  j.Num("init_failed", Load(g_init_failed));
  j.Num("finalize_calls", Load(g_finalizes));
  j.Num("abi_version", static_cast<uint64_t>(rc.abi_version));
  j.Open("init_calls_by_version");
  for (int v = 3; v <= 6; ++v) {
    j.Num(("v" + std::to_string(v)).c_str(), Load(g_inits[v]));
  }
  j.Close();
  j.Num("event_mask", rc.event_mask);
  j.Close();
  j.Open("events_started");
  for (int t = 0; t < kEventTypes; ++t) j.Num(kEventNames[t], s.started[t]);
  j.Close();
  j.Num("events_started_total", Total(s.started, kEventTypes));
  j.Num("stop_calls", s.stops);
  j.Num("state_calls", s.states);
  j.Open("records");
  for (int t = 1; t <= 6; ++t) j.Num(kRecordNames[t - 1], Load(g_records[t]));
  j.Close();
  j.Open("ops_per_function");
  for (int f = 0; f < 14; ++f) {
    if (kFuncNames[f][0] != '\0') j.Num(kFuncNames[f], Load(g_ops[f]));
  }
  j.Close();
  j.Open("drops");
  j.Num("ring_full", rc.ring_full);
  j.Num("pool_exhausted", rc.pool_exhausted);
  j.Num("ignored", rc.ignored);
  j.Num("export_dropped", rc.export_dropped);
  j.Close();
  j.Num("records_recorded", rc.events_recorded);
  j.Num("records_sent", rc.records_sent);
  j.Open("interposer");
  j.Num("calls_total", Total(s.interposed, kInterposedCount));
  j.Open("calls");
  for (int f = 0; f < kInterposedCount; ++f) {
    j.Num(kInterposedNames[f] + 1, s.interposed[f]);  // pncclX -> ncclX
  }
  j.Close();
  j.Close();
  j.Close();
  return j.Take() + "\n";
}

bool WriteStatsFile() noexcept {
  if (!g_enabled.load()) return true;
  try {
    MutexLock lock(&g_write_mu);
    uint64_t inits = 0;
    for (const auto& a : g_inits) inits += Load(a);
    if (inits == 0 && Total(Sum().interposed, kInterposedCount) == 0) {
      return true;  // saw nothing: leave the file to a process that did
    }
    const std::string path = ResolvedPath();
    const std::string tmp = path + ".tmp." + std::to_string(getpid());
    const std::string json = RenderJson();
    FILE* f = std::fopen(tmp.c_str(), "w");
    bool ok = f != nullptr;
    if (ok) {
      ok = std::fwrite(json.data(), 1, json.size(), f) == json.size();
      ok = std::fclose(f) == 0 && ok;
    }
    if (ok) ok = std::rename(tmp.c_str(), path.c_str()) == 0;
    if (!ok) {
      std::fprintf(stderr, "pitstop: cannot write PITSTOP_STATS_FILE %s: %s\n",
                   path.c_str(), std::strerror(errno));
      std::remove(tmp.c_str());
    }
    return ok;
  } catch (...) {
    return false;
  }
}

}  // namespace pitstop::plugin::stats
