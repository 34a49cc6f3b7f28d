// What `pitstop sim` shows of the controller's live flow plan
// (docs/planning.md) when a scenario has `planning: {fabric: ...}`: every
// epoch the controller made while the job ran (polled through GetFlowPlan)
// and the tuner table each agent wrote.
//
// Thread-compatible: the runner's thread.
#ifndef PITSTOP_SRC_SIM_PLAN_WATCH_H_
#define PITSTOP_SRC_SIM_PLAN_WATCH_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "pitstop/tuner_table.h"
#include "pitstop/v1/controller.grpc.pb.h"

namespace pitstop::sim {

struct PlanEpoch {
  uint64_t epoch = 0;
  double at_s = 0;  // seconds after the job started, when first seen
  std::string reason;
  uint32_t network_flows = 0;
  uint32_t crossing_flows = 0;
  uint32_t moved_flows = 0;
  // Moved flows whose new path crosses none of the plan's degraded links.
  uint32_t moved_off_degraded = 0;
  std::vector<std::string> degraded_links;
  // Bytes per collective the epoch's planned flows put on each link, by
  // link name (what a re-plan takes off a degraded link).
  std::map<std::string, double> link_bytes;
};

struct TunerTableView {
  std::string host;
  std::string path;
  std::string error;  // the table could not be read ("" = read)
  std::vector<tuner::Steering> entries;
};

class PlanWatcher {
 public:
  PlanWatcher(v1::Controller::Stub* stub, std::string job_id)
      : stub_(stub), job_id_(std::move(job_id)) {}
  // Asks for the plan; a new epoch is recorded and told to `say`.
  void Poll(double at_s, const std::function<void(const std::string&)>& say);
  const std::vector<PlanEpoch>& epochs() const { return epochs_; }
  // Marks `link` degraded at `share` (SetLinkHealth, as an operator);
  // tells `say` which jobs were re-planned.
  void Mark(double at_s, const std::string& link, double share,
            const std::function<void(const std::string&)>& say);
  // The newest plan seen (hosts' acked epochs included).
  const v1::FlowPlan& last() const { return last_; }

 private:
  v1::Controller::Stub* const stub_;
  const std::string job_id_;
  std::vector<PlanEpoch> epochs_;
  v1::FlowPlan last_;
};

// Reads a tuner table written by an agent (the tuner's reader).
TunerTableView ReadTunerTable(const std::string& host, const std::string& path);

}  // namespace pitstop::sim

#endif  // PITSTOP_SRC_SIM_PLAN_WATCH_H_
