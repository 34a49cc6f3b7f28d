// Bounded store of what the agent has yet to send upstream.
//
// Summaries queue up to `capacity`; beyond that (controller unreachable or
// slow) each further summary is folded into an AggregateRecord per
// (communicator, function) and counted in summaries_aggregated; past
// kMaxAggregates distinct keys they are only counted (summaries_dropped).
// Lifecycle events and communicator infos are kept in small bounded queues
// (the oldest is dropped and counted when full). Memory is bounded by
// capacity * (size of a summary) plus small constants.
//
// Thread-safe: ingest threads Push, the upstream thread Drain.
#ifndef PITSTOP_AGENT_UPSTREAM_BUFFER_H_
#define PITSTOP_AGENT_UPSTREAM_BUFFER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "pitstop/sync.h"
#include "pitstop/v1/agent.pb.h"

namespace pitstop::agent {

class UpstreamBuffer {
 public:
  static constexpr size_t kMaxAggregates = 4096;
  static constexpr size_t kMaxEvents = 10'000;

  explicit UpstreamBuffer(size_t capacity) : capacity_(capacity) {}

  void PushSummaries(std::vector<v1::CollectiveSummary>* summaries);
  void PushLifecycle(std::vector<v1::RankLifecycle>* events);
  void PushCommunicators(std::vector<v1::CommunicatorInfo>* infos);

  // Moves up to `max_summaries` summaries plus all lifecycle events,
  // communicator infos and aggregates into `out`.
  void Drain(size_t max_summaries, v1::ConnectRequest* out);
  // Puts summaries of a batch that could not be sent back at the front
  // (as far as capacity allows; the rest is aggregated).
  void Requeue(v1::ConnectRequest* batch);

  struct Counters {
    uint64_t summaries_aggregated = 0;
    uint64_t summaries_dropped = 0;
    uint64_t events_dropped = 0;
    size_t queued = 0;
  };
  Counters counters() const;
  // Summaries queued now.
  size_t queued() const;
  // What is held and not sent yet: summaries, ops folded into aggregates,
  // lifecycle events (the agent counts them as undelivered when it stops).
  uint64_t Pending() const;

 private:
  void FoldLocked(const v1::CollectiveSummary& s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t capacity_;
  mutable Mutex mu_;
  std::deque<v1::CollectiveSummary> summaries_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::RankLifecycle> lifecycle_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::CommunicatorInfo> communicators_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<uint64_t, int>, v1::AggregateRecord> aggregates_
      ABSL_GUARDED_BY(mu_);
  Counters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pitstop::agent

#endif  // PITSTOP_AGENT_UPSTREAM_BUFFER_H_
