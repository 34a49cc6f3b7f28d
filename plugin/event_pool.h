// Preallocated pools of event handles (the `void*` NCCL keeps between
// startEvent and stopEvent).
//
// Acquire is lock-free: a shared cursor walks the pool round-robin and a CAS
// claims a free slot; with the caller's own cursor (AcquireFrom) the CAS is
// the only locked instruction, and where each thread may own a partition
// (AcquireOwned) not even that, so a released
// slot is reused only after the cursor has gone round once. The owner also
// accepts the stop of a slot of its partition without a locked instruction
// (ClaimStop). That matters
// because NCCL may still name a stopped handle as a parent (CUDA-graph replays;
// children that start after their Coll stopped). No allocation after
// construction; exhaustion returns nullptr (the caller counts it).
#ifndef PITSTOP_PLUGIN_EVENT_POOL_H_
#define PITSTOP_PLUGIN_EVENT_POOL_H_

#include <atomic>
#include <cstdint>
#include <memory>

namespace pitstop::plugin {

// Every slot type starts with this. `word`: 0 free; pool-specific values
// otherwise (see recorder.cc).
struct SlotHeader {
  std::atomic<uint32_t> word{0};
};

template <typename T>
class SlotPool {
 public:
  // `size` must be a power of two. With `owners` > 0 the lower half of the
  // pool is split into that many partitions, partition i claimed only by
  // the thread that owns ring i (AcquireOwned); the upper half is shared.
  explicit SlotPool(uint32_t size, uint32_t owners = 0)
      : slots_(new T[size]),
        size_(size),
        span_(PartitionSpan(size, owners)),
        owners_(span_ != 0 ? owners : 0),
        shared_base_(span_ != 0 ? size / 2 : 0),
        shared_mask_(span_ != 0 ? size / 2 - 1 : size - 1),
        span_shift_(span_ != 0 ? __builtin_ctz(span_) : 0) {}
  SlotPool(const SlotPool&) = delete;
  SlotPool& operator=(const SlotPool&) = delete;

  // Claims a slot whose word is 0 or `reclaimable` (if nonzero), setting it
  // to 1. Tries a few slots, then gives up.
  T* Acquire(uint32_t reclaimable = 0) noexcept {
    for (int probe = 0; probe < kProbes; ++probe) {
      T& s = slots_[shared_base_ +
                    (cursor_.fetch_add(1, std::memory_order_relaxed) &
                     shared_mask_)];
      uint32_t w = s.header.word.load(std::memory_order_relaxed);
      if ((w == 0 || (reclaimable != 0 && w == reclaimable)) &&
          s.header.word.compare_exchange_strong(w, 1,
                                                std::memory_order_acquire)) {
        return &s;
      }
    }
    return nullptr;
  }
  // Like Acquire() over the whole pool, but walking the caller's own cursor
  // (a producer-local field), so the common path has the claiming CAS as its
  // only locked instruction and no shared cursor to race on. For slots other
  // threads may touch while free (ops), where a plain claim is not safe;
  // only on pools without owner partitions (it walks every slot).
  T* AcquireFrom(uint32_t* cursor, uint32_t reclaimable) noexcept {
    uint32_t c = *cursor;
    for (int probe = 0; probe < kProbes; ++probe) {
      T& s = slots_[c++ & (size_ - 1)];
      uint32_t w = s.header.word.load(std::memory_order_relaxed);
      if ((w == 0 || (reclaimable != 0 && w == reclaimable)) &&
          s.header.word.compare_exchange_strong(w, 1,
                                                std::memory_order_acquire)) {
        *cursor = c;
        return &s;
      }
    }
    *cursor = c;
    return Acquire(reclaimable);
  }
  // Claims a free slot of partition `owner` (the caller's ring index; only
  // that thread claims there) with a plain load and store instead of a CAS:
  // nobody else moves a free slot out of 0. `cursor` is the owner's own.
  // Falls back to Acquire() when the partition is busy or absent. Not for
  // slots other threads may modify while free (ops: late children attach).
  T* AcquireOwned(uint32_t owner, uint32_t* cursor) noexcept {
    if (owner < owners_) {
      T* const part = &slots_[owner * span_];
      uint32_t c = *cursor;
      for (int probe = 0; probe < kProbes; ++probe) {
        T& s = part[c++ & (span_ - 1)];
        if (s.header.word.load(std::memory_order_acquire) == 0) {
          s.header.word.store(1, std::memory_order_relaxed);
          *cursor = c;
          return &s;
        }
      }
      *cursor = c;
    }
    return Acquire();
  }
  // Moves an in-flight slot (word 1) to `to`; false if it was not in flight
  // (free, already being stopped, or another pool-specific state), so a
  // second or stale stop is refused. `owner`: the calling thread's ring
  // index. On a slot of the caller's own partition this is a plain load and
  // store: only the owner claims there (AcquireOwned), so the word can only
  // change under it by a stop from another thread, and NCCL stops a handle
  // once (a second stop comes after the first, never at the same time; it
  // then finds the word no longer 1). Elsewhere a CAS decides.
  bool ClaimStop(T* s, uint32_t owner, uint32_t to) noexcept {
    if (OwnedBy(s, owner)) {
      if (s->header.word.load(std::memory_order_acquire) != 1) return false;
      s->header.word.store(to, std::memory_order_relaxed);
      return true;
    }
    uint32_t w = 1;
    return s->header.word.compare_exchange_strong(w, to,
                                                  std::memory_order_acq_rel);
  }
  // True if `s` (one of this pool's slots) lies in partition `owner`.
  bool OwnedBy(const T* s, uint32_t owner) const noexcept {
    const auto index = static_cast<size_t>(s - slots_.get());
    return owner < owners_ && (index >> span_shift_) == owner;
  }
  void Release(T* s) noexcept {
    s->header.word.store(0, std::memory_order_release);
  }
  // True if `p` is the address of one of this pool's slots: handles and
  // parents are checked before they are dereferenced.
  bool Owns(const void* p) const noexcept {
    const auto a = reinterpret_cast<uintptr_t>(p);
    const auto b = reinterpret_cast<uintptr_t>(slots_.get());
    return a >= b && a < b + sizeof(T) * size_ && (a - b) % sizeof(T) == 0;
  }
  uint32_t size() const { return size_; }

 private:
  static constexpr int kProbes = 8;
  // Largest power of two that gives each owner an equal part of the lower
  // half; 0 (no partitions) when that would be under 16 slots.
  static uint32_t PartitionSpan(uint32_t size, uint32_t owners) {
    if (owners == 0) return 0;
    uint32_t span = 1;
    while (span * 2 <= size / 2 / owners) span *= 2;
    return span >= 16 ? span : 0;
  }
  std::unique_ptr<T[]> slots_;
  const uint32_t size_;
  const uint32_t span_;
  const uint32_t owners_;
  const uint32_t shared_base_;
  const uint32_t shared_mask_;
  const uint32_t span_shift_;  // log2(span_)
  alignas(64) std::atomic<uint32_t> cursor_{0};
};

}  // namespace pitstop::plugin

#endif  // PITSTOP_PLUGIN_EVENT_POOL_H_
