// The planning service (docs/planning.md, "Live planner"): the live C4P
// flow plan of every job (live_planner.h, on the C4P library in src/c4p/),
// its inputs from agent batches and fault changes, and the path directives
// it sends to the agents. Off (every call FailedPrecondition) when the
// controller runs without --fabric.
//
// Owns: the LivePlanner (flows learned from the agents' connections, NIC
// capacities, link marks, plans and their epochs; plans are saved in the
// store by the planner before they are served or sent).
//
// Locks: none of its own beyond the LivePlanner's: its mu_ (inputs,
// queries; a leaf: ObserveFault is called under FaultService's lock) and
// run_mu_ (serialises Run()). Directives are sent after Run() returns,
// holding no lock.
//
// Threads: ObserveBatch from agent streams' threads, ObserveFault from the
// fault event stream, Run from the controller's loop and SetLinkHealth
// (gRPC threads); any thread.
//
// Needs: a PathDirectiveSender (NodeService's ledger: path directives are
// acked and re-sent on reconnect), Leadership (a follower answers from the
// store and plans nothing; null: always leads).
#ifndef PITSTOP_CONTROLLER_PLANNING_PLANNING_SERVICE_H_
#define PITSTOP_CONTROLLER_PLANNING_PLANNING_SERVICE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "pitstop/v1/agent.pb.h"
#include "pitstop/v1/controller.pb.h"
#include "src/controller/planning/live_planner.h"

namespace pitstop::controller {

class Leadership;

// Writes a path directive to `host`'s agent with a new command id, keeping
// it for a known host's agent until acked.
class PathDirectiveSender {
 public:
  struct Sent {
    uint64_t command_id = 0;
    bool written = false;  // to the agent's stream now
    bool known = false;    // the host is known (it waits for its agent)
  };
  virtual ~PathDirectiveSender() = default;
  virtual Sent SendPathDirective(const std::string& host,
                                 const v1::PathDirective& d) = 0;
};

class PlanningService {
 public:
  struct Options {
    LivePlanner::Options planner;           // fabric empty: planning off
    Leadership* leadership = nullptr;       // not owned; null: always leads
    PathDirectiveSender* sender = nullptr;  // required, not owned
  };
  // Errors of the fabric reader, naming --fabric.
  static absl::StatusOr<std::unique_ptr<PlanningService>> Create(
      Options options);

  bool enabled() const { return planner_ != nullptr; }

  // --- inputs ----------------------------------------------------------------
  // A joined agent batch: flows and NIC samples; acks of path directives.
  void ObserveBatch(const std::string& host, const v1::ConnectRequest& batch);
  // A fault change (the fault event stream): COMM_SLOW verdicts mark links.
  void ObserveFault(const v1::Fault& fault);

  // --- planning
  // ---------------------------------------------------------------- One pass
  // now (the loop runs one after every cycle): plans what changed, then sends
  // the directives. Returns job -> new epoch. Nothing on a follower.
  std::map<std::string, uint64_t> Run();

  // --- the Controller API (errors as in controller.proto) -------------------
  absl::StatusOr<v1::FlowPlan> GetFlowPlan(const v1::GetFlowPlanRequest& r);
  absl::StatusOr<v1::ListLinksResponse> ListLinks(
      const v1::ListLinksRequest& r);
  // Marks the links, re-plans the jobs crossing them at once and sends the
  // new plans to their agents.
  absl::StatusOr<v1::SetLinkHealthResponse> SetLinkHealth(
      const v1::SetLinkHealthRequest& r);

 private:
  PlanningService(Options options, std::unique_ptr<LivePlanner> planner);

  const Options options_;
  const std::unique_ptr<LivePlanner> planner_;  // null: planning off
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_PLANNING_PLANNING_SERVICE_H_
