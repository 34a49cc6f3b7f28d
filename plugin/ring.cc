#include "plugin/ring.h"

namespace pitstop::plugin {
namespace {

// The calling thread's ring, tagged with the id of the set it belongs to
// (tests create several sets). initial-exec TLS: no allocation on first use
// even when the library is dlopened.
struct ThreadSlot {
  uint32_t set_id;
  Ring* ring;
};
__attribute__((tls_model("initial-exec"))) thread_local ThreadSlot t_slot{
    0, nullptr};

std::atomic<uint32_t> g_next_set_id{1};

}  // namespace

// Slots are left uninitialised: large arrays come from mmap, so a ring's
// pages are only touched by the thread that uses it.
Ring::Ring(uint32_t capacity, uint32_t index)
    : units_(capacity * 2),
      mask_(capacity * 2 - 1),
      index_(index),
      units_mem_(new Unit[capacity * 2 + 1]) {
  // Threads start their op-slot walks 256 slots apart (SlotPool::AcquireFrom
  // wraps at the pool's size), so they rarely probe the same slots.
  op_cursor = index * 256;
}

RingSet::RingSet(uint32_t max_rings, uint32_t ring_capacity)
    : id_(g_next_set_id.fetch_add(1)),
      rings_(new std::unique_ptr<Ring>[max_rings]),
      max_rings_(max_rings) {
  for (uint32_t i = 0; i < max_rings; ++i) {
    rings_[i] = std::make_unique<Ring>(ring_capacity, i);
  }
}

Ring* RingSet::ThreadRing() noexcept {
  if (t_slot.set_id == id_) return t_slot.ring;
  Ring* ring = Claim();
  if (ring != nullptr) t_slot = {id_, ring};
  return ring;
}

Ring* RingSet::Claim() noexcept {
  uint32_t n = claimed_.load(std::memory_order_relaxed);
  while (n < max_rings_) {
    if (claimed_.compare_exchange_weak(n, n + 1, std::memory_order_acq_rel)) {
      return rings_[n].get();
    }
  }
  no_ring_drops_.fetch_add(1, std::memory_order_relaxed);
  return nullptr;
}

void RingSet::DiscardAfterFork() {
  const uint32_t n = claimed_.load(std::memory_order_acquire);
  uint64_t full = 0, published = 0;
  for (uint32_t i = 0; i < n; ++i) {
    rings_[i]->Discard();
    full += rings_[i]->full_drops();
    published += rings_[i]->published();
  }
  full_base_.store(full);
  published_base_.store(published);
  no_ring_drops_.store(0);
}

uint64_t RingSet::TotalFullDrops() const {
  uint64_t sum = 0;
  const uint32_t n = claimed_.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < n; ++i) sum += rings_[i]->full_drops();
  return sum - full_base_.load(std::memory_order_relaxed);
}

uint64_t RingSet::TotalPublished() const {
  uint64_t sum = 0;
  const uint32_t n = claimed_.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < n; ++i) sum += rings_[i]->published();
  return sum - published_base_.load(std::memory_order_relaxed);
}

}  // namespace pitstop::plugin
