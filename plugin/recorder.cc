#include "plugin/recorder.h"

#include <cstring>
#include <initializer_list>

#include "plugin/abi/profiler_common.h"

namespace pitstop::plugin {

// Slot layouts. `header.word` meanings:
//   ApiSlot: 0 free, 1 in flight, kPinned a stopped graph-captured API call
//     (kept so replays can still read it).
//   OpSlot: bit kStopped set once Coll/P2p stopped; bits 0-15 (kRefMask)
//     count the event itself (1 until stopped) plus live children; bits
//     16-29 (kChildMask) count every child that ever attached (saturating),
//     so attaching a child is one locked add. kStopped alone = done and
//     reclaimable. kStopping is set while a completion reads the slot.
//   others: 0 free, 1 in flight, kBeingStopped while the one accepted Stop
//     writes its record.
// A Stop is accepted only by a CAS from the in-flight state, so a second
// (or stale) Stop of the same handle is ignored and counted.
namespace {
constexpr uint32_t kPinned = 2;
constexpr uint32_t kBeingStopped = 3;
constexpr uint32_t kStopping = 1u << 30;
constexpr uint32_t kStopped = 1u << 31;
constexpr uint32_t kRefMask = 0xFFFF;
constexpr uint32_t kChildShift = 16;
constexpr uint32_t kChildUnit = 1u << kChildShift;
constexpr uint32_t kChildMask = 0x3FFFu << kChildShift;
// Limits checked with a plain load before the locked add; the margins
// exceed the number of threads that could attach at once, so racing
// attachers never carry into the next field.
constexpr uint32_t kMaxRefs = 0xFF00;
constexpr uint32_t kMaxChildCount = 0x3F00;

// The calling thread's ring index for SlotPool::ClaimStop; no partition
// matches it when the thread has no ring.
inline uint32_t RingIndex(const Ring* ring) noexcept {
  return ring != nullptr ? ring->index() : ~uint32_t{0};
}

inline uint32_t ChildCount(uint32_t w) {
  return (w & kChildMask) >> kChildShift;
}

// Moves a simple slot from in flight (1) to `to`; false if it was not in
// flight (already stopped, free or pinned).
template <typename T>
bool ClaimStop(T* s, uint32_t to) noexcept {
  uint32_t w = 1;
  return s->header.word.compare_exchange_strong(w, to,
                                                std::memory_order_acq_rel);
}

// Handles given to NCCL carry their slot kind in the low bits (slots are
// 64-byte aligned), so stop/record dispatch with one check instead of
// probing every pool; the pool's Owns() still validates the address.
enum Tag : uintptr_t {
  kTagApi = 1,
  kTagOp = 2,
  kTagProxyOp = 3,
  kTagStep = 4,
  kTagKernel = 5,
  kTagNet = 6,
  kTagMask = 7,
};

template <typename T>
void* Tagged(T* slot, Tag tag) noexcept {
  return slot == nullptr
             ? nullptr
             : reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(slot) | tag);
}

inline Tag TagOf(const void* h) noexcept {
  return static_cast<Tag>(reinterpret_cast<uintptr_t>(h) & kTagMask);
}

inline void* Untagged(const void* h) noexcept {
  return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(h) &
                                 ~uintptr_t{kTagMask});
}

// The slot `h` names if it carries `tag` and lies in `pool`, else null.
template <typename T>
T* Slot(const SlotPool<T>* pool, const void* h, Tag tag) noexcept {
  if (h == nullptr || TagOf(h) != tag) return nullptr;
  void* p = Untagged(h);
  return pool->Owns(p) ? static_cast<T*>(p) : nullptr;
}
}  // namespace

struct alignas(64) Recorder::ApiSlot {
  SlotHeader header;
  uint64_t api_cpu_ns;
  bool graph_captured;
};

struct alignas(64) Recorder::OpSlot {
  SlotHeader header;
  OpRec rec;
  std::atomic<uint32_t> next_proxy_index{0};
};

struct alignas(64) Recorder::ProxyOpSlot {
  SlotHeader header;
  ProxyOpRec rec;
  OpSlot* parent;  // null for PXN ops of another process
};

struct alignas(64) Recorder::StepSlot {
  SlotHeader header;
  ProxyStepRec rec;
  ProxyOpSlot* parent;
  bool is_send;
};

struct alignas(64) Recorder::KernelSlot {
  SlotHeader header;
  KernelChRec rec;
  OpSlot* parent;
};

