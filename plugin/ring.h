// Single-producer single-consumer ring of Records, and the set of rings the
// hot path writes to (one per producing thread).
//
// Producer: the one thread that claimed the ring (lock-free, no allocation,
// no system call). Consumer: the exporter thread only. When a ring is full
// the record is dropped and counted.
#ifndef PITSTOP_PLUGIN_RING_H_
#define PITSTOP_PLUGIN_RING_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "plugin/record.h"

namespace pitstop::plugin {

// Records are sized to what they carry: the ring is made of 64-byte units
// and a record takes one (completion, kernel channel, net event) or two
// (op, proxy op, proxy step), so the small, frequent ones cost one cache
// line. A two-unit record that starts at the last unit runs into one spare
// unit after the end (contiguous for the reader; the wrapped-over unit 0 is
// simply skipped), so records are never split and need no padding.
class Ring {
 public:
  // Room for `capacity` records of the largest kind (a power of two); up to
  // twice as many one-unit records fit.
  Ring(uint32_t capacity, uint32_t index);
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  // Producer thread. Returns a slot to fill (room for any record type), or
  // nullptr when full (the drop is counted). Publish() makes the filled slot
  // visible to the consumer and takes only the units its type needs.
  Record* Reserve() noexcept {
    const uint64_t tail = tail_.load(std::memory_order_relaxed);
    if (tail + 2 - cached_head_ > units_) {
      cached_head_ = head_.load(std::memory_order_acquire);
      if (tail + 2 - cached_head_ > units_) {
        full_drops_.store(full_drops_.load(std::memory_order_relaxed) + 1,
                          std::memory_order_relaxed);
        return nullptr;
      }
    }
    return At(tail);
  }
  void Publish() noexcept {
    const uint64_t tail = tail_.load(std::memory_order_relaxed);
    const uint32_t units = UnitsFor(At(tail)->type);
    published_.store(published_.load(std::memory_order_relaxed) + 1,
                     std::memory_order_relaxed);
    tail_.store(tail + units, std::memory_order_release);
  }

  // Consumer thread. Calls fn(const Record&) for up to `max` records in
  // order and frees their units; returns how many records.
  template <typename Fn>
  size_t Drain(size_t max, Fn&& fn) {
    uint64_t head = head_.load(std::memory_order_relaxed);
    const uint64_t tail = tail_.load(std::memory_order_acquire);
    size_t n = 0;
    while (head < tail && n < max) {
      const Record& r = *At(head);
      fn(r);
      head += UnitsFor(r.type);
      ++n;
    }
    head_.store(head, std::memory_order_release);
    return n;
  }

  // Consumer side, when nobody produces (after fork() in the child): drops
  // what is queued without counting it (it was the parent's).
  void Discard() { head_.store(tail_.load(std::memory_order_acquire)); }

  // Any thread (relaxed reads).
  uint64_t full_drops() const {
    return full_drops_.load(std::memory_order_relaxed);
  }
  // Records published so far.
  uint64_t published() const {
    return published_.load(std::memory_order_relaxed);
  }
  // In records of the largest kind.
  uint32_t capacity() const { return units_ / 2; }
  // Position in its RingSet; part of the op ids this thread assigns.
  uint32_t index() const { return index_; }

  // Producer-local counter for op ids.
  uint64_t next_op_seq = 0;
  // Producer-local cursors into this ring's partitions of the Recorder's
  // slot pools (SlotPool::AcquireOwned).
  uint32_t op_cursor = 0;  // set apart per ring by the constructor
  uint32_t proxy_op_cursor = 0;
  uint32_t step_cursor = 0;
  uint32_t kernel_cursor = 0;
  // Producer-local: GPU stop timer of this thread's last CPU clock sample
  // at a kernel channel stop (Recorder::FitSampleDue).
  uint64_t fit_gpu_ns = 0;

 private:
  struct alignas(64) Unit {
    unsigned char bytes[64];
  };
  Record* At(uint64_t pos) const noexcept {
    return reinterpret_cast<Record*>(&units_mem_[pos & mask_]);
  }

  const uint32_t units_;  // 2 x capacity
  const uint32_t mask_;
  const uint32_t index_;
  std::unique_ptr<Unit[]> units_mem_;          // units_ + 1 (the spare)
  alignas(64) std::atomic<uint64_t> tail_{0};  // in units
  uint64_t cached_head_ = 0;                   // producer's view of head_
  std::atomic<uint64_t> published_{0};
  std::atomic<uint64_t> full_drops_{0};
  alignas(64) std::atomic<uint64_t> head_{0};  // in units
};

// A fixed set of rings created up front; each producing thread claims one on
// its first event (a CAS, no allocation) and keeps it for its lifetime.
// Threads beyond `max_rings` have their events dropped and counted.
class RingSet {
 public:
  RingSet(uint32_t max_rings, uint32_t ring_capacity);
  uint32_t max_rings() const { return max_rings_; }
  RingSet(const RingSet&) = delete;
  RingSet& operator=(const RingSet&) = delete;

  // Producer side: the calling thread's ring, or nullptr if none is left.
  // Hot path: a thread-local read after the first call.
  Ring* ThreadRing() noexcept;

  // Consumer side (one thread): drains every claimed ring into fn, at most
  // `max` records in all. Returns the number drained.
  template <typename Fn>
  size_t DrainAll(size_t max, Fn&& fn) {
    size_t total = 0;
    const uint32_t n = claimed_.load(std::memory_order_acquire);
    for (uint32_t i = 0; i < n && total < max; ++i) {
      total += rings_[i]->Drain(max - total, fn);
    }
    return total;
  }
  // After fork() in the child: empties every ring (the parent's records)
  // and restarts the counters at the child's zero.
  void DiscardAfterFork();
  // Sums over claimed rings (any thread), since the last DiscardAfterFork.
  uint64_t TotalFullDrops() const;
  uint64_t TotalPublished() const;
  uint64_t no_ring_drops() const {
    return no_ring_drops_.load(std::memory_order_relaxed);
  }

 private:
  Ring* Claim() noexcept;

  const uint32_t id_;
  std::unique_ptr<std::unique_ptr<Ring>[]> rings_;
  const uint32_t max_rings_;
  std::atomic<uint32_t> claimed_{0};  // rings [0, claimed_) are in use
  std::atomic<uint64_t> no_ring_drops_{0};
  std::atomic<uint64_t> full_base_{0};
  std::atomic<uint64_t> published_base_{0};
};

}  // namespace pitstop::plugin

#endif  // PITSTOP_PLUGIN_RING_H_
