// The exported profiler tables ncclProfiler_v3..v6: decode each version's
// descriptor and call the version-independent Recorder. Only these symbols
// and the interposer's nccl* functions leave the library (pitstop_plugin.map).
#include <cstdint>

#include "plugin/abi/profiler_common.h"
#include "plugin/abi/profiler_v3.h"
#include "plugin/abi/profiler_v4.h"
#include "plugin/abi/profiler_v5.h"
#include "plugin/abi/profiler_v6.h"
#include "plugin/chain.h"
#include "plugin/recorder.h"
#include "plugin/runtime.h"
#include "plugin/stats.h"

namespace pitstop::plugin {
namespace {

using abi::NcclResult;

inline CommContext* Ctx(void* context) {
  return static_cast<CommContext*>(context);
}

inline Recorder* Rec() noexcept {
  Runtime* rt = Runtime::Get();
  return rt != nullptr ? rt->recorder() : nullptr;
}

// ProxyOp, ProxyStep and NetPlugin have the same members in every version.
// Returns true if `d` was one of them (and *handle is set).
template <typename Descr>
bool StartProxyEvent(Recorder* rec, CommContext* ctx, void** handle,
                     const Descr* d, uint32_t type) noexcept {
  switch (type) {
    case abi::kProxyOp: {
      ProxyOpStart a;
      a.pid = d->proxy_op.pid;
      a.channel = d->proxy_op.channel_id;
      a.peer = d->proxy_op.peer;
      a.n_steps = d->proxy_op.n_steps;
      a.chunk_size = d->proxy_op.chunk_size;
      a.is_send = d->proxy_op.is_send != 0;
      *handle = rec->StartProxyOp(ctx, d->parent_obj, a);
      return true;
    }
    case abi::kProxyStep:
      *handle = rec->StartProxyStep(ctx, d->parent_obj, d->proxy_step.step);
      return true;
    case abi::kNetPlugin:
      *handle = rec->StartNetPlugin(ctx, d->parent_obj, d->net_plugin.id,
                                    d->net_plugin.data);
      return true;
    default:
      return false;
  }
}

// v4, v5 and v6 share the coll/p2p/proxy/kernel/net layouts except for the
// fields v5 added; one template decodes them.
template <typename Descr, bool kHasApi>
NcclResult StartEventV4Plus(void* context, void** handle, Descr* d) noexcept {
  if (handle == nullptr) return abi::kNcclSuccess;
  *handle = nullptr;
  Recorder* rec = Rec();
  if (rec == nullptr || d == nullptr) return abi::kNcclSuccess;
  CommContext* ctx = Ctx(context);
  const auto type = static_cast<uint32_t>(d->type);
  if (StartProxyEvent(rec, ctx, handle, d, type)) return abi::kNcclSuccess;
  switch (type) {
    case abi::kColl: {
      OpStart a;
      a.rank = d->rank;
      a.seq_number = d->coll.seq_number;
      a.func = d->coll.func;
      a.count = d->coll.count;
      a.root = d->coll.root;
      a.datatype = d->coll.datatype;
      a.n_channels = d->coll.n_channels;
      a.n_warps = d->coll.n_warps;
      a.algo = d->coll.algo;
      a.proto = d->coll.proto;
      *handle = rec->StartOp(ctx, d->parent_obj, a);
      break;
    }
    case abi::kP2p: {
      OpStart a;
      a.p2p = true;
      a.rank = d->rank;
      a.func = d->p2p.func;
      a.count = d->p2p.count;
      a.datatype = d->p2p.datatype;
      a.peer = d->p2p.peer;
      a.n_channels = d->p2p.n_channels;
      *handle = rec->StartOp(ctx, d->parent_obj, a);
      break;
    }
    case abi::kKernelCh:
      *handle = rec->StartKernelCh(ctx, d->parent_obj, d->kernel_ch.channel_id,
                                   d->kernel_ch.p_timer);
      break;
    case abi::kCollApi:
      if constexpr (kHasApi) {
        *handle = rec->StartApi(ctx, false, d->coll_api.graph_captured);
      }
      break;
    case abi::kP2pApi:
      if constexpr (kHasApi) {
        *handle = rec->StartApi(ctx, true, d->p2p_api.graph_captured);
      }
      break;
    default:
      // Group, GroupApi, KernelLaunch, ProxyCtrl, CE events: not recorded;
      // a NULL handle tells NCCL to skip their stop/record calls.
      break;
  }
  return abi::kNcclSuccess;
}

NcclResult StartEventV3(void* context, void** handle,
                        abi::DescrV3* d) noexcept {
  if (handle == nullptr) return abi::kNcclSuccess;
  *handle = nullptr;
  Recorder* rec = Rec();
  if (rec == nullptr || d == nullptr) return abi::kNcclSuccess;
  CommContext* ctx = Ctx(context);
  if (StartProxyEvent(rec, ctx, handle, d, d->type)) return abi::kNcclSuccess;
  switch (d->type) {
    case abi::kColl: {
      OpStart a;
      a.comm_hash = d->coll.comm_hash;
      a.rank = d->rank;
      a.seq_number = d->coll.seq_number;
      a.func = d->coll.func;
      a.count = d->coll.count;
      a.root = d->coll.root;
      a.datatype = d->coll.datatype;
      a.n_channels = d->coll.n_max_channels;
      a.n_warps = d->coll.n_warps;
      a.algo = d->coll.algo;
      a.proto = d->coll.proto;
      *handle = rec->StartOp(ctx, d->parent_obj, a);
      break;
    }
    case abi::kP2p: {
      OpStart a;
      a.p2p = true;
      a.comm_hash = d->p2p.comm_hash;
      a.rank = d->rank;
      a.func = d->p2p.func;
      a.count = d->p2p.count;
      a.datatype = d->p2p.datatype;
      a.peer = d->p2p.peer;
      *handle = rec->StartOp(ctx, d->parent_obj, a);
      break;
    }
    case abi::kKernelCh:
      *handle =
          rec->StartKernelCh(ctx, d->parent_obj, d->kernel_ch.channel_id, 0);
      break;
    default:
      break;
  }
  return abi::kNcclSuccess;
}

NcclResult StopEvent(void* handle) noexcept {
  if (Recorder* rec = Rec()) rec->Stop(handle);
  return abi::kNcclSuccess;
}

NcclResult RecordStateV3(void* handle, int state,
                         abi::StateArgsV3* args) noexcept {
  if (Recorder* rec = Rec()) {
    rec->RecordState(handle, state,
                     args != nullptr ? args->proxy_op.trans_size : 0);
  }
  return abi::kNcclSuccess;
}

NcclResult RecordStateV4(void* handle, int state,
                         abi::StateArgsV4* args) noexcept {
  if (Recorder* rec = Rec()) {
    // proxyStep.transSize and kernelCh.pTimer share the first 8 bytes.
    rec->RecordState(handle, state,
                     args != nullptr ? args->kernel_ch.p_timer : 0);
  }
  return abi::kNcclSuccess;
}

NcclResult Finalize(void* context) noexcept {
  stats::CountFinalize();
  Runtime* rt = Runtime::Get();
  return rt != nullptr ? rt->FinalizeComm(context) : abi::kNcclSuccess;
}

// Init when the runtime could not be created: no context, NCCL goes on.
NcclResult NoRuntime(void** context) noexcept {
  if (context != nullptr) *context = nullptr;
  return abi::kNcclSystemError;
}

NcclResult InitV3(void** context, int* mask) noexcept {
  Runtime* rt = Runtime::GetOrCreate();
  const NcclResult r = rt == nullptr ? NoRuntime(context)
                                     : rt->InitComm(context, 3, 0, mask,
                                                    nullptr, 0, 0, 0, nullptr);
  stats::CountInit(3, r);
  return r;
}

NcclResult InitV4(void** context, int* mask, const char* name, uint64_t hash,
                  int n_nodes, int n_ranks, int rank,
                  abi::NcclLogger logfn) noexcept {
  Runtime* rt = Runtime::GetOrCreate();
  const NcclResult r = rt == nullptr
                           ? NoRuntime(context)
                           : rt->InitComm(context, 4, hash, mask, name, n_nodes,
                                          n_ranks, rank, logfn);
  stats::CountInit(4, r);
  return r;
}

template <int kVersion>
NcclResult InitV5Plus(void** context, uint64_t comm_id, int* mask,
                      const char* name, int n_nodes, int n_ranks, int rank,
                      abi::NcclLogger logfn) noexcept {
  Runtime* rt = Runtime::GetOrCreate();
  const NcclResult r = rt == nullptr
                           ? NoRuntime(context)
                           : rt->InitComm(context, kVersion, comm_id, mask,
                                          name, n_nodes, n_ranks, rank, logfn);
  stats::CountInit(kVersion, r);
  return r;
}

// With a chained plugin (chain.h) every handle NCCL holds is a PairSlot of
// both plugins' handles; these wrap the functions above. Without one they
// cost one load and a branch.
template <typename Descr, NcclResult (*kOurs)(void*, void**, Descr*)>
NcclResult StartChained(void* context, void** handle, Descr* d) noexcept {
  if (d != nullptr) stats::CountEventStart(static_cast<uint64_t>(d->type));
  Chain* chain = Chain::Get();
  if (chain == nullptr) return kOurs(context, handle, d);
  if (handle == nullptr) return abi::kNcclSuccess;
  *handle = nullptr;
  if (d == nullptr) return abi::kNcclSuccess;
  PairSlot* parent = chain->AsPair(d->parent_obj);
  Descr mine = *d;
  mine.parent_obj = parent != nullptr ? parent->ours : nullptr;
  void* ours = nullptr;
  kOurs(context, &ours, &mine);
  void* theirs = nullptr;
  CommContext* ctx = Ctx(context);
  if (ctx != nullptr && ctx->chain_ctx != nullptr &&
      chain->Wants(static_cast<uint32_t>(d->type))) {
    theirs = chain->Start(ctx->chain_ctx, d, sizeof(Descr),
                          parent != nullptr ? parent->theirs : nullptr);
  }
  if (ours == nullptr && theirs == nullptr) return abi::kNcclSuccess;
  PairSlot* p = chain->NewPair(ours, theirs);
  if (p == nullptr) {
    // No pair to track them by: end both events now (counted as ignored).
    if (Recorder* rec = Rec()) {
      if (ours != nullptr) rec->Stop(ours);
      rec->CountIgnored();
    }
    if (theirs != nullptr) chain->Stop(theirs);
    return abi::kNcclSuccess;
  }
  *handle = p;
  return abi::kNcclSuccess;
}

NcclResult StopChained(void* handle) noexcept {
  stats::CountStop();
  Chain* chain = Chain::Get();
  if (chain == nullptr) return StopEvent(handle);
  PairSlot* p = chain->AsPair(handle);
  if (p == nullptr) {
    if (Recorder* rec = Rec()) rec->CountIgnored();
    return abi::kNcclSuccess;
  }
  void* const ours = p->ours;
  void* const theirs = p->theirs;
  // One stop per pair; the slot stays readable for late children (the
  // pool reuses round-robin).
  uint32_t w = 1;
  if (!p->header.word.compare_exchange_strong(w, 0)) {
    if (Recorder* rec = Rec()) rec->CountIgnored();
    return abi::kNcclSuccess;
  }
  if (ours != nullptr) StopEvent(ours);
  if (theirs != nullptr) chain->Stop(theirs);
  return abi::kNcclSuccess;
}

template <typename Args, NcclResult (*kOurs)(void*, int, Args*)>
NcclResult RecordChained(void* handle, int state, Args* args) noexcept {
  stats::CountState();
  Chain* chain = Chain::Get();
  if (chain == nullptr) return kOurs(handle, state, args);
  PairSlot* p = chain->AsPair(handle);
  if (p == nullptr) return abi::kNcclSuccess;
  if (p->ours != nullptr) kOurs(p->ours, state, args);
  if (p->theirs != nullptr) chain->Record(p->theirs, state, args);
  return abi::kNcclSuccess;
}

}  // namespace
}  // namespace pitstop::plugin

