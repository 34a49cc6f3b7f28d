// The controller: its services and their wiring (docs/architecture.md).
//
// Each service owns its state and lock and says so in its header:
//   ingest/     IngestService        agent batches, the detection engine
//   faults/     FaultService         fault records, the fault event stream
//   nodes/      NodeService          node registry, drains, agent commands
//   trainers/   TrainerPolicyService local SGD and multi-LoRA
//   migration/  MigrationService     standby migration, policy ACT
//   planning/   PlanningService      the live C4P flow plan
//   profiling/  TrainerProfileService torch.profiler diffs of slow ranks
// This class owns them and the store, runs the detection loop, and is the
// only place that knows how they connect: an agent stream touches nodes,
// then ingest, then migration; a joined batch's parts for the other
// services (AfterJoin); the cycle (nodes shed, ingest detects, faults
// stored, trainer policies, migration, trainer profiles); a new term
// (BecomeLeader).
//
// Locks: cycle_mu_ serialises detection cycles and term changes; it guards
// no service's data and is the only lock held while services are called.
// Everything else is one service lock at a time (common/service_lock.h).
//
// Thread-safe: any method from any thread. Start() runs the detection loop
// on its own thread; Stop() (or the destructor) joins it.
#ifndef PITSTOP_CONTROLLER_CONTROLLER_H_
#define PITSTOP_CONTROLLER_CONTROLLER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pitstop/clock.h"
#include "pitstop/sync.h"
#include "pitstop/v1/agent.pb.h"
#include "pitstop/v1/controller.pb.h"
#include "src/controller/detect/detection_engine.h"
#include "src/controller/faults/fault_service.h"
#include "src/controller/ha/leadership.h"
#include "src/controller/ingest/ingest_service.h"
#include "src/controller/migration/migration_service.h"
#include "src/controller/nodes/command_sink.h"
#include "src/controller/nodes/node_service.h"
#include "src/controller/planning/planning_service.h"
#include "src/controller/profiling/trainer_profiles.h"
#include "src/controller/trainers/trainer_policy_service.h"

namespace pitstop::controller {

class ControllerMetrics;
class FaultStore;

class Controller final : public LeadershipListener {
 public:
  struct Options {
    Clock* clock = Clock::Real();
    std::string db_path = ":memory:";
    absl::Duration cycle_period = absl::Milliseconds(500);
    // An agent gone for longer than this makes its node UNREACHABLE.
    absl::Duration node_grace = absl::Seconds(30);
    // An agent whose stream sent nothing for this long (agents send every
    // batch period, 1 s by default) is treated like a closed one by the
    // detectors: its ranks are not judged until it sends again. Zero
    // disables the silence check (a closed stream still counts).
    absl::Duration agent_silence = absl::ZeroDuration();
    DetectionEngine::Options engine;
    ControllerMetrics* metrics = nullptr;  // optional, not owned
    // What the policies did on their own (ACT migrations, drains, sync
    // switches, LoRA reschedules); optional, not owned. Migrations' own
    // metrics: migrate.events.
    PolicyActions* policy_actions = nullptr;
    SyncPolicyEngine::Options sync;  // per-job local-SGD switch policy
    LoraPolicyEngine::Options lora;  // per-job multi-LoRA rescheduling
    // torch.profiler diffs of slow ranks (its clock is `clock`).
    TrainerProfileService::Options profiles;
    std::string version = "0.1.0";
    // Hosts tracked at once (docs/reliability.md); a new host beyond it is
    // refused (RESOURCE_EXHAUSTED) after expiring the gone ones.
    size_t max_hosts = 16384;
    // A node without an agent stream for this long is forgotten (unless
    // drained). Zero keeps nodes forever.
    absl::Duration node_expiry = absl::Hours(1);
    // Several controllers (docs/ha.md): where the durable state lives
    // (default: SQLite at db_path) and whether this one leads (default:
    // always). Followers refuse agent streams and API writes with
    // Unavailable naming the leader, and run no detection cycles.
    std::function<absl::StatusOr<std::unique_ptr<FaultStore>>()> open_store;
    Leadership* leadership = nullptr;  // not owned
    // Agent batches that find the ingest lock busy (a detection cycle, a
    // query) are queued (ingest/ingest_inbox.h) instead of waiting; their
    // stream learns each batch's status from a completion
    // (SubmitAgentBatch). False: batches wait for the lock.
    bool ingest_off_lock = true;
    // The detectors of a cycle run on a copy of what they read, without
    // the ingest lock (DetectionEngine::BeginCycle), so a batch never waits
    // for a detector; the lock is held to copy and to publish the verdicts,
    // letting go between communicators. False: the detectors run under the
    // lock (round 6, the benchmark's baseline). Durable writes never hold
    // it (docs/reliability.md, "Ingest off the lock").
    bool detect_off_lock = true;
    // Serialized bytes queued at most; beyond, batches wait for the lock.
    size_t ingest_inbox_bytes = 256 << 20;
    // Training processes whose records are accounted (records lost in
    // killed agents, nodes/record_loss.h) over all hosts; beyond, a new
    // process is not accounted (refused_total{what="processes"}).
    int64_t max_tracked_processes = 1 << 20;
    // Standby migration (docs/migration.md); its clock is `clock`.
    MigrationManager::Options migrate;
    // C4P flow planning (docs/planning.md): planning.fabric empty = off.
    // Its clock and store are the controller's.
    LivePlanner::Options planning;
  };

