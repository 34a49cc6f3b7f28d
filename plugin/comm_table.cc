#include "plugin/comm_table.h"

#include <string>

namespace pitstop::plugin {

int CommTable::ClaimSlotLocked() {
  if (next_unused_ < kCapacity) return next_unused_++;
  // Reuse a released slot only once every slot was used once, so a stale
  // handle of a destroyed communicator keeps failing for as long as
  // possible instead of reaching someone else's new one.
  for (int j = 0; j < kCapacity; ++j) {
    if (cold_[j].state == State::kReleased) return j;
  }
  return -1;
}

void* CommTable::Bind(void* comm, int rank, int n_ranks) noexcept {
  MutexLock lock(&mu_);
  const int i = ClaimSlotLocked();
  if (i < 0) return nullptr;
  cold_[i] = Cold{State::kBound, false, 0, 0};
  Slot& s = slots_[i];
  s.enqueued.store(0, std::memory_order_relaxed);
  s.cells[1] = CommBinding{comm, 1, rank, n_ranks};
  // Publishes epoch 1; holders left by misuse of the slot's previous life
  // (a call racing its destroy) stay counted and drain on their own.
  s.word.fetch_add(uint64_t{1} << kEpochShift, std::memory_order_acq_rel);
  return &s;
}

void* CommTable::BindSandbox(int rank, int n_ranks,
                             uint64_t comm_hash) noexcept {
  MutexLock lock(&mu_);
  const int i = ClaimSlotLocked();
  if (i < 0) return nullptr;
  cold_[i] = Cold{State::kSandbox, false, 0, comm_hash};
  Slot& s = slots_[i];
  s.enqueued.store(0, std::memory_order_relaxed);
  // Epoch 0 (Acquire answers null) until BindSandboxed; the membership is
  // kept in the cell epoch 1 will use.
  s.cells[1] = CommBinding{nullptr, 0, rank, n_ranks};
  return &s;
}

bool CommTable::IsSandbox(const void* handle) noexcept {
  if (!IsHandle(handle)) return false;
  MutexLock lock(&mu_);
  return cold_[IndexOf(handle)].state == State::kSandbox;
}

bool CommTable::BindSandboxed(const void* handle, void* comm,
                              uint64_t enqueued) noexcept {
  if (!IsHandle(handle) || comm == nullptr || IsHandle(comm)) return false;
  MutexLock lock(&mu_);
  const int i = IndexOf(handle);
  if (cold_[i].state != State::kSandbox) return false;
  Slot& s = slots_[i];
  s.cells[1].comm = comm;
  s.cells[1].epoch = 1;
  s.enqueued.store(enqueued, std::memory_order_relaxed);
  cold_[i].state = State::kBound;
  // Publishes epoch 1; refused calls never kept a hold, so holders are 0.
  s.word.fetch_add(uint64_t{1} << kEpochShift, std::memory_order_acq_rel);
  return true;
}

bool CommTable::ReleaseSandbox(const void* handle) noexcept {
  if (!IsHandle(handle)) return false;
  MutexLock lock(&mu_);
  Cold& c = cold_[IndexOf(handle)];
  if (c.state != State::kSandbox) return false;
  c.state = State::kReleased;
  return true;
}

bool CommTable::Membership(const void* handle, int* rank,
                           int* n_ranks) noexcept {
  if (!IsHandle(handle)) return false;
  MutexLock lock(&mu_);
  const int i = IndexOf(handle);
  const CommBinding* b = nullptr;
  if (cold_[i].state == State::kSandbox) {
    b = &slots_[i].cells[1];
  } else if (cold_[i].state == State::kBound) {
    const uint64_t w = slots_[i].word.load(std::memory_order_acquire);
    b = &slots_[i].cells[(w >> kEpochShift) & 1];
  } else {
    return false;
  }
  *rank = b->rank;
  *n_ranks = b->n_ranks;
  return b->n_ranks > 0 && b->rank >= 0 && b->rank < b->n_ranks;
}

void CommTable::SetCommHash(const void* handle, uint64_t comm_hash) noexcept {
  if (!IsHandle(handle)) return;
  MutexLock lock(&mu_);
  Cold& c = cold_[IndexOf(handle)];
  if (c.state == State::kBound || c.state == State::kSandbox) {
    c.comm_hash = comm_hash;
  }
}

uint64_t CommTable::CommHash(const void* handle) noexcept {
  if (!IsHandle(handle)) return 0;
  MutexLock lock(&mu_);
  const Cold& c = cold_[IndexOf(handle)];
  if (c.state != State::kBound && c.state != State::kSandbox) return 0;
  return c.comm_hash;
}

void* CommTable::FindByCommHash(uint64_t comm_hash) noexcept {
  if (comm_hash == 0) return nullptr;
  MutexLock lock(&mu_);
  void* found = nullptr;
  for (int i = 0; i < next_unused_; ++i) {
    const Cold& c = cold_[i];
    if ((c.state != State::kBound && c.state != State::kSandbox) ||
        c.comm_hash != comm_hash) {
      continue;
    }
    if (found != nullptr) return nullptr;  // ambiguous
    found = &slots_[i];
  }
  return found;
}

void* CommTable::Unbind(const void* handle) noexcept {
  if (!IsHandle(handle)) return nullptr;
  MutexLock lock(&mu_);
  const int i = IndexOf(handle);
  if (cold_[i].state != State::kBound) return nullptr;
  Slot& s = slots_[i];
  const uint64_t w = s.word.load(std::memory_order_acquire);
  void* comm = s.cells[(w >> kEpochShift) & 1].comm;
  // Epoch 0 from now on; holders (if any) are kept so their Release
  // balances.
  s.word.fetch_and(kHolderMask, std::memory_order_acq_rel);
  cold_[i].state = State::kReleased;
  return comm;
}

void CommTable::MarkRevoked(const void* handle) noexcept {
  if (!IsHandle(handle)) return;
  MutexLock lock(&mu_);
  Cold& c = cold_[IndexOf(handle)];
  if (c.state == State::kBound) c.revoked = true;
}

void CommTable::AddUserObjects(const void* handle, int delta) noexcept {
  if (!IsHandle(handle)) return;
  MutexLock lock(&mu_);
  Cold& c = cold_[IndexOf(handle)];
  if (c.state != State::kBound) return;
  c.user_objects += delta;
  if (c.user_objects < 0) c.user_objects = 0;
}

bool CommTable::Snapshot(const void* handle, CommBinding* out) noexcept {
  if (!IsHandle(handle)) return false;
  MutexLock lock(&mu_);
  const int i = IndexOf(handle);
  if (cold_[i].state != State::kBound) return false;
  const uint64_t w = slots_[i].word.load(std::memory_order_acquire);
  *out = slots_[i].cells[(w >> kEpochShift) & 1];
  return true;
}

int CommTable::FindBoundLocked(const void* comm) const {
  for (int i = 0; i < next_unused_; ++i) {
    if (cold_[i].state != State::kBound) continue;
    const uint64_t w = slots_[i].word.load(std::memory_order_acquire);
    if (slots_[i].cells[(w >> kEpochShift) & 1].comm == comm) return i;
  }
  return -1;
}

// Everything Swap refuses before looking at calls in flight. Fills `out`
// and returns false when refused.
bool CommTable::CheckSwapLocked(const void* handle, void* new_comm,
                                int new_rank, int new_n_ranks,
                                SwapOutcome* out) {
  auto refuse = [out](SwapCode code, std::string why) {
    out->code = code;
    out->error = std::move(why);
    return false;
  };
  if (new_comm == nullptr || IsHandle(new_comm)) {
    return refuse(SwapCode::kBadArgument,
                  "the new communicator must be a real ncclComm_t");
  }
  if (new_n_ranks < 1 || new_rank < 0 || new_rank >= new_n_ranks) {
    return refuse(SwapCode::kBadArgument,
                  "rank " + std::to_string(new_rank) + " of " +
                      std::to_string(new_n_ranks) + " is not a membership");
  }
  const Cold& c = cold_[IndexOf(handle)];
  if (c.state != State::kBound) {
    // Destroyed or aborted: its comm is gone (an aborted one must never be
    // destroyed again), so there is nothing to swap out.
    return refuse(SwapCode::kReleased,
                  "the application destroyed or aborted this communicator");
  }
  if (FindBoundLocked(new_comm) >= 0) {
    return refuse(SwapCode::kBadArgument,
                  "the new communicator is already bound to a handle");
  }
  if (c.user_objects > 0) {
    return refuse(SwapCode::kUserObjects,
                  std::to_string(c.user_objects) +
                      " user reduction op(s) or buffer registration(s) "
                      "belong to the current communicator");
  }
  return true;
}

SwapOutcome CommTable::Swap(const void* handle, void* new_comm, int new_rank,
                            int new_n_ranks) noexcept {
  SwapOutcome out;
  if (!IsHandle(handle)) {
    out.error = "not a pitstop communicator handle";
    return out;
  }
  try {
    MutexLock lock(&mu_);
    if (!CheckSwapLocked(handle, new_comm, new_rank, new_n_ranks, &out)) {
      return out;
    }
    Slot& s = slots_[IndexOf(handle)];
    uint64_t w = s.word.load(std::memory_order_acquire);
    const uint64_t epoch = w >> kEpochShift;
    const uint64_t holders = w & kHolderMask;
    if (holders == 0 && epoch < kMaxEpoch) {
      // Nobody reads the other cell: the last successful swap (or the bind)
      // found zero holders, and every reader since got `epoch`.
      s.cells[(epoch + 1) & 1] =
          CommBinding{new_comm, epoch + 1, new_rank, new_n_ranks};
      const uint64_t next = (epoch + 1) << kEpochShift;
      if (s.word.compare_exchange_strong(w, next, std::memory_order_acq_rel,
                                         std::memory_order_acquire)) {
        Cold& c = cold_[IndexOf(handle)];
        out.code = SwapCode::kOk;
        out.old_comm = s.cells[epoch & 1].comm;
        out.new_epoch = epoch + 1;
        out.old_revoked = c.revoked;
        c.revoked = false;
        return out;
      }
    }
    out.code =
        epoch >= kMaxEpoch ? SwapCode::kBadArgument : SwapCode::kOutstanding;
    out.error = epoch >= kMaxEpoch
                    ? "the handle ran out of epochs"
                    : "a call on this communicator is in flight or queued in "
                      "an open group";
  } catch (...) {
    out.code = SwapCode::kOutstanding;
    out.error = "out of memory";
  }
  return out;
}

}  // namespace pitstop::plugin