namespace pp = pitstop::plugin;
namespace pa = pitstop::abi;

extern "C" {

__attribute__((visibility("default"))) pa::ProfilerV6 ncclProfiler_v6 = {
    "pitstop",
    pp::InitV5Plus<6>,
    pp::StartChained<pa::DescrV6, pp::StartEventV4Plus<pa::DescrV6, true>>,
    pp::StopChained,
    pp::RecordChained<pa::StateArgsV4, pp::RecordStateV4>,
    pp::Finalize};

__attribute__((visibility("default"))) pa::ProfilerV5 ncclProfiler_v5 = {
    "pitstop",
    pp::InitV5Plus<5>,
    pp::StartChained<pa::DescrV5, pp::StartEventV4Plus<pa::DescrV5, true>>,
    pp::StopChained,
    pp::RecordChained<pa::StateArgsV4, pp::RecordStateV4>,
    pp::Finalize};

__attribute__((visibility("default"))) pa::ProfilerV4 ncclProfiler_v4 = {
    "pitstop",
    pp::InitV4,
    pp::StartChained<pa::DescrV4, pp::StartEventV4Plus<pa::DescrV4, false>>,
    pp::StopChained,
    pp::RecordChained<pa::StateArgsV4, pp::RecordStateV4>,
    pp::Finalize};

__attribute__((visibility("default"))) pa::ProfilerV3 ncclProfiler_v3 = {
    "pitstop",
    pp::InitV3,
    pp::StartChained<pa::DescrV3, pp::StartEventV3>,
    pp::StopChained,
    pp::RecordChained<pa::StateArgsV3, pp::RecordStateV3>,
    pp::Finalize};

}  // extern "C"
