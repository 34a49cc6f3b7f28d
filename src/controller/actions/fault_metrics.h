// Gauges of the faults open right now, fed by the controller's fault
// watcher (the same stream `pitstopctl faults --watch` reads):
//   pitstop_controller_open_faults{class,state}
//   pitstop_controller_open_fault_suspects{fault_id,class,level,host,gpu,
//                                          global_rank}  (1 per suspect)
// The Grafana dashboard's "open faults by class" and "slowest ranks"
// panels read them. Series of resolved faults are removed.
#ifndef PITSTOP_CONTROLLER_ACTIONS_FAULT_METRICS_H_
#define PITSTOP_CONTROLLER_ACTIONS_FAULT_METRICS_H_

#include <map>
#include <string>
#include <vector>

#include "pitstop/sync.h"
#include "pitstop/v1/controller.pb.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace pitstop::controller {

// Thread-safe; OnFaultChange does not block (it may be called with the
// fault service's lock held).
class FaultMetrics {
 public:
  explicit FaultMetrics(prometheus::Registry* registry);
  void OnFaultChange(const v1::WatchFaultsResponse& change);

 private:
  struct Open {
    std::map<std::string, std::string> labels;  // class, state
    std::vector<prometheus::Gauge*> suspects;
  };
  void Remove(Open& o) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  prometheus::Family<prometheus::Gauge>* open_;
  prometheus::Family<prometheus::Gauge>* suspects_;
  Mutex mu_;
  std::map<std::string, Open> faults_ ABSL_GUARDED_BY(mu_);
  std::map<std::map<std::string, std::string>, int> counts_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_ACTIONS_FAULT_METRICS_H_
