#include "plugin/comm_registry.h"

#include <utility>

#include "plugin/config.h"

namespace pitstop::plugin {

CommRegistry::CommRegistry(uint32_t default_mask, uint32_t deep_mask)
    : default_mask_(default_mask & kSupportedEventMask),
      deep_mask_(deep_mask & kSupportedEventMask) {}

CommContext* CommRegistry::Add(const CommInfo& info, int* nccl_mask,
                               uint64_t now_cpu_ns) {
  auto ctx = std::make_unique<CommContext>();
  ctx->comm_hash = info.comm_hash;
  ctx->rank = info.rank;
  ctx->n_ranks = info.n_ranks;
  ctx->mask.store(default_mask_, std::memory_order_relaxed);
  const int peers = info.n_ranks > 0 ? info.n_ranks : 0;
  ctx->p2p_seq.reset(new std::atomic<uint64_t>[2 * peers + 1]());
  CommContext* raw = ctx.get();
  MutexLock lock(&mu_);
  Entry e;
  e.ctx = std::move(ctx);
  e.info = info;
  e.nccl_mask = nccl_mask;
  entries_.push_back(std::move(e));
  QueueLocked(entries_.back(), kCommInit, now_cpu_ns);
  PublishMasksLocked();
  return raw;
}

bool CommRegistry::Update(uint64_t comm_hash, const CommInfo& extra,
                          uint64_t now_cpu_ns) {
  MutexLock lock(&mu_);
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    if (!it->live || it->info.comm_hash != comm_hash) continue;
    if (extra.parent_comm_hash != 0) {
      it->info.parent_comm_hash = extra.parent_comm_hash;
    }
    if (!extra.global_ranks.empty()) it->info.global_ranks = extra.global_ranks;
    if (extra.cuda_device >= 0) it->info.cuda_device = extra.cuda_device;
    if (extra.source != CommInfo::kUnspecified) it->info.source = extra.source;
    QueueLocked(*it, kCommUpdate, now_cpu_ns);
    return true;
  }
  return false;
}

int CommRegistry::End(CommContext* ctx, CommEventKind kind,
                      uint64_t now_cpu_ns) {
  MutexLock lock(&mu_);
  int live = 0;
  for (Entry& e : entries_) {
    if (e.ctx.get() == ctx && e.live) {
      if (kind == kCommAbort) {
        e.aborted = true;
        QueueLocked(e, kind, now_cpu_ns);
      } else {
        e.live = false;
        // NCCL's mask may be gone after finalize: never write it again.
        e.nccl_mask = nullptr;
        if (!e.aborted) QueueLocked(e, kind, now_cpu_ns);
      }
    }
    if (e.live) ++live;
  }
  PublishMasksLocked();
  return live;
}

CommContext* CommRegistry::Find(uint64_t comm_hash) {
  MutexLock lock(&mu_);
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    if (it->live && it->info.comm_hash == comm_hash) return it->ctx.get();
  }
  return nullptr;
}

int CommRegistry::live() const {
  MutexLock lock(&mu_);
  int n = 0;
  for (const Entry& e : entries_) n += e.live ? 1 : 0;
  return n;
}

void CommRegistry::AddInitFailure(InitFailure f) {
  MutexLock lock(&mu_);
  if (init_failures_.size() < kMaxInitFailures) {
    init_failures_.push_back(std::move(f));
  }
}

std::vector<InitFailure> CommRegistry::TakeInitFailures() {
  MutexLock lock(&mu_);
  std::vector<InitFailure> out;
  out.swap(init_failures_);
  return out;
}

std::vector<CommEvent> CommRegistry::TakeEvents() {
  MutexLock lock(&mu_);
  return std::exchange(pending_, {});
}

std::vector<CommEvent> CommRegistry::Snapshot() const {
  MutexLock lock(&mu_);
  std::vector<CommEvent> out;
  for (const Entry& e : entries_) {
    if (!e.live) continue;
    CommEvent ev;
    ev.kind = kCommInit;
    ev.info = e.info;
    out.push_back(std::move(ev));
  }
  return out;
}

void CommRegistry::Apply(const Activation& cmd, uint64_t now_cpu_ns) {
  const uint32_t mask = cmd.event_mask == 0
                            ? default_mask_
                            : (cmd.event_mask & kSupportedEventMask);
  MutexLock lock(&mu_);
  for (Entry& e : entries_) {
    if (!e.live) continue;
    if (cmd.comm_hash != 0 && e.info.comm_hash != cmd.comm_hash) continue;
    e.ctx->mask.store(mask, std::memory_order_relaxed);
    e.revert_at_ns = (cmd.duration_ms > 0 && cmd.event_mask != 0)
                         ? now_cpu_ns + uint64_t{cmd.duration_ms} * 1000000
                         : 0;
  }
  PublishMasksLocked();
}

void CommRegistry::ExpireActivations(uint64_t now_cpu_ns) {
  MutexLock lock(&mu_);
  bool changed = false;
  for (Entry& e : entries_) {
    if (e.revert_at_ns != 0 && now_cpu_ns >= e.revert_at_ns) {
      e.ctx->mask.store(default_mask_, std::memory_order_relaxed);
      e.revert_at_ns = 0;
      changed = true;
    }
  }
  if (changed) PublishMasksLocked();
}

void CommRegistry::ForkChild() {
  for (Entry& e : entries_) {
    e.live = false;
    e.revert_at_ns = 0;
    e.ctx->mask.store(0, std::memory_order_relaxed);
  }
  pending_.clear();
  extra_mask_ = 0;
  PublishMasksLocked();
  mu_.Unlock();
}

void CommRegistry::SetExtraMask(uint32_t mask) {
  MutexLock lock(&mu_);
  if (mask == extra_mask_) return;
  extra_mask_ = mask;
  PublishMasksLocked();
}

void CommRegistry::PublishMasksLocked() {
  // NCCL has one mask per process; every live comm's bits must be in it.
  // Our own per-comm mask filters what we record.
  uint32_t all = extra_mask_;
  for (const Entry& e : entries_) {
    if (e.live) all |= e.ctx->mask.load(std::memory_order_relaxed);
  }
  for (const Entry& e : entries_) {
    if (e.nccl_mask != nullptr) {
      __atomic_store_n(e.nccl_mask, static_cast<int>(all), __ATOMIC_RELAXED);
    }
  }
}

void CommRegistry::QueueLocked(const Entry& e, CommEventKind kind,
                               uint64_t now) {
  CommEvent ev;
  ev.kind = kind;
  ev.info = e.info;
  ev.time_cpu_ns = now;
  pending_.push_back(std::move(ev));
}

}  // namespace pitstop::plugin
