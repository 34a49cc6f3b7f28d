// The controller's live C4P flow plan per job (docs/planning.md, "Live
// planner"): learns each job's flows from the connections the agents join
// (proxy ops' peer and channel), estimates every NIC's capacity from the
// proxy ops' throughput (Cora, plan/nic_capacity.h), plans the flows on the
// fabric given by --fabric, and re-plans incrementally (Planner::Replan:
// only the flows crossing a changed link move) when a COMM_SLOW verdict
// names a NIC or a connection, when an operator marks a link, or when a
// NIC's measured capacity moves. Every plan has an epoch per job and is
// saved through FaultStore::SavePlan (durable; fenced by the leader's lease
// on etcd) before it is served or sent to the agents.
//
// Inputs (ObserveBatch, ObserveFault) only copy what they need under this
// class's own short lock; Run() plans: it takes a snapshot under the lock,
// computes without it, and publishes under it again. The controller calls
// the inputs with its own lock held and Run() without it.
//
// Thread-safe: any method from any thread; Run() calls are serialised.
#ifndef PITSTOP_SRC_CONTROLLER_PLANNING_LIVE_PLANNER_H_
#define PITSTOP_SRC_CONTROLLER_PLANNING_LIVE_PLANNER_H_

#include <compare>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pitstop/clock.h"
#include "pitstop/sync.h"
#include "pitstop/v1/agent.pb.h"
#include "pitstop/v1/controller.pb.h"
#include "src/c4p/fabric.h"
#include "src/c4p/fabric_io.h"
#include "src/c4p/nic_capacity.h"
#include "src/c4p/planner.h"
#include "src/controller/planning/flow_inputs.h"
#include "src/controller/store/fault_store.h"

namespace pitstop::controller {

// "host3/nic2": the fabric's name of a GPU's NIC.
std::string NicName(const c4p::Fabric& fabric, int gpu);

class LivePlanner {
 public:
  struct Options {
    // "gen:..." spec, a SimAI file or a host CSV (as `pitstop plan
    // --topology`); required.
    std::string fabric;
    c4p::ClosCsvOptions csv;
    Clock* clock = Clock::Real();
    FaultStore* store = nullptr;  // not owned; null: plans are not saved
    // Capacity share assumed for links a COMM_SLOW verdict names.
    double suspect_share = 0.25;
    // Capacity share of a link an operator marks without saying.
    double degraded_share = 0.25;
    // A new connection re-plans the job once no new one came for this long
    // (connections are learned collective by collective at start-up).
    absl::Duration settle = absl::Seconds(2);
    // Cora: use measured NIC capacities.
    bool measure_nics = true;
    c4p::NicCapacityModel::Options cora;
    c4p::PlannerOptions planner;
    // A re-plan whose busiest link needs more than the healthy bound over
    // this share gets QP advice (FlowPlan.recommended_qps); 0: off.
    double qps_target = 0.9;
    int max_qps = 8;
  };

  // InvalidArgument / NotFound from the fabric reader (naming file and
  // line); the epochs of plans in the store are continued.
  static absl::StatusOr<std::unique_ptr<LivePlanner>> Create(Options options);

  // --- inputs (cheap; any thread) ------------------------------------------
  // Members (host, device) of communicators and the send side of every
  // summary's connections: flows, their bytes and throughput, and NIC
  // samples for Cora.
  void ObserveBatch(const std::string& host, const v1::ConnectRequest& batch);
  // A COMM_SLOW fault naming a NIC or a connection marks the links it names
  // SUSPECT (its NIC's links; the fabric links of the connection's planned
  // paths); resolving it clears them. Other faults are ignored.
  void ObserveFault(const v1::Fault& fault);
  // Operator: InvalidArgument naming the spec when no link matches or the
  // share is outside (0, 1). Returns the links changed; Run() re-plans.
  absl::StatusOr<std::vector<v1::LinkStatus>> SetLinkHealth(
      const v1::SetLinkHealthRequest& request);

