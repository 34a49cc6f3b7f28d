#include "src/agent/upstream_buffer.h"

#include <algorithm>

namespace pitstop::agent {

void UpstreamBuffer::FoldLocked(const v1::CollectiveSummary& s) {
  const std::pair<uint64_t, int> key{s.comm_hash(), static_cast<int>(s.func())};
  auto it = aggregates_.find(key);
  if (it == aggregates_.end()) {
    if (aggregates_.size() >= kMaxAggregates) {
      ++counters_.summaries_dropped;
      return;
    }
    it = aggregates_.emplace(key, v1::AggregateRecord()).first;
    it->second.set_comm_hash(s.comm_hash());
    it->second.set_func(s.func());
  }
  v1::AggregateRecord& a = it->second;
  a.set_ops(a.ops() + 1);
  a.set_bytes(a.bytes() + s.bytes());
  a.set_total_kernel_ns(a.total_kernel_ns() + s.kernel_duration_ns());
  a.set_max_kernel_ns(std::max(a.max_kernel_ns(), s.kernel_duration_ns()));
  ++counters_.summaries_aggregated;
}

void UpstreamBuffer::PushSummaries(
    std::vector<v1::CollectiveSummary>* summaries) {
  MutexLock lock(&mu_);
  for (v1::CollectiveSummary& s : *summaries) {
    if (summaries_.size() < capacity_) {
      summaries_.push_back(std::move(s));
    } else {
      FoldLocked(s);
    }
  }
  summaries->clear();
}

template <typename T>
static void PushBounded(std::vector<T>* in, std::deque<T>* q,
                        uint64_t* dropped) {
  for (T& e : *in) {
    if (q->size() >= UpstreamBuffer::kMaxEvents) {
      q->pop_front();
      ++*dropped;
    }
    q->push_back(std::move(e));
  }
  in->clear();
}

void UpstreamBuffer::PushLifecycle(std::vector<v1::RankLifecycle>* events) {
  MutexLock lock(&mu_);
  PushBounded(events, &lifecycle_, &counters_.events_dropped);
}

void UpstreamBuffer::PushCommunicators(
    std::vector<v1::CommunicatorInfo>* infos) {
  MutexLock lock(&mu_);
  PushBounded(infos, &communicators_, &counters_.events_dropped);
}

void UpstreamBuffer::Drain(size_t max_summaries, v1::ConnectRequest* out) {
  MutexLock lock(&mu_);
  const size_t n = std::min(max_summaries, summaries_.size());
  out->mutable_summaries()->Reserve(out->summaries_size() + n);
  for (size_t i = 0; i < n; ++i) {
    *out->add_summaries() = std::move(summaries_.front());
    summaries_.pop_front();
  }
  for (auto& e : lifecycle_) *out->add_lifecycle() = std::move(e);
  lifecycle_.clear();
  for (auto& c : communicators_) *out->add_communicators() = std::move(c);
  communicators_.clear();
  for (auto& [key, a] : aggregates_) *out->add_aggregates() = std::move(a);
  aggregates_.clear();
}

template <typename T>
static void RequeueFront(google::protobuf::RepeatedPtrField<T>* in,
                         std::deque<T>* q, uint64_t* dropped) {
  for (int i = in->size() - 1; i >= 0; --i) {  // keeps their order
    if (q->size() >= UpstreamBuffer::kMaxEvents) {
      *dropped += static_cast<uint64_t>(i + 1);
      break;
    }
    q->push_front(std::move(*in->Mutable(i)));
  }
}

void UpstreamBuffer::Requeue(v1::ConnectRequest* batch) {
  MutexLock lock(&mu_);
  auto* s = batch->mutable_summaries();
  for (int i = s->size() - 1; i >= 0; --i) {
    if (summaries_.size() < capacity_) {
      summaries_.push_front(std::move(*s->Mutable(i)));
    } else {
      FoldLocked(s->Get(i));
    }
  }
  // Older than what is queued: they go in front, in order; those that do
  // not fit are the oldest and are dropped (counted).
  RequeueFront(batch->mutable_lifecycle(), &lifecycle_,
               &counters_.events_dropped);
  RequeueFront(batch->mutable_communicators(), &communicators_,
               &counters_.events_dropped);
  for (auto& a : *batch->mutable_aggregates()) {
    const std::pair<uint64_t, int> key{a.comm_hash(),
                                       static_cast<int>(a.func())};
    auto it = aggregates_.find(key);
    if (it == aggregates_.end()) {
      if (aggregates_.size() >= kMaxAggregates) {
        counters_.summaries_dropped += a.ops();
        continue;
      }
      it = aggregates_.emplace(key, v1::AggregateRecord()).first;
    }
    v1::AggregateRecord& mine = it->second;
    mine.set_comm_hash(a.comm_hash());
    mine.set_func(a.func());
    mine.set_ops(mine.ops() + a.ops());
    mine.set_bytes(mine.bytes() + a.bytes());
    mine.set_total_kernel_ns(mine.total_kernel_ns() + a.total_kernel_ns());
    mine.set_max_kernel_ns(std::max(mine.max_kernel_ns(), a.max_kernel_ns()));
  }
}

UpstreamBuffer::Counters UpstreamBuffer::counters() const {
  MutexLock lock(&mu_);
  Counters c = counters_;
  c.queued = summaries_.size();
  return c;
}

uint64_t UpstreamBuffer::Pending() const {
  MutexLock lock(&mu_);
  uint64_t n = summaries_.size() + lifecycle_.size();
  for (const auto& [key, a] : aggregates_) n += a.ops();
  return n;
}

}  // namespace pitstop::agent

namespace pitstop::agent {

size_t UpstreamBuffer::queued() const {
  MutexLock lock(&mu_);
  return summaries_.size();
}

}  // namespace pitstop::agent