struct alignas(64) Recorder::NetSlot {
  SlotHeader header;
  NetPluginRec rec;
};

Recorder::Recorder(RingSet* rings, pid_t self_pid, const PoolSizes& sizes)
    : rings_(rings),
      self_pid_(self_pid),
      api_(new SlotPool<ApiSlot>(sizes.api)),
      op_(new SlotPool<OpSlot>(sizes.op)),
      proxy_op_(new SlotPool<ProxyOpSlot>(sizes.proxy_op, rings->max_rings())),
      step_(new SlotPool<StepSlot>(sizes.proxy_step, rings->max_rings())),
      kernel_(new SlotPool<KernelSlot>(sizes.kernel, rings->max_rings())),
      net_(new SlotPool<NetSlot>(sizes.net)) {}

Recorder::~Recorder() {
  delete api_;
  delete op_;
  delete proxy_op_;
  delete step_;
  delete kernel_;
  delete net_;
}

Record* Recorder::Reserve(Ring** ring) noexcept {
  *ring = rings_->ThreadRing();
  return *ring == nullptr ? nullptr : (*ring)->Reserve();
}

Recorder::OpSlot* Recorder::AsOp(void* p) const noexcept {
  return Slot(op_, p, kTagOp);
}

void* Recorder::StartApi(CommContext* ctx, bool p2p,
                         bool graph_captured) noexcept {
  if (ctx == nullptr || (ctx->mask.load(std::memory_order_relaxed) &
                         (p2p ? abi::kP2p : abi::kColl)) == 0) {
    return nullptr;
  }
  ApiSlot* s = api_->Acquire();
  if (s == nullptr) {
    pool_exhausted_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  s->api_cpu_ns = NowCpuNs();
  s->graph_captured = graph_captured;
  return Tagged(s, kTagApi);
}

void* Recorder::StartOp(CommContext* ctx, void* parent,
                        const OpStart& a) noexcept {
  if (ctx == nullptr || (ctx->mask.load(std::memory_order_relaxed) &
                         (a.p2p ? abi::kP2p : abi::kColl)) == 0) {
    return nullptr;
  }
  const uint64_t now = NowCpuNs();
  Ring* ring = rings_->ThreadRing();
  if (ring == nullptr) return nullptr;  // counted once, as no_ring_drops
  OpSlot* s = op_->AcquireFrom(&ring->op_cursor, kStopped);
  if (s == nullptr) {
    pool_exhausted_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  OpRec& r = s->rec;
  r.op_id = (uint64_t{ring->index() + 1} << 48) | ++ring->next_op_seq;
  r.comm_hash = a.comm_hash != 0 ? a.comm_hash : ctx->comm_hash;
  r.rank = a.rank;
  r.is_p2p = a.p2p ? 1 : 0;
  r.n_channels = a.n_channels;
  r.n_warps = a.n_warps;
  r.graph_captured = 0;
  r.graph_replay = 0;
  r.count = a.count;
  r.root = a.p2p ? -1 : a.root;
  r.peer = a.p2p ? a.peer : -1;
  r.func = a.func;
  r.datatype = a.datatype;
  r.algo = a.algo;
  r.proto = a.proto;
  r.api_cpu_ns = 0;
  r.enqueue_start_cpu_ns = now;
  r.enqueue_stop_cpu_ns = 0;
  if (a.p2p) {
    // Our own per-comm, per-peer, per-direction counter.
    const bool recv = a.func != nullptr && a.func[0] == 'R';
    r.seq_number = (a.peer >= 0 && a.peer < ctx->n_ranks)
                       ? ctx->p2p_seq[a.peer * 2 + (recv ? 1 : 0)].fetch_add(
                             1, std::memory_order_relaxed)
                       : 0;
  } else {
    r.seq_number = a.seq_number;
  }
  if (const ApiSlot* api = Slot(api_, parent, kTagApi)) {
    if (api->graph_captured) {
      // Host task of a graph launch: the API call is long past.
      r.graph_captured = 1;
      r.graph_replay = 1;
    } else {
      r.api_cpu_ns = api->api_cpu_ns;
    }
  }
  s->next_proxy_index.store(0, std::memory_order_relaxed);
  return Tagged(s, kTagOp);
}

void* Recorder::StartProxyOp(CommContext* ctx, void* parent,
                             const ProxyOpStart& a) noexcept {
  if (ctx == nullptr ||
      (ctx->mask.load(std::memory_order_relaxed) & abi::kProxyOp) == 0) {
    return nullptr;
  }
  Ring* ring = rings_->ThreadRing();
  ProxyOpSlot* s = ring != nullptr ? proxy_op_->AcquireOwned(
                                         ring->index(), &ring->proxy_op_cursor)
                                   : proxy_op_->Acquire();
  if (s == nullptr) {
    pool_exhausted_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  // PXN: another process's op; its parent handle is not ours to read.
  OpSlot* p = (a.pid == self_pid_) ? AsOp(parent) : nullptr;
  ProxyOpRec& r = s->rec;
  std::memset(&r, 0, sizeof(r));
  if (p != nullptr && !AttachChild(p)) p = nullptr;
  s->parent = p;
  if (p != nullptr) {
    r.op_id = p->rec.op_id;
    r.proxy_index = p->next_proxy_index.fetch_add(1, std::memory_order_relaxed);
  }
  r.pid = static_cast<uint32_t>(a.pid);
  r.channel_id = a.channel;
  r.peer = a.peer;
  r.is_send = a.is_send ? 1 : 0;
  r.n_steps = static_cast<uint32_t>(a.n_steps);
  r.chunk_size_bytes = static_cast<uint32_t>(a.chunk_size);
  r.start_cpu_ns = NowCpuNs();
  return Tagged(s, kTagProxyOp);
}

void* Recorder::StartProxyStep(CommContext* ctx, void* parent,
                               int step) noexcept {
  if (ctx == nullptr ||
      (ctx->mask.load(std::memory_order_relaxed) & abi::kProxyStep) == 0) {
    return nullptr;
  }
  Ring* ring = rings_->ThreadRing();
  StepSlot* s = ring != nullptr
                    ? step_->AcquireOwned(ring->index(), &ring->step_cursor)
                    : step_->Acquire();
  if (s == nullptr) {
    pool_exhausted_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  ProxyStepRec& r = s->rec;
  std::memset(&r, 0, sizeof(r));
  ProxyOpSlot* p = Slot(proxy_op_, parent, kTagProxyOp);
  s->parent = p;
  s->is_send = p != nullptr && p->rec.is_send != 0;
  if (p != nullptr) {
    r.op_id = p->rec.op_id;
    r.proxy_index = p->rec.proxy_index;
  }
  r.step = static_cast<uint32_t>(step);
  r.start_cpu_ns = NowCpuNs();
  return Tagged(s, kTagStep);
}

void* Recorder::StartKernelCh(CommContext* ctx, void* parent, uint8_t channel,
                              uint64_t gpu_ns) noexcept {
  if (ctx == nullptr ||
      (ctx->mask.load(std::memory_order_relaxed) & abi::kKernelCh) == 0) {
    return nullptr;
  }
  Ring* ring = rings_->ThreadRing();
  KernelSlot* s = ring != nullptr ? kernel_->AcquireOwned(ring->index(),
                                                          &ring->kernel_cursor)
                                  : kernel_->Acquire();
  if (s == nullptr) {
    pool_exhausted_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  OpSlot* p = AsOp(parent);
  if (p != nullptr && !AttachChild(p)) p = nullptr;
  s->parent = p;
  KernelChRec& r = s->rec;
  r.op_id = p != nullptr ? p->rec.op_id : 0;
  r.channel_id = channel;
  r.start_gpu_ns = gpu_ns;
  r.stop_gpu_ns = 0;
  // With a GPU timer the start is known in the GPU's clock; the agent fits
  // that clock from the stop samples (GpuClockFit ignores a 0 CPU time).
  r.start_cpu_ns = gpu_ns != 0 ? 0 : NowCpuNs();
  r.stop_cpu_ns = 0;
  return Tagged(s, kTagKernel);
}

void* Recorder::StartNetPlugin(CommContext* ctx, void* parent, int64_t id,
                               const void* data) noexcept {
  if (ctx == nullptr ||
      (ctx->mask.load(std::memory_order_relaxed) & abi::kNetPlugin) == 0) {
    return nullptr;
  }
  NetSlot* s = net_->Acquire();
  if (s == nullptr) {
    pool_exhausted_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  NetPluginRec& r = s->rec;
  std::memset(&r, 0, sizeof(r));
  r.socket_fd = -1;
  r.device = -1;
  if (const StepSlot* st = Slot(step_, parent, kTagStep)) {
    r.op_id = st->rec.op_id;
    r.proxy_index = st->rec.proxy_index;
  }
  const int64_t type = id & ~abi::kNetPluginVersionMask;
  const int64_t version = id & abi::kNetPluginVersionMask;
  if (type == abi::kNetPluginTypeIb) {
    r.transport = 1;
    if (data != nullptr && version == 1) {
      const auto* ib = static_cast<const abi::NetIbEventV1*>(data);
      r.device = ib->qp.device;
      r.qp_num = static_cast<uint32_t>(ib->qp.qp_num);
      r.length_bytes = ib->qp.length;
    }
  } else if (type == abi::kNetPluginTypeSocket) {
    r.transport = 2;
    if (data != nullptr && version == 1) {
      const auto* so = static_cast<const abi::NetSocketEventV1*>(data);
      r.socket_fd = so->sock.fd;
      r.length_bytes = so->sock.length;
    }
  }
  r.start_cpu_ns = NowCpuNs();
  return Tagged(s, kTagNet);
}

bool Recorder::AttachChild(OpSlot* parent) noexcept {
  const uint32_t w = parent->header.word.load(std::memory_order_relaxed);
  if ((w & kRefMask) >= kMaxRefs) {
    pool_exhausted_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  const uint32_t delta = ChildCount(w) >= kMaxChildCount ? 1 : kChildUnit + 1;
  parent->header.word.fetch_add(delta, std::memory_order_acq_rel);
  return true;
}

void Recorder::EmitCompletion(OpSlot* s, uint64_t now,
                              uint32_t children) noexcept {
  Ring* ring;
  Record* out = Reserve(&ring);
  if (out == nullptr) return;
  out->type = RecordType::kCompletion;
  out->completion.op_id = s->rec.op_id;
  out->completion.completion_cpu_ns = now;
  out->completion.children = children;
  ring->Publish();
}

bool Recorder::DropRef(OpSlot* parent, uint32_t* word) noexcept {
  uint32_t w = parent->header.word.load(std::memory_order_relaxed);
  uint32_t next;
  bool mine;
  do {
    // No reference left to drop: a child stopped twice at once by two
    // threads (outside NCCL's contract). Never borrow from the count bits.
    if ((w & kRefMask) == 0) {
      CountIgnored();
      return false;
    }
    next = w - 1;
    // The last reference of a stopped op completes it, unless a completion
    // is being emitted (kStopping): that one takes this child's count over
    // when it ends (FinishCompletion).
    mine = (next & ~kChildMask) == kStopped;
    if (mine) next |= kStopping;
  } while (!parent->header.word.compare_exchange_weak(
      w, next, std::memory_order_acq_rel, std::memory_order_relaxed));
  *word = next;
  return mine;
}

void Recorder::DetachChild(OpSlot* parent, uint64_t now) noexcept {
  if (parent == nullptr) return;
  uint32_t word;
  if (DropRef(parent, &word)) {
    // A kernel channel stop with GPU timers reads no clock (now == 0);
    // the completion does.
    FinishCompletion(parent, word, now != 0 ? now : NowCpuNs());
  }
}

void Recorder::FinishCompletion(OpSlot* s, uint32_t word,
                                uint64_t now) noexcept {
  // The slot is held (kStopping) while a completion reads it: at plain
  // kStopped another thread may already reclaim and rewrite it.
  for (;;) {
    EmitCompletion(s, now, ChildCount(word));
    // Clear kStopping and the children this completion counted: back to
    // plain kStopped (reclaimable) unless late children attached meanwhile.
    const uint32_t done = kStopping | (word & kChildMask);
    uint32_t w =
        s->header.word.fetch_sub(done, std::memory_order_acq_rel) - done;
    // Late children that attached and stopped while this completion was
    // emitted left their count and no reference: complete them as well.
    // One still running completes the op itself when it stops.
    for (;;) {
      if ((w & ~kChildMask) != kStopped || ChildCount(w) == 0) return;
      if (s->header.word.compare_exchange_weak(w, w | kStopping,
                                               std::memory_order_acq_rel,
                                               std::memory_order_relaxed)) {
        word = w | kStopping;
        break;
      }
    }
  }
}

void Recorder::StopOp(OpSlot* s) noexcept {
  // Accept one Stop: in flight (nonzero, neither stopping nor stopped).
  uint32_t w = s->header.word.load(std::memory_order_relaxed);
  if (w == 0 || (w & (kStopped | kStopping)) != 0) return CountIgnored();
  // The record is written before the Stop is accepted and published after:
  // one CAS both accepts the Stop and marks the op stopped. Until the CAS
  // succeeds nobody else may stop or reclaim the slot, so `rec` is stable;
  // if the CAS finds the op already stopped, the unpublished copy is simply
  // overwritten by the next record.
  const uint64_t now = NowCpuNs();
  Ring* ring;
  Record* out = Reserve(&ring);
  if (out != nullptr) {
    out->type = RecordType::kOp;
    out->op = s->rec;
    out->op.enqueue_stop_cpu_ns = now;
  }
  // Drop the event's own reference and mark it stopped. If that leaves no
  // reference and there were children, every child finished before the
  // enqueue did: complete now, holding the slot (kStopping) while the
  // completion reads it.
  constexpr uint32_t kDelta = kStopped - 1;
  uint32_t next;
  bool complete;
  do {
    if (w == 0 || (w & (kStopped | kStopping)) != 0) return CountIgnored();
    next = w + kDelta;
    complete = (next & ~kChildMask) == kStopped && ChildCount(next) > 0;
    if (complete) next |= kStopping;
  } while (!s->header.word.compare_exchange_weak(
      w, next, std::memory_order_acq_rel, std::memory_order_relaxed));
  if (out != nullptr) ring->Publish();
  if (complete) FinishCompletion(s, next, now);
}

void Recorder::StopStep(StepSlot* s) noexcept {
  Ring* const ring = rings_->ThreadRing();
  if (!step_->ClaimStop(s, RingIndex(ring), kBeingStopped)) {
    return CountIgnored();
  }
  ProxyStepRec& r = s->rec;
  const uint64_t stop = NowCpuNs();
  r.stop_cpu_ns = stop;
  if (ProxyOpSlot* p = s->parent) {
    // Same proxy thread as the ProxyOp: plain accumulation.
    const uint64_t* t = r.state_cpu_ns;
    auto first = [&](std::initializer_list<int> idx) -> uint64_t {
      for (int i : idx) {
        if (t[i] != 0) return t[i];
      }
      return stop;
    };
    ProxyOpRec& o = p->rec;
    o.steps_seen += 1;
    o.bytes += r.bytes;
    if (t[kStepSendGpuWait] != 0) {
      o.gpu_wait_ns +=
          first({kStepSendPeerWait, kStepSendWait}) - t[kStepSendGpuWait];
    }
    if (t[kStepSendPeerWait] != 0) {
      o.peer_wait_ns += first({kStepSendWait}) - t[kStepSendPeerWait];
    }
    if (t[kStepSendWait] != 0) o.send_wait_ns += stop - t[kStepSendWait];
    if (t[kStepRecvWait] != 0) {
      o.recv_wait_ns +=
          first({kStepRecvFlushWait, kStepRecvGpuWait}) - t[kStepRecvWait];
    }
    if (t[kStepRecvGpuWait] != 0) o.gpu_wait_ns += stop - t[kStepRecvGpuWait];
  }
  if (Record* out = ring != nullptr ? ring->Reserve() : nullptr) {
    out->type = RecordType::kProxyStep;
    out->proxy_step = r;
    ring->Publish();
  }
  step_->Release(s);
}

bool Recorder::FitSampleDue(Ring* ring, uint64_t stop_gpu_ns) noexcept {
  if (ring == nullptr) return true;
  // Either direction: a thread may see several GPUs' timers.
  const uint64_t d = stop_gpu_ns - ring->fit_gpu_ns;
  if (ring->fit_gpu_ns != 0 && (d < kFitSampleGpuNs || -d < kFitSampleGpuNs)) {
    return false;
  }
  ring->fit_gpu_ns = stop_gpu_ns;
  return true;
}

void Recorder::StopKernel(KernelSlot* s) noexcept {
  Ring* const ring = rings_->ThreadRing();
  if (!kernel_->ClaimStop(s, RingIndex(ring), kBeingStopped)) {
    return CountIgnored();
  }
  KernelChRec& r = s->rec;
  // Both GPU timers known: the GPU times are the record, and the CPU clock
  // is read only for the agent's GPU->CPU offset fit, at most once per
  // kFitSampleGpuNs of GPU time per thread. Without them (v3, a stop
  // without KernelChStop) the CPU observation is the record: read it.
  const uint64_t now = (r.start_gpu_ns == 0 || r.stop_gpu_ns == 0 ||
                        FitSampleDue(ring, r.stop_gpu_ns))
                           ? NowCpuNs()
                           : 0;
  r.stop_cpu_ns = now;
  if (Record* out = ring != nullptr ? ring->Reserve() : nullptr) {
    out->type = RecordType::kKernelCh;
    out->kernel = r;
    ring->Publish();
  }
  OpSlot* parent = s->parent;
  kernel_->Release(s);
  DetachChild(parent, now);
}

void Recorder::Stop(void* handle) noexcept {
  Ring* ring;
  switch (TagOf(handle)) {
    case kTagOp:
      if (OpSlot* s = Slot(op_, handle, kTagOp)) return StopOp(s);
      break;
    case kTagApi:
      if (ApiSlot* s = Slot(api_, handle, kTagApi)) {
        if (!ClaimStop(s, kBeingStopped)) break;
        // Keep graph-captured calls for their replays, up to half the pool.
        if (s->graph_captured &&
            pinned_api_.fetch_add(1, std::memory_order_relaxed) <
                api_->size() / 2) {
          s->header.word.store(kPinned, std::memory_order_release);
        } else {
          api_->Release(s);
        }
        return;
      }
      break;
    case kTagProxyOp:
      if (ProxyOpSlot* s = Slot(proxy_op_, handle, kTagProxyOp)) {
        ring = rings_->ThreadRing();
        if (!proxy_op_->ClaimStop(s, RingIndex(ring), kBeingStopped)) break;
        const uint64_t now = NowCpuNs();
        s->rec.stop_cpu_ns = now;
        if (Record* out = ring != nullptr ? ring->Reserve() : nullptr) {
          out->type = RecordType::kProxyOp;
          out->proxy_op = s->rec;
          ring->Publish();
        }
        OpSlot* parent = s->parent;
        proxy_op_->Release(s);
        return DetachChild(parent, now);
      }
      break;
    case kTagStep:
      if (StepSlot* s = Slot(step_, handle, kTagStep)) return StopStep(s);
      break;
    case kTagKernel:
      if (KernelSlot* s = Slot(kernel_, handle, kTagKernel)) {
        return StopKernel(s);
      }
      break;
    case kTagNet:
      if (NetSlot* s = Slot(net_, handle, kTagNet)) {
        if (!ClaimStop(s, kBeingStopped)) break;
        s->rec.stop_cpu_ns = NowCpuNs();
        if (Record* out = Reserve(&ring)) {
          out->type = RecordType::kNetPlugin;
          out->net = s->rec;
          ring->Publish();
        }
        net_->Release(s);
        return;
      }
      break;
    default:
      break;
  }
  CountIgnored();  // NULL, foreign or stale-kind handle
}

void Recorder::RecordState(void* handle, int state, uint64_t arg) noexcept {
  switch (TagOf(handle)) {
    case kTagStep:
      if (StepSlot* s = Slot(step_, handle, kTagStep)) {
        int idx = -1;
        switch (state) {
          case abi::kProxyStepSendGpuWait:
            idx = kStepSendGpuWait;
            break;
          case abi::kProxyStepSendPeerWait:
            idx = kStepSendPeerWait;
            break;
          case abi::kProxyStepSendWait:
            idx = kStepSendWait;
            break;
          case abi::kProxyStepRecvWait:
            idx = kStepRecvWait;
            break;
          case abi::kProxyStepRecvFlushWait:
            idx = kStepRecvFlushWait;
            break;
          case abi::kProxyStepRecvGpuWait:
            idx = kStepRecvGpuWait;
            break;
          default:
            break;
        }
        if (idx < 0) return;
        s->rec.state_cpu_ns[idx] = NowCpuNs();
        if (arg != 0) s->rec.bytes = arg;
        return;
      }
      break;
    case kTagProxyOp:
      if (ProxyOpSlot* s = Slot(proxy_op_, handle, kTagProxyOp)) {
        if (state == abi::kProxyOpInProgress) {
          s->rec.in_progress_cpu_ns = NowCpuNs();
        }
        return;
      }
      break;
    case kTagKernel:
      if (KernelSlot* s = Slot(kernel_, handle, kTagKernel)) {
        if (state == abi::kKernelChStop) s->rec.stop_gpu_ns = arg;
        return;
      }
      break;
    case kTagApi:
    case kTagOp:
    case kTagNet:
      // Never updated by NCCL (or nothing we keep); valid handles are fine.
      if (Slot(api_, handle, kTagApi) || Slot(op_, handle, kTagOp) ||
          Slot(net_, handle, kTagNet)) {
        return;
      }
      break;
    default:
      break;
  }
  CountIgnored();
}

}  // namespace pitstop::plugin
