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

class Ring {
 public:
  // `capacity` must be a power of two.
  Ring(uint32_t capacity, uint32_t index);
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  // Producer thread. Returns a slot to fill, or nullptr when full (the drop
  // is counted). Publish() makes the filled slot visible to the consumer.
  Record* Reserve() noexcept {
    const uint64_t tail = tail_.load(std::memory_order_relaxed);
    if (tail - cached_head_ >= capacity_) {
      cached_head_ = head_.load(std::memory_order_acquire);
      if (tail - cached_head_ >= capacity_) {
        full_drops_.store(full_drops_.load(std::memory_order_relaxed) + 1,
                          std::memory_order_relaxed);
        return nullptr;
      }
    }
    return &slots_[tail & mask_];
  }
  void Publish() noexcept {
    tail_.store(tail_.load(std::memory_order_relaxed) + 1,
                std::memory_order_release);
  }

  // Consumer thread. Calls fn(const Record&) for up to `max` records in
  // order and frees their slots; returns how many.
  template <typename Fn>
  size_t Drain(size_t max, Fn&& fn) {
    const uint64_t head = head_.load(std::memory_order_relaxed);
    const uint64_t tail = tail_.load(std::memory_order_acquire);
    uint64_t n = tail - head;
    if (n > max) n = max;
    for (uint64_t i = 0; i < n; ++i) fn(slots_[(head + i) & mask_]);
    head_.store(head + n, std::memory_order_release);
    return n;
  }

  // Consumer side, when nobody produces (after fork() in the child): drops
  // what is queued without counting it (it was the parent's).
  void Discard() { head_.store(tail_.load(std::memory_order_acquire)); }

  // Any thread (relaxed reads).
  uint64_t full_drops() const {
    return full_drops_.load(std::memory_order_relaxed);
  }
  uint64_t published() const { return tail_.load(std::memory_order_relaxed); }
  uint32_t capacity() const { return capacity_; }
  // Position in its RingSet; part of the op ids this thread assigns.
  uint32_t index() const { return index_; }

  // Producer-local counter for op ids.
  uint64_t next_op_seq = 0;

 private:
  const uint32_t capacity_;
  const uint32_t mask_;
  const uint32_t index_;
  std::unique_ptr<Record[]> slots_;
  alignas(64) std::atomic<uint64_t> tail_{0};
  uint64_t cached_head_ = 0;  // producer's view of head_
  std::atomic<uint64_t> full_drops_{0};
  alignas(64) std::atomic<uint64_t> head_{0};
};

// A fixed set of rings created up front; each producing thread claims one on
// its first event (a CAS, no allocation) and keeps it for its lifetime.
// Threads beyond `max_rings` have their events dropped and counted.
class RingSet {
 public:
  RingSet(uint32_t max_rings, uint32_t ring_capacity);
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
