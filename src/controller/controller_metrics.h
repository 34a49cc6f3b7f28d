// Prometheus metrics of pitstop-controller (served by the daemon's
// exposer; tests read them from the registry).
#ifndef PITSTOP_CONTROLLER_CONTROLLER_METRICS_H_
#define PITSTOP_CONTROLLER_CONTROLLER_METRICS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "pitstop/v1/common.pb.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace pitstop::controller {

// Thread-safe (prometheus-cpp metrics are atomic).
class ControllerMetrics {
 public:
  ControllerMetrics();
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // Detection cycle wall time, seconds.
  void ObserveCycle(double seconds);
  void AddCollectivesJoined(double n);
  void AddSummaries(double n);
  void FaultOpened(v1::FaultClass c);
  void SetAgentsConnected(double n);
  // Agent input refused or dropped by a limit (`what`: hosts, nics,
  // counters, claims, ...).
  void Refused(const std::string& what, double n);
  // Records a killed agent of `host` had read and never delivered
  // (docs/reliability.md, "Lost without a count").
  void LostInAgent(const std::string& host, double n);
  // Agent batches that found the core's lock busy and were queued
  // (docs/reliability.md, "Ingest off the lock").
  void AddBatchesQueued(double n);
  // Cumulative totals kept elsewhere (the authorizer, the etcd store),
  // published by the daemon once a second; counters advance by the
  // difference.
  void SetAuthRefused(uint64_t total);
  void SetFencedWritesRefused(uint64_t total);
  // Commands agents ack by command_id (docs/controller.md, "Commands that
  // land"), cumulative: sent, acked, re-sent to a reconnected agent,
  // dropped (expired, superseded, over the budget); and unacked now.
  void SetAgentCommands(uint64_t sent, uint64_t acked, uint64_t resent,
                        uint64_t dropped, uint64_t unacked);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Histogram* cycle_seconds_;
  prometheus::Counter* collectives_joined_;
  prometheus::Counter* summaries_;
  prometheus::Family<prometheus::Counter>* faults_;
  prometheus::Gauge* agents_;
  prometheus::Family<prometheus::Counter>* refused_;
  prometheus::Family<prometheus::Counter>* lost_in_agent_;
  prometheus::Counter* batches_queued_;
  prometheus::Counter* auth_refused_;
  prometheus::Counter* fenced_refused_;
  std::atomic<uint64_t> auth_refused_last_{0};
  std::atomic<uint64_t> fenced_refused_last_{0};
  prometheus::Family<prometheus::Counter>* commands_;
  prometheus::Gauge* commands_unacked_;
  // sent, acked, resent, dropped as last published.
  std::atomic<uint64_t> commands_last_[4] = {};
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_CONTROLLER_METRICS_H_