  // --- planning -------------------------------------------------------------
  struct Directive {
    std::string host;
    v1::PathDirective directive;
  };
  struct RunResult {
    std::map<std::string, uint64_t> planned;  // job -> new epoch
    std::vector<Directive> directives;        // to send to agents
  };
  // Plans every job whose flows or links changed. Never holds the lock
  // while computing.
  RunResult Run();
  // The controller sent `d` to `host`'s agent as `command_id` / the agent
  // acked it. Either may come first: the directive is written to the
  // agent's stream before Sent() runs, and a quick agent's ack can be
  // joined on another thread in between; such an ack is kept (bounded)
  // until its Sent().
  void Sent(const std::string& host, uint64_t command_id,
            const v1::PathDirective& d);
  void Acked(const std::string& host, uint64_t command_id);

  // --- queries
  // ----------------------------------------------------------------
  // InvalidArgument for an empty job id; NotFound naming why (no connections
  // learned, members not placed on the fabric).
  absl::StatusOr<v1::FlowPlan> GetFlowPlan(const std::string& job_id,
                                           bool summary_only);
  v1::ListLinksResponse ListLinks(const v1::ListLinksRequest& request);
  const std::string& fabric_description() const;
  // What the fabric's reader left out or found unusual (logged at start).
  const std::vector<std::string>& fabric_warnings() const;

  // A follower's answer (docs/ha.md: reads answer from the durable store):
  // the job's plan as the leader saved it (FaultStore::Plans, plans/JOB),
  // read back against this controller's fabric: epoch and, per network
  // flow, hosts, NICs and path by link name. What only the leader's soft
  // state knows (communicator, ranks, bytes, reason, delivery to agents)
  // is left out; `reason` says where the plan came from. NotFound when the
  // store has no plan for the job; DataLoss naming the job when the stored
  // plan does not decode or names links this fabric does not have (a
  // controller started with another --fabric).
  absl::StatusOr<v1::FlowPlan> StoredFlowPlan(const std::string& job_id,
                                              bool summary_only) const;

 private:
  struct Member {
    std::string host;
    int device = -1;
  };
  struct CommState {
    std::string job;
    std::map<int, Member> members;  // by comm rank
    uint32_t channels = 0;          // most seen in one collective
    int n_ranks = 0;
    int n_nodes = 0;
  };
  struct ConnKey {
    uint64_t comm = 0;
    int src = 0;  // comm ranks
    int dst = 0;
    int channel = 0;
    auto operator<=>(const ConnKey&) const = default;
  };
  struct ConnState {
    double bytes = 0;
    double throughput_bps = 0;
  };
  struct JobInput {
    std::map<ConnKey, ConnState> conns;
    absl::Time changed;
    bool dirty = false;    // connections not in the published plan
    uint64_t version = 0;  // counts new connections
    uint64_t epoch = 0;    // last epoch made (or stored)
  };
  struct Mark {
    double share = 1;
    v1::LinkHealth health = v1::LINK_HEALTH_HEALTHY;
    std::string reason;
    std::string fault_id;  // SUSPECT marks: the fault
  };
  // One published plan: the flows it routes and where they came from.
  struct JobPlan {
    std::vector<ConnKey> conns;  // Flow::conn indexes this
    std::vector<c4p::Flow> flows;
    c4p::FlowPlan plan;
    std::vector<char> moved;  // by flow
    v1::FlowPlan info;        // without planned_flows and hosts
    // The full plan's inputs (by Flow::conn): what QP advice re-plans.
    std::vector<int> rank_gpu;
    std::vector<c4p::LiveConnection> live;
  };
  struct Delivery {
    uint64_t sent = 0;
    uint64_t acked = 0;
  };
  struct Snapshot;

