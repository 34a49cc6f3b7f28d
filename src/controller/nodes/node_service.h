// Nodes and drains (docs/architecture.md, "Services").
//
// Owns: the node registry (each host's registration, its agent stream's
// session and CommandSink, when it was last heard of, its counters and the
// records lost in its killed agents), the budget of hosts and tracked
// processes, the drains (and their records in the store), and the commands
// written to agents: command ids, and the ledger of the ones agents ack,
// re-sent when an agent reconnects (command_ledger.h).
//
// It does not own what detection makes of a node (the engine's view of a
// lost node: IngestService) nor what a migration does with it: it tells its
// caller which sessions it closed and which hosts it forgot (Gone), and the
// controller passes that on.
//
// Locks: write_mu_ keeps drain writes (an fsync, an etcd round trip; held
// across them) and their effect in one order; mu_ guards the registry, the
// drains and the ledger, and is held while a CommandSink is called. Order:
// write_mu_, then mu_. No other service's lock is taken under either.
//
// Threads: any method from any thread.
//
// Needs: the store (drains; thread-safe), the clock, Leadership (operator
// writes and new streams are refused on a follower; null: always leads),
// metrics (optional).
#ifndef PITSTOP_CONTROLLER_NODES_NODE_SERVICE_H_
#define PITSTOP_CONTROLLER_NODES_NODE_SERVICE_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pitstop/clock.h"
#include "pitstop/v1/agent.pb.h"
#include "pitstop/v1/controller.pb.h"
#include "src/controller/common/service_lock.h"
#include "src/controller/nodes/command_ledger.h"
#include "src/controller/nodes/command_sink.h"
#include "src/controller/nodes/node_facts.h"
#include "src/controller/nodes/record_loss.h"

namespace pitstop::controller {

class ControllerMetrics;
class FaultStore;
class Leadership;

class NodeService {
 public:
  struct Options {
    Clock* clock = Clock::Real();
    FaultStore* store = nullptr;           // required, not owned
    Leadership* leadership = nullptr;      // not owned; null: always leads
    ControllerMetrics* metrics = nullptr;  // optional, not owned
    // An agent gone for longer than this makes its node UNREACHABLE, and a
    // stream silent for longer is closed.
    absl::Duration node_grace = absl::Seconds(30);
    // Hosts tracked at once; a new host beyond is refused after expiring
    // the gone ones.
    size_t max_hosts = 16384;
    // A node without an agent stream for this long is forgotten (unless
    // drained). Zero keeps nodes forever.
    absl::Duration node_expiry = absl::Hours(1);
    // Processes whose records are accounted over all hosts.
    int64_t max_tracked_processes = 1 << 20;
  };
  // What agent input the registry refused or dropped (also exported as
  // pitstop_controller_refused_total{what}).
  struct Stats {
    uint64_t hosts_refused = 0;     // new hosts beyond max_hosts
    uint64_t nics_dropped = 0;      // NICs beyond kMaxNicsPerNode
    uint64_t counters_refused = 0;  // AgentCounters above kMaxCounter
    uint64_t claims_refused = 0;    // registrations losing to a live agent
    uint64_t sessions_superseded = 0;
    uint64_t streams_shed = 0;  // silent streams closed after node_grace
    uint64_t nodes_expired = 0;
    uint64_t processes_refused = 0;  // max_tracked_processes
  };
  // Sessions this class ended and hosts it forgot, for the caller to tell
  // detection (IngestService) about.
  struct Gone {
    std::vector<std::pair<std::string, uint64_t>> shed;  // host, session
    std::vector<std::string> forgotten;
  };
  struct Registered {
    absl::Status status;  // OK: registered as `session`
    uint64_t session = 0;
    v1::NodeRegistration registration;  // as kept (NICs beyond the limit
                                        // dropped)
    Gone gone;                          // to make room for it
  };
  // A command written (or kept for a known host's agent).
  struct Sent {
    uint64_t command_id = 0;
    bool written = false;  // to the agent's stream now
    bool known = false;    // the host is in the registry
  };

  // Loads the drains from the store.
  explicit NodeService(Options options);
  NodeService(const NodeService&) = delete;
  NodeService& operator=(const NodeService&) = delete;

