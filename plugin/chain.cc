#include "plugin/chain.h"

#include <dlfcn.h>

#include <new>

#include "plugin/abi/profiler_v3.h"
#include "plugin/abi/profiler_v4.h"
#include "plugin/abi/profiler_v5.h"
#include "plugin/abi/profiler_v6.h"

namespace pitstop::plugin {
namespace {

// All profiler tables: a name, then five function pointers (ABI §7).
struct AnyTable {
  const char* name;
  void* init;
  void* start;
  void* stop;
  void* record;
  void* finalize;
};
static_assert(sizeof(AnyTable) == sizeof(abi::ProfilerV5));

bool LooksLikeLibrary(const std::string& v) {
  return v.size() > 6 && v.compare(0, 3, "lib") == 0 &&
         v.compare(v.size() - 3, 3, ".so") == 0;
}

}  // namespace

std::vector<std::string> ChainCandidates(const std::string& value) {
  std::vector<std::string> out;
  if (value.empty()) return out;
  out.push_back(value);
  if (value.find('/') == std::string::npos && !LooksLikeLibrary(value)) {
    out.push_back("libnccl-profiler-" + value + ".so");
  }
  return out;
}

uint32_t EmittedTypes(uint32_t m) {
  using namespace abi;
  constexpr uint32_t kCe = 0x1000 | 0x2000 | 0x4000;
  uint32_t e = m;
  const uint32_t net_chain = kProxyStep | kNetPlugin;
  if (m & net_chain) e |= kProxyStep;
  if (m & (kProxyOp | net_chain)) e |= kProxyOp;
  const uint32_t below_coll = kProxyOp | net_chain | kKernelCh;
  if (m & (kColl | below_coll)) e |= kColl;
  if (m & (kP2p | below_coll)) e |= kP2p;
  if (m & (kGroup | kColl | kP2p | below_coll)) e |= kGroup;
  if (m & (kCollApi | kColl | below_coll | kCe)) e |= kCollApi;
  if (m & (kP2pApi | kP2p | below_coll)) e |= kP2pApi;
  if (m & (kGroupApi | kCollApi | kP2pApi | kKernelLaunch | kGroup | kColl |
           kP2p | below_coll | kCe)) {
    e |= kGroupApi;
  }
  if (m & kCe) e |= 0x1000;  // CeColl is the parent of CeSync / CeBatch
  return e;
}

void Chain::Load(const std::string& value, int version,
                 void (*log)(const std::string&)) {
  if (active_.load() != nullptr || value.empty()) return;
  std::string tried;
  for (const std::string& name : ChainCandidates(value)) {
    void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* err = dlerror();
      tried += (tried.empty() ? "" : "; ") + std::string(err ? err : name);
      continue;
    }
    int their = version;
    void* sym =
        dlsym(lib, ("ncclProfiler_v" + std::to_string(version)).c_str());
    if (sym == nullptr && version == 6) {
      their = 5;  // same layout for every v5 event
      sym = dlsym(lib, "ncclProfiler_v5");
    }
    // Never chain ourselves (the value names pitstop's own library).
    Dl_info ours{}, theirs{};
    if (sym != nullptr &&
        dladdr(reinterpret_cast<void*>(&ChainCandidates), &ours) != 0 &&
        dladdr(sym, &theirs) != 0 && ours.dli_fbase == theirs.dli_fbase) {
      log("PITSTOP_CHAIN_PROFILER_PLUGIN=" + value +
          " is pitstop itself; not chained");
      dlclose(lib);
      return;
    }
    if (sym == nullptr) {
      log("PITSTOP_CHAIN_PROFILER_PLUGIN=" + value + ": " + name +
          " has no ncclProfiler_v" + std::to_string(version) +
          (version == 6 ? " or _v5" : "") +
          " (the version NCCL uses with pitstop); not chained");
      dlclose(lib);
      return;
    }
    Chain* c = new (std::nothrow) Chain();
    if (c == nullptr) return;
    const auto* t = static_cast<const AnyTable*>(sym);
    c->version_ = version;
    c->their_version_ = their;
    c->name_ = name;
    c->lib_ = lib;
    c->log_ = log;
    c->init_ = t->init;
    c->start_ = reinterpret_cast<decltype(c->start_)>(t->start);
    c->stop_ = reinterpret_cast<decltype(c->stop_)>(t->stop);
    c->record_ = reinterpret_cast<decltype(c->record_)>(t->record);
    c->finalize_ = reinterpret_cast<decltype(c->finalize_)>(t->finalize);
    if (c->init_ == nullptr || c->start_ == nullptr || c->stop_ == nullptr ||
        c->record_ == nullptr || c->finalize_ == nullptr) {
      log("PITSTOP_CHAIN_PROFILER_PLUGIN=" + value + ": " + name +
          " has a NULL entry in its profiler table; not chained");
      delete c;
      dlclose(lib);
      return;
    }
    log("chaining profiler plugin " + name + " (v" + std::to_string(their) +
        ")");
    active_.store(c, std::memory_order_release);
    return;  // the library stays loaded for the process lifetime
  }
  log("PITSTOP_CHAIN_PROFILER_PLUGIN=" + value + ": cannot load (" + tried +
      "); not chained");
}

