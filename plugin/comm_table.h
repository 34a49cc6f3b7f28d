// Communicator virtualisation: the table behind the handles the interposer
// gives the application instead of NCCL's ncclComm_t
// (PITSTOP_VIRTUALIZE_COMMS=1, docs/plugin.md "Communicator virtualisation").
//
// A handle is the address of a slot in this table's fixed array, so telling
// our handles from anything else (a real ncclComm_t made before the
// preload, garbage) is an address-range check that never dereferences the
// application's pointer. Each slot binds {real comm, epoch, rank, nranks};
// Swap() rebinds it to a new communicator with the next epoch.
//
// The hot path (Acquire/Release around every forwarded call) is one atomic
// add and one atomic subtract on the slot's word, which holds the epoch in
// its top bits and the number of calls in flight ("holders") in the rest.
// Swap publishes the next epoch with a compare-and-swap that expects zero
// holders, so "refuse while a call is outstanding" is exact: a caller that
// got the old binding is counted, one that comes after the swap gets the
// new one, and the swap never lands in between. Two binding cells per slot
// alternate by epoch parity: a successful swap proves nobody still reads
// the cell it will overwrite two epochs later.
//
// Each slot also counts the operations the application enqueued through the
// handle (CountEnqueued): the migration's switch point is a count on one
// communicator (plugin/rebuild.h). A sandbox handle (a migration joiner's,
// BindSandbox) has no communicator yet: Acquire answers null until
// BindSandboxed gives it one.
//
// Threads: Acquire/Release/IsHandle/CountEnqueued from any thread,
// lock-free, no allocation. The other methods take the table's mutex
// (communicator creation, destruction and rebuilds are cold).
#ifndef PITSTOP_PLUGIN_COMM_TABLE_H_
#define PITSTOP_PLUGIN_COMM_TABLE_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "plugin/plugin_sync.h"

namespace pitstop::plugin {

// What a handle stands for in one epoch. All-zero by default, so the
// table of 4096 slots lives in .bss, not in the library file.
struct CommBinding {
  void* comm = nullptr;  // the real ncclComm_t
  uint64_t epoch = 0;    // 1 at creation, +1 per swap
  int rank = 0;          // this process's rank in `comm` (-1: unknown)
  int n_ranks = 0;       // its size (-1: unknown)
};

enum class SwapCode {
  kOk,
  kNotAHandle,   // not one of this table's handles
  kBadArgument,  // new comm null, a handle, already bound, or bad rank
  kReleased,     // the application destroyed or aborted the handle
  kOutstanding,  // a call on the handle is in flight or in an open group
  kUserObjects,  // user reduction ops or registrations live on the old comm
};

struct SwapOutcome {
  SwapCode code = SwapCode::kNotAHandle;
  std::string error;         // why it was refused (empty when kOk)
  void* old_comm = nullptr;  // kOk: the caller now owns it
  uint64_t new_epoch = 0;
  // The application revoked the old communicator (ncclCommRevoke): it may
  // only be shrunk or torn down, never used for collectives again.
  bool old_revoked = false;
};

class CommTable {
 public:
  // Handles one process can hold at once; past it the interposer hands out
  // the real communicator (not virtualised) instead of failing the call.
  static constexpr int kCapacity = 4096;
  static constexpr uint64_t kMaxEpoch = (uint64_t{1} << 24) - 1;

  constexpr CommTable() = default;
  CommTable(const CommTable&) = delete;
  CommTable& operator=(const CommTable&) = delete;

  // A new handle bound to `comm` at epoch 1; null when the table is full.
  void* Bind(void* comm, int rank, int n_ranks) noexcept;

  // True for this table's handles (bound or released), whatever else `p` is.
  bool IsHandle(const void* p) const noexcept {
    const auto a = reinterpret_cast<uintptr_t>(p);
    const auto base = reinterpret_cast<uintptr_t>(&slots_[0]);
    return a >= base && a < base + sizeof(slots_) &&
           (a - base) % sizeof(Slot) == 0;
  }