  // --- agent streams (AgentLink) -------------------------------------------
  // A stream registered. InvalidArgument naming the field of a bad
  // registration, ResourceExhausted beyond max_hosts, AlreadyExists when a
  // live agent started later serves the host; a live stream of the same
  // host is superseded (closed). Commands the host's agent has not acked
  // are written to `sink` at once. `sink` must outlive the session. `gone`
  // is filled even when refused (nodes expired to make room).
  // The node shows its agent connected only once the caller calls Opened:
  // until then the rest of the controller may not accept its batches yet.
  Registered Register(const v1::NodeRegistration& reg, CommandSink* sink);
  // The other services registered `session` too (the controller's
  // AgentConnected is done): its node shows the agent connected. Nothing
  // when the session is no longer the host's current one.
  void Opened(uint64_t session);
  // The stream of `session` ended; returns its host ("" when the session
  // is not the host's current one: superseded or shed before).
  std::string Disconnect(uint64_t session);
  // A batch of `session` was joined: counters, records accounting and
  // command acks. FailedPrecondition when the session ended;
  // InvalidArgument naming a counter above its limit (the others are used).
  absl::Status AfterJoin(uint64_t session, const v1::ConnectRequest& batch);
  // Closes streams silent for longer than node_grace and forgets nodes gone
  // for longer than node_expiry (the controller's cycle).
  Gone ShedAndExpire();

  // --- commands to agents ----------------------------------------------------
  // Writes `cmd` with a new command_id to `host`'s agent stream; a command
  // the agent acks (CommandLedger::Tracked) is kept until acked and waits
  // for a known host's agent that is not connected now.
  Sent Send(const std::string& host, v1::AgentCommand cmd);
  // Writes `cmd` only when `host`'s agent is connected now (trainer and
  // migration directives: their policies repeat them); the id is taken only
  // then. False when not connected.
  bool SendIfConnected(const std::string& host, v1::AgentCommand cmd);

  // --- queries and operators (errors as in controller.proto) ---------------
  std::vector<v1::Node> Nodes();
  absl::StatusOr<v1::Node> Node(const std::string& host);
  // Ready nodes and every known or drained one (GetStatus).
  std::pair<uint32_t, uint32_t> ReadyAndTotal();
  std::vector<NodeFacts> ListFacts(bool standby_only);
  absl::StatusOr<v1::Node> Drain(const std::string& host,
                                 const std::string& reason);
  absl::StatusOr<v1::Node> Uncordon(const std::string& host);
  // A committed migration drains its leaver (no leader check: the
  // migration service decided as leader). Logged on a store error.
  void DrainMigrated(const std::string& host, const std::string& why);
  Stats stats();

  // --- leadership ----------------------------------------------------------
  // Closes every agent stream with `why` and forgets the registry; with
  // forget_commands also the commands kept for agents (stepping down: the
  // next leader sends its own). Returns how many streams were closed.
  size_t CloseAll(const absl::Status& why, bool forget_commands);
  // Replaces the drains (a new leader's read of the store).
  void SetDrains(std::map<std::string, std::string> drains);
  size_t drains();

 private:
  struct Entry {
    v1::NodeRegistration registration;
    uint64_t session = 0;  // 0 = not connected
    bool opening = false;  // registered here, not yet Opened
    CommandSink* sink = nullptr;
    uint64_t last_seen_unix_ns = 0;
    uint32_t connected_ranks = 0;
    uint64_t plugin_dropped = 0;
    uint64_t undelivered = 0;  // counters.undelivered (lost in agents)
    RecordLossLedger records;  // records lost in killed agents
  };

  // Register's part under the lock: budget, claims, supersession.
  absl::Status Admit(const v1::NodeRegistration& reg, Gone* gone)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ShedAndExpireLocked(Gone* gone) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ApplyCounters(const std::string& host, Entry* e,
                             const v1::AgentCounters& counters)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Feeds batch.process_records to the host's RecordLossLedger.
  void AccountRecords(const std::string& host, Entry* node,
                      const v1::ConnectRequest& batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A new stream of `host`: the commands its agent has not acked.
  void ResendUnacked(const std::string& host, CommandSink* sink)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishCommandCounts() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CountRefused(const char* what, uint64_t* counter, uint64_t n = 1)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishConnected() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::Node ToNode(const std::string& host, const Entry* e) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drain (`reason` set) or Uncordon `host`.
  absl::StatusOr<v1::Node> ChangeDrain(const std::string& host,
                                       const std::string* reason);
  uint64_t NowUnixNs() const;

  const Options options_;
  ServiceMutex write_mu_{"nodes", "write_mu_"};
  ServiceMutex mu_{"nodes", "mu_"};
  std::map<std::string, Entry> nodes_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::string> sessions_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> drains_ ABSL_GUARDED_BY(mu_);
  uint64_t next_session_ ABSL_GUARDED_BY(mu_) = 1;
  // Starts at the controller's start time in microseconds, so a restarted
  // controller never reuses an id an agent has applied (agents apply an id
  // once).
  uint64_t next_command_id_ ABSL_GUARDED_BY(mu_) = 1;
  CommandLedger commands_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
  int64_t process_budget_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_NODES_NODE_SERVICE_H_
