// The communicators this process profiles, their activation masks, and the
// CommunicatorEvents waiting to be exported.
//
// Thread safety: all methods lock; none is on the hot path (profiler init and
// finalize, the interposer, the exporter thread). The hot path reads only
// CommContext::mask and the P2p counters (atomics).
#ifndef PITSTOP_PLUGIN_COMM_REGISTRY_H_
#define PITSTOP_PLUGIN_COMM_REGISTRY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "plugin/plugin_sync.h"
#include "plugin/wire.h"

namespace pitstop::plugin {

// One profiled communicator: the profiler `context` NCCL hands back to us.
struct CommContext {
  uint64_t comm_hash = 0;
  int rank = 0;
  int n_ranks = 0;
  // Effective event mask (NCCL bits) for this communicator's events.
  std::atomic<uint32_t> mask{0};
  // P2p sequence counters, [peer * 2 + is_recv]; sized 2 * n_ranks.
  std::unique_ptr<std::atomic<uint64_t>[]> p2p_seq;
  // The chained profiler's context for this communicator (chain.h), or
  // null. Written at init, before NCCL has the context.
  void* chain_ctx = nullptr;
};

class CommRegistry {
 public:
  // default_mask: always-on event bits; deep_mask: bits added on request.
  CommRegistry(uint32_t default_mask, uint32_t deep_mask);
  CommRegistry(const CommRegistry&) = delete;
  CommRegistry& operator=(const CommRegistry&) = delete;

  // Registers a communicator (queues kCommInit). `nccl_mask` is NCCL's
  // process-global activation mask (may be null); it is rewritten to the
  // union of all live communicators' masks. The context lives until the
  // registry dies (handles in flight may still name it).
  CommContext* Add(const CommInfo& info, int* nccl_mask, uint64_t now_cpu_ns);
  // Merges interposer knowledge (parent, global ranks, device) into the
  // communicator with `comm_hash` (queues kCommUpdate). False if unknown.
  bool Update(uint64_t comm_hash, const CommInfo& extra, uint64_t now_cpu_ns);
  // Ends a communicator (kCommFinalize, or kCommAbort which a later FINALIZE
  // does not override). Returns how many remain live.
  int End(CommContext* ctx, CommEventKind kind, uint64_t now_cpu_ns);
  CommContext* Find(uint64_t comm_hash);
  int live() const;

  // Exporter thread: queued events since the last call.
  std::vector<CommEvent> TakeEvents();
  // Interposer: a communicator creation call failed (kept until the
  // exporter takes it; at most kMaxInitFailures, later ones dropped).
  void AddInitFailure(InitFailure f);
  std::vector<InitFailure> TakeInitFailures();
  static constexpr size_t kMaxInitFailures = 16;
  // kCommInit for every live communicator (sent first on a new stream).
  std::vector<CommEvent> Snapshot() const;
  // Applies an agent command: comm_hash 0 = all; event_mask 0 = back to the
  // default; duration_ms > 0 reverts after that long. Masks are clipped to
  // the supported bits.
  void Apply(const Activation& cmd, uint64_t now_cpu_ns);
  // Reverts masks whose duration has passed.
  void ExpireActivations(uint64_t now_cpu_ns);
  // Event bits a chained profiler asked for: NCCL's mask is the union of
  // ours and these (each plugin still gets only its own events).
  void SetExtraMask(uint32_t mask);

  // fork() handlers (pthread_atfork): Prepare locks, Parent unlocks, Child
  // ends every communicator silently (they are the parent's: masks 0,
  // NCCL's mask 0, no events queued) and unlocks.
  void ForkPrepare() PLUGIN_ACQUIRE(mu_) { mu_.Lock(); }
  void ForkParent() PLUGIN_RELEASE(mu_) { mu_.Unlock(); }
  void ForkChild() PLUGIN_RELEASE(mu_);

  uint32_t default_mask() const { return default_mask_; }
  uint32_t deep_mask() const { return deep_mask_; }

 private:
  struct Entry {
    std::unique_ptr<CommContext> ctx;
    CommInfo info;
    int* nccl_mask = nullptr;
    uint64_t revert_at_ns = 0;  // 0 = no pending revert
    bool live = true;
    bool aborted = false;
  };
  void PublishMasksLocked() PLUGIN_REQUIRES(mu_);
  void QueueLocked(const Entry& e, CommEventKind kind, uint64_t now)
      PLUGIN_REQUIRES(mu_);

  const uint32_t default_mask_;
  const uint32_t deep_mask_;
  mutable Mutex mu_;
  std::vector<Entry> entries_ PLUGIN_GUARDED_BY(mu_);
  std::vector<CommEvent> pending_ PLUGIN_GUARDED_BY(mu_);
  std::vector<InitFailure> init_failures_ PLUGIN_GUARDED_BY(mu_);
  uint32_t extra_mask_ PLUGIN_GUARDED_BY(mu_) = 0;
};

}  // namespace pitstop::plugin

#endif  // PITSTOP_PLUGIN_COMM_REGISTRY_H_