  // Hot path. REQUIRES: IsHandle(handle). The current binding, counted as
  // in flight until Release(handle); null (and nothing held) when the
  // handle was released by Unbind.
  const CommBinding* Acquire(const void* handle) noexcept {
    Slot& s = SlotOf(handle);
    const uint64_t w = s.word.fetch_add(1, std::memory_order_acquire);
    const uint64_t epoch = w >> kEpochShift;
    if (epoch == 0) {
      s.word.fetch_sub(1, std::memory_order_relaxed);
      return nullptr;
    }
    return &s.cells[epoch & 1];
  }
  void Release(const void* handle) noexcept {
    SlotOf(handle).word.fetch_sub(1, std::memory_order_release);
  }
  // Hot path: one more operation enqueued through the handle. A plain load
  // and store, no locked instruction: NCCL requires the operations of one
  // communicator to be issued in one order, so concurrent enqueues on one
  // handle are already a bug of the application.
  void CountEnqueued(const void* handle) noexcept {
    std::atomic<uint64_t>& n = SlotOf(handle).enqueued;
    n.store(n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  uint64_t Enqueued(const void* handle) const noexcept {
    return SlotOf(handle).enqueued.load(std::memory_order_relaxed);
  }
  // Counts from zero again (a node-failure recovery: the ranks' counts
  // diverged at the failure; from the redone step on they agree again).
  // The handle's issuing thread only, at a step boundary.
  void ResetEnqueued(const void* handle) noexcept {
    SlotOf(handle).enqueued.store(0, std::memory_order_relaxed);
  }

  // The application destroyed or aborted the handle: later Acquire calls
  // get null. Returns the comm it was bound to (null if already released).
  void* Unbind(const void* handle) noexcept;
  // ncclCommRevoke went through the handle (reported by the next Swap).
  void MarkRevoked(const void* handle) noexcept;
  // User reduction ops / buffer registrations made (+1) or freed (-1) on
  // the handle's current communicator: NCCL ties them to that comm.
  void AddUserObjects(const void* handle, int delta) noexcept;

  // Rebinds `handle` to `new_comm` with the next epoch, or refuses (see
  // SwapCode) and changes nothing. On success the old comm belongs to the
  // caller: no call of the application can still be using it.
  SwapOutcome Swap(const void* handle, void* new_comm, int new_rank,
                   int new_n_ranks) noexcept;

  // The current binding (cold; false when released or not a handle).
  bool Snapshot(const void* handle, CommBinding* out) noexcept;

  // The rank and size a bound or sandbox handle stands for; false for
  // anything else or an unknown membership (-1).
  bool Membership(const void* handle, int* rank, int* n_ranks) noexcept;

  // NCCL's commHash of the handle's current communicator (0: unknown), so a
  // migration directive naming it finds the handle.
  void SetCommHash(const void* handle, uint64_t comm_hash) noexcept;
  // The hash SetCommHash (or BindSandbox) gave a bound or sandbox handle;
  // 0 for anything else. Cold (the mutex).
  uint64_t CommHash(const void* handle) noexcept;
  // The bound or sandbox handle whose communicator has `comm_hash`; null
  // when none (or several: ambiguous).
  void* FindByCommHash(uint64_t comm_hash) noexcept;

  // A handle with no communicator yet (a migration joiner's): every call on
  // it is refused (IsSandbox tells why) until BindSandboxed. Null when the
  // table is full.
  void* BindSandbox(int rank, int n_ranks, uint64_t comm_hash) noexcept;
  bool IsSandbox(const void* handle) noexcept;
  // Gives a sandbox handle its communicator at epoch 1 with `enqueued`
  // operations counted (the switch point the state came from). False when
  // `handle` is not a sandbox handle or `comm` is not a real one.
  bool BindSandboxed(const void* handle, void* comm,
                     uint64_t enqueued) noexcept;
  // The application destroyed or aborted a sandbox handle: released, true.
  // False (nothing done) for any other pointer.
  bool ReleaseSandbox(const void* handle) noexcept;
  // Calls in flight on the handle right now (tests, diagnostics).
  uint64_t Holders(const void* handle) const noexcept {
    return SlotOf(handle).word.load(std::memory_order_acquire) & kHolderMask;
  }

 private:
  static constexpr int kEpochShift = 40;
  static constexpr uint64_t kHolderMask = (uint64_t{1} << kEpochShift) - 1;

  // One cache line per handle: threads driving different communicators do
  // not share lines.
  struct alignas(64) Slot {
    std::atomic<uint64_t> word{0};  // epoch << 40 | holders; epoch 0: unbound
    CommBinding cells[2];           // cells[epoch & 1] is current
    std::atomic<uint64_t> enqueued{0};  // CountEnqueued
  };
  static_assert(sizeof(CommBinding) == 24, "a slot is one cache line");
  enum class State : uint8_t { kFree, kBound, kReleased, kSandbox };
  struct Cold {
    State state = State::kFree;
    bool revoked = false;
    int user_objects = 0;
    uint64_t comm_hash = 0;
  };

  Slot& SlotOf(const void* handle) const noexcept {
    const auto i = (reinterpret_cast<uintptr_t>(handle) -
                    reinterpret_cast<uintptr_t>(&slots_[0])) /
                   sizeof(Slot);
    return slots_[i];
  }
  int IndexOf(const void* handle) const noexcept {
    return static_cast<int>(&SlotOf(handle) - &slots_[0]);
  }
  int FindBoundLocked(const void* comm) const PLUGIN_REQUIRES(mu_);
  int ClaimSlotLocked() PLUGIN_REQUIRES(mu_);
  bool CheckSwapLocked(const void* handle, void* new_comm, int new_rank,
                       int new_n_ranks, SwapOutcome* out) PLUGIN_REQUIRES(mu_);

  mutable Slot slots_[kCapacity];
  Mutex mu_;
  Cold cold_[kCapacity] PLUGIN_GUARDED_BY(mu_);
  int next_unused_ PLUGIN_GUARDED_BY(mu_) = 0;
};

}  // namespace pitstop::plugin

#endif  // PITSTOP_PLUGIN_COMM_TABLE_H_