  LivePlanner(Options options, c4p::Fabric fabric);
  // Fabric GPU of a member; -1 when its host or device is not on the fabric.
  int GpuOf(const Member& m) const;
  void ObserveSummary(const std::string& host, const v1::CollectiveSummary& s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Links named by a COMM_SLOW fault's first suspect (empty: none).
  std::vector<int> LinksOfFault(const v1::Fault& f)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::LinkStatus LinkStatusOf(int link) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Run()'s parts (live_planner_run.cc).
  void ApplyCapacities(const Snapshot& snap, std::vector<int>* changed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  std::shared_ptr<JobPlan> PlanJob(const std::string& job, const Snapshot& snap,
                                   const std::vector<int>& changed,
                                   bool flows_changed, uint64_t epoch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  // PlanJob's steps: a full plan of the job's settled connections (false
  // when none is on the fabric), a re-plan of `prev`'s flows around the
  // changed links (false when the job does not cross them), and the plan's
  // summary (FlowPlan) with its busiest link (returned: seconds of it).
  bool PlanFull(const std::string& job, const Snapshot& snap, uint64_t epoch,
                JobPlan* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  bool PlanAround(const std::string& job, const Snapshot& snap,
                  const JobPlan& prev, const std::vector<int>& changed,
                  uint64_t epoch, JobPlan* p, c4p::Planner::ReplanStats* stats)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  double Summarise(const std::string& job, uint64_t epoch, double ms,
                   const c4p::Planner::ReplanStats& stats, JobPlan* p)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  // QP advice on a re-plan whose busiest link needs `replan_s` (FlowPlan
  // recommended_qps / qps_advice); plans on work_, so within Run().
  void AdviseQps(JobPlan* p, double replan_s, uint64_t epoch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  double BusiestSeconds(const std::vector<c4p::Flow>& flows,
                        const c4p::FlowPlan& plan) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  static void RefreshBytes(const Snapshot& snap, const std::string& job,
                           JobPlan* p);
  std::vector<Directive> DirectivesOf(const std::string& job, const JobPlan& p,
                                      const Snapshot& snap)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);

  const Options options_;
  // Topology and nominal capacities; never changes (name lookups).
  const c4p::Fabric base_;
  const FabricHostIndex hosts_;  // after base_

  Mutex run_mu_;                               // serialises Run()
  c4p::Fabric work_ ABSL_GUARDED_BY(run_mu_);  // effective capacities
  std::set<int> marked_applied_ ABSL_GUARDED_BY(run_mu_);

  mutable Mutex mu_;
  std::map<uint64_t, CommState> comms_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, JobInput> jobs_ ABSL_GUARDED_BY(mu_);
  c4p::NicCapacityModel cora_ ABSL_GUARDED_BY(mu_);
  std::map<int, Mark> marks_ ABSL_GUARDED_BY(mu_);  // by link id
  bool links_dirty_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, std::shared_ptr<const JobPlan>> plans_
      ABSL_GUARDED_BY(mu_);
  // Effective capacities the published plans were made with.
  std::vector<double> gbps_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::map<std::string, Delivery>> delivery_
      ABSL_GUARDED_BY(mu_);  // job -> host
  struct SentCommand {
    std::string job;
    uint64_t epoch = 0;
  };
  std::map<std::pair<std::string, uint64_t>, SentCommand> unacked_
      ABSL_GUARDED_BY(mu_);
  // Acks of no command Sent() yet, oldest first: a path directive's ack
  // that overtook its Sent(), or another command's ack (activation masks
  // share the id space), which ages out.
  std::set<std::pair<std::string, uint64_t>> early_acks_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<std::string, uint64_t>> early_ack_order_
      ABSL_GUARDED_BY(mu_);
  std::set<std::string> unplaced_logged_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> faults_marked_ ABSL_GUARDED_BY(mu_);
  size_t connections_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_SRC_CONTROLLER_PLANNING_LIVE_PLANNER_H_