void Chain::Drop(const std::string& why) noexcept {
  if (dropped_.exchange(true)) return;
  mask_.store(0);
  emitted_.store(0);
  try {
    if (log_ != nullptr)
      log_("chained profiler " + name_ + " " + why + "; dropped it");
  } catch (...) {
  }
}

void Chain::RefreshMask() noexcept {
  if (dropped_.load()) return;
  uint32_t m = static_cast<uint32_t>(
      __atomic_load_n(&their_mask_int_, __ATOMIC_RELAXED));
  if (their_version_ < 6) m &= 0xfff;  // no CE events for v5 and older
  if (their_version_ < 5) m &= 0xff;
  mask_.store(m, std::memory_order_relaxed);
  emitted_.store(EmittedTypes(m), std::memory_order_relaxed);
}

void Chain::Init(void** chain_ctx, uint64_t comm_id, const char* name,
                 int n_nodes, int n_ranks, int rank, abi::NcclLogger logfn,
                 uint32_t* chained_mask) noexcept {
  *chain_ctx = nullptr;
  if (dropped_.load()) return;
  abi::NcclResult rc;
  switch (their_version_) {
    case 3:
      rc = reinterpret_cast<decltype(abi::ProfilerV3::init)>(init_)(
          chain_ctx, &their_mask_int_);
      break;
    case 4:
      rc = reinterpret_cast<decltype(abi::ProfilerV4::init)>(init_)(
          chain_ctx, &their_mask_int_, name, comm_id, n_nodes, n_ranks, rank,
          logfn);
      break;
    default:
      rc = reinterpret_cast<decltype(abi::ProfilerV5::init)>(init_)(
          chain_ctx, comm_id, &their_mask_int_, name, n_nodes, n_ranks, rank,
          logfn);
  }
  if (rc != abi::kNcclSuccess) {
    *chain_ctx = nullptr;
    Drop("failed init (ncclResult " + std::to_string(rc) + ")");
  }
  RefreshMask();
  *chained_mask = mask();
}

void Chain::Finalize(void* chain_ctx) noexcept {
  if (chain_ctx != nullptr) finalize_(chain_ctx);
}

void* Chain::Start(void* chain_ctx, const void* descr, size_t descr_size,
                   void* their_parent) noexcept {
  // A copy with the chained plugin's own parent handle; every version's
  // descriptor has parentObj at offset 8.
  alignas(16) unsigned char copy[128];
  if (descr_size > sizeof(copy)) return nullptr;
  __builtin_memcpy(copy, descr, descr_size);
  __builtin_memcpy(copy + 8, &their_parent, sizeof(void*));
  void* h = nullptr;
  start_(chain_ctx, &h, copy);
  return h;
}

void Chain::Stop(void* their_handle) noexcept { stop_(their_handle); }

void Chain::Record(void* their_handle, int state, void* args) noexcept {
  record_(their_handle, state, args);
}

PairSlot* Chain::NewPair(void* ours, void* theirs) noexcept {
  PairSlot* p = pairs_.Acquire();
  if (p == nullptr) return nullptr;
  p->ours = ours;
  p->theirs = theirs;
  return p;
}

}  // namespace pitstop::plugin