  // What the controller refused or dropped from agent input (also exported
  // as pitstop_controller_refused_total{what}).
  struct InputStats {
    uint64_t hosts_refused = 0;     // new hosts beyond max_hosts
    uint64_t nics_dropped = 0;      // NICs beyond kMaxNicsPerNode
    uint64_t counters_refused = 0;  // AgentCounters above kMaxCounter
    uint64_t claims_refused = 0;    // registrations losing to a live agent
    uint64_t sessions_superseded = 0;
    uint64_t streams_shed = 0;  // silent streams closed after node_grace
    uint64_t nodes_expired = 0;
    uint64_t members_refused = 0;  // engine budgets max_members*
    uint64_t comms_refused = 0;    // engine budgets max_comms*
    // Records an agent sent for another host's members, and deaths it
    // reported of ranks a live process on another host holds
    // (docs/reliability.md, "Trust model").
    uint64_t foreign_claims_refused = 0;
    uint64_t foreign_deaths_refused = 0;
    uint64_t batches_queued = 0;     // agent batches that did not wait
    uint64_t processes_refused = 0;  // max_tracked_processes
    // AgentLink batches refused unparsed: their parse cost passed
    // kMaxParsedBatchBytes (api/parse_cost.h).
    uint64_t batches_refused = 0;
  };

  // Opens the store (Internal naming the path on failure) and loads drains,
  // policies, trainer settings, migrations (leading alone) and the next
  // fault number from it.
  static absl::StatusOr<std::unique_ptr<Controller>> Create(Options options);
  ~Controller() override;

  void Start();
  void Stop();

  // --- AgentLink -------------------------------------------------------------
  // A stream registered; returns its session id. InvalidArgument naming
  // registration.host when empty. `sink` must outlive the session.
  absl::StatusOr<uint64_t> AgentConnected(const v1::NodeRegistration& reg,
                                          CommandSink* sink);
  // One batch of a registered stream (IngestService::SubmitAgentBatch):
  // `done` receives the batch's status — InvalidArgument names the first
  // bad item (the others are still taken), ResourceExhausted a refused
  // budget, FailedPrecondition a session that ended — once it was joined
  // and its parts for the other services applied, never with a lock held.
  void SubmitAgentBatch(uint64_t session, const v1::ConnectRequest* batch,
                        BatchDone done);
  // The same, waiting for the batch's status (tests, tools).
  absl::Status AgentBatch(uint64_t session, const v1::ConnectRequest& batch);
  void AgentDisconnected(uint64_t session);
  // A stream's batch was refused before it was parsed (too costly):
  // counted in InputStats and refused_total{what="batch_parse_cost"}.
  void BatchRefused();
  InputStats input_stats();

  // One detection cycle now (the loop calls this every cycle_period):
  // shedding silent agents, the engine, the faults stored and watchers
  // told, profiling requests, trainer policies, migrations.
  void RunCycle();

  // --- leadership (ha::HaController calls these) -----------------------------
  // Elected: every service forgets its soft state and reloads its durable
  // state from the store. Agents reconnect and rebuild the rest.
  absl::Status BecomeLeader() override;
  // Deposed or resigning: closes every agent stream with Unavailable `why`
  // (agents go find the leader), forgets the soft state, and ends client
  // watches naming the new leader once it is known.
  void StepDown(const std::string& why) override;

  // --- the Controller API's cross-service queries ---------------------------
  v1::ControllerStatus Status();
  std::vector<v1::Job> Jobs();
  absl::StatusOr<v1::Job> Job(const std::string& job_id);

  // --- the services
  // ------------------------------------------------------------
  IngestService& ingest() { return *ingest_; }
  FaultService& faults() { return *faults_; }
  NodeService& nodes() { return *nodes_; }
  TrainerPolicyService& trainers() { return *trainers_; }
  MigrationService& migration() { return *migration_; }
  PlanningService& planning() { return *planning_; }
  TrainerProfileService& profiles() { return *profiles_; }

 private:
  class Links;  // the small interfaces the services get (controller_links.cc)

  Controller(Options options, std::unique_ptr<FaultStore> store);
  // Creates the services that need the store's contents or can fail.
  absl::Status Init();
  void Loop();
  // The cycle's part for the trainer profiles: captures asked of the
  // agents, finished diffs stored on their faults (FaultService).
  void RunTrainerProfiles(const std::vector<v1::Fault>& open)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(cycle_mu_);

  const Options options_;
  std::atomic<uint64_t> batches_refused_{0};
  const std::unique_ptr<FaultStore> store_;
  const uint64_t start_unix_ns_;
  const std::unique_ptr<Links> links_;
  std::unique_ptr<FaultService> faults_;
  std::unique_ptr<NodeService> nodes_;
  std::unique_ptr<TrainerPolicyService> trainers_;
  std::unique_ptr<PlanningService> planning_;
  std::unique_ptr<MigrationService> migration_;
  std::unique_ptr<IngestService> ingest_;
  // Thread-safe itself (a leaf lock of its own; nothing is called under it).
  std::unique_ptr<TrainerProfileService> profiles_;

  // Serialises detection cycles (the loop, tests) and term changes: a new
  // leader does not replace the engine under a running cycle.
  Mutex cycle_mu_;
  // The profile table's refusals already counted in refused_total.
  TrainerProfileService::Stats profiles_counted_ ABSL_GUARDED_BY(cycle_mu_);

  Mutex loop_mu_;
  CondVar loop_cv_;
  bool stopping_ ABSL_GUARDED_BY(loop_mu_) = false;
  std::thread loop_;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_CONTROLLER_H_
