// The controller's ingest and detection (the engine fed by agent streams,
// its cycle) and the wiring of the services that own the rest: faults
// (faults/), nodes and drains (nodes/), trainer policies (trainers/),
// planning (planning/), migration (migration/). The gRPC service classes are
// thin adapters; tests drive it directly too.
#ifndef PITSTOP_CONTROLLER_CONTROLLER_CORE_H_
#define PITSTOP_CONTROLLER_CONTROLLER_CORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pitstop/clock.h"
#include "pitstop/sync.h"
#include "pitstop/v1/agent.pb.h"
#include "pitstop/v1/controller.pb.h"
#include "src/controller/common/watch_hub.h"
#include "src/controller/controller_metrics.h"
#include "src/controller/detect/detection_engine.h"
#include "src/controller/faults/fault_service.h"
#include "src/controller/ha/leadership.h"
#include "src/controller/ingest_inbox.h"
#include "src/controller/migration/migration_service.h"
#include "src/controller/nodes/command_sink.h"
#include "src/controller/nodes/node_service.h"
#include "src/controller/planning/planning_service.h"
#include "src/controller/store/fault_store.h"
#include "src/controller/trainers/trainer_policy_service.h"

namespace pitstop::controller {

// Thread-safe: any method from any thread. Start() runs the detection loop
// on its own thread; Stop() (or the destructor) joins it.
class ControllerCore {
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
    SyncPolicyEngine::Options sync;        // per-job local-SGD switch policy
    LoraPolicyEngine::Options lora;        // per-job multi-LoRA rescheduling
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
    // Agent batches that find the lock busy (a detection cycle, a SQLite
    // write, a query) are queued (src/controller/ingest_inbox.h) instead of
    // waiting; their stream learns each batch's status from a completion
    // (SubmitAgentBatch). False: batches wait for the lock.
    bool ingest_off_lock = true;
    // The detectors of a cycle run on a copy of what they read, without
    // the lock (DetectionEngine::BeginCycle), so a batch never waits for a
    // detector; the lock is held to copy and to publish the verdicts,
    // letting go between communicators. False: the detectors run under the
    // lock (round 6, the benchmark's baseline). Durable writes never hold
    // the lock (docs/reliability.md, "Ingest off the lock").
    bool detect_off_lock = true;
    // Serialized bytes queued at most; beyond, batches wait for the lock.
    size_t ingest_inbox_bytes = 256 << 20;
    // Training processes whose records are accounted (records lost in
    // killed agents, record_loss.h) over all hosts; beyond, a new process
    // is not accounted (refused_total{what="processes"}).
    int64_t max_tracked_processes = 1 << 20;
    // Standby migration (docs/migration.md); its clock is `clock`.
    MigrationManager::Options migrate;
    // C4P flow planning (docs/planning.md): planning.fabric empty = off.
    // Its clock and store are the core's.
    LivePlanner::Options planning;
  };

  // What the core refused or dropped from agent input (also exported as
  // pitstop_controller_refused_total{what}).
  struct InputStats {
    uint64_t hosts_refused = 0;     // new hosts beyond max_hosts
    uint64_t nics_dropped = 0;      // NICs beyond kMaxNicsPerNode
    uint64_t counters_refused = 0;  // AgentCounters above kMaxCounter
    uint64_t claims_refused = 0;    // registrations losing to a live agent
    uint64_t sessions_superseded = 0;
    uint64_t streams_shed = 0;  // silent streams closed after node_grace
    uint64_t nodes_expired = 0;
    uint64_t members_refused = 0;    // engine budget max_members
    uint64_t comms_refused = 0;      // engine budget max_comms_per_host
    uint64_t batches_queued = 0;     // agent batches that did not wait
    uint64_t processes_refused = 0;  // max_tracked_processes
  };

  // Opens the store (Internal naming the path on failure) and loads drains,
  // policies and the next fault number from it.
  static absl::StatusOr<std::unique_ptr<ControllerCore>> Create(
      Options options);
  ~ControllerCore();

  void Start();
  void Stop();

  // --- AgentLink ---------------------------------------------------------
  // A stream registered; returns its session id. InvalidArgument naming
  // registration.host when empty. `sink` must outlive the session.
  absl::StatusOr<uint64_t> AgentConnected(const v1::NodeRegistration& reg,
                                          CommandSink* sink);
  // One batch of a registered stream: feeds the engine. `done` receives
  // the batch's status: InvalidArgument names the first bad item (the
  // others are still taken), ResourceExhausted a refused budget,
  // FailedPrecondition a session that ended (superseded or shed). Never
  // waits for a detection cycle or a disk write (ingest_off_lock): when
  // the lock is free the batch is joined and `done` runs before this
  // returns; otherwise the batch is queued and the next holder of the lock
  // joins it, in order, and runs `done` after releasing the lock (and
  // after the batch's parts for the other services: counters, trainer
  // reports, flows, migration acks). `batch` must stay alive and unchanged
  // until `done` runs; a stream sends its next batch only after (so a
  // stream's order holds).
  void SubmitAgentBatch(uint64_t session, const v1::ConnectRequest* batch,
                        BatchDone done);
  // The same, waiting for the batch's status (tests, tools).
  absl::Status AgentBatch(uint64_t session, const v1::ConnectRequest& batch);
  void AgentDisconnected(uint64_t session);
  InputStats input_stats();
  // The ingest inbox's counters; does not take the core's lock.
  IngestInbox::Stats inbox_stats() const { return inbox_.stats(); }

  // One detection cycle now (the loop calls this every cycle_period):
  // runs the engine, stores faults, notifies watchers, sends commands.
  void RunCycle();

  // --- Leadership (controller_ha.cc) --------------------------------------
  // Elected: forgets soft state, reloads drains, policies, open faults and
  // the next fault number from the store into a fresh detection engine.
  // Agents reconnect and rebuild the rest.
  absl::Status BecomeLeader();
  // Deposed or resigning: closes every agent stream with Unavailable `why`
  // (agents go find the leader) and forgets the soft state.
  void StepDown(const std::string& why);

  // --- Controller API (errors as in controller.proto) ---------------------
  v1::ControllerStatus Status();
  std::vector<v1::Node> Nodes() { return nodes_->Nodes(); }
  absl::StatusOr<v1::Node> Node(const std::string& host) {
    return nodes_->Node(host);
  }
  std::vector<v1::Job> Jobs();
  absl::StatusOr<v1::Job> Job(const std::string& job_id);
  std::vector<v1::Communicator> Communicators(const std::string& job_id);
  absl::StatusOr<v1::Communicator> Communicator(uint64_t comm_hash);
  absl::StatusOr<std::vector<v1::Fault>> Faults(const std::string& job_id,
                                                bool include_resolved,
                                                uint32_t limit) {
    return faults_->Faults(job_id, include_resolved, limit);
  }
  absl::StatusOr<v1::Fault> Fault(const std::string& fault_id) {
    return faults_->Fault(fault_id);
  }
  absl::StatusOr<v1::Fault> Acknowledge(const std::string& fault_id,
                                        const std::string& who,
                                        const std::string& note) {
    return faults_->Acknowledge(fault_id, who, note);
  }
  absl::StatusOr<v1::Fault> Resolve(const std::string& fault_id,
                                    const std::string& who,
                                    const std::string& note) {
    return faults_->Resolve(fault_id, who, note);
  }
  absl::StatusOr<v1::Node> Drain(const std::string& host,
                                 const std::string& reason) {
    return nodes_->Drain(host, reason);
  }
  absl::StatusOr<v1::Node> Uncordon(const std::string& host) {
    return nodes_->Uncordon(host);
  }
  absl::StatusOr<v1::JobPolicy> GetPolicy(const std::string& job_id);
  absl::StatusOr<v1::JobPolicy> SetPolicy(const std::string& job_id,
                                          const v1::JobPolicy& policy);

  // --- Trainer policies (TrainerPolicyService) ------------------------------
  absl::StatusOr<v1::JobSync> JobSync(const std::string& job_id) {
    return trainers_->JobSync(job_id);
  }
  absl::StatusOr<v1::SyncSettings> SetSyncPolicy(
      const std::string& job_id, const v1::SyncSettings& settings) {
    return trainers_->SetSyncPolicy(job_id, settings);
  }
  absl::StatusOr<v1::JobLora> JobLora(const std::string& job_id) {
    return trainers_->JobLora(job_id);
  }
  absl::StatusOr<v1::LoraSettings> SetLoraPolicy(
      const std::string& job_id, const v1::LoraSettings& settings) {
    return trainers_->SetLoraPolicy(job_id, settings);
  }

  // --- Standby migration (MigrationService, docs/migration.md) -------------
  absl::StatusOr<v1::Migration> MigrateNode(const v1::MigrateNodeRequest& req) {
    return migration_->MigrateNode(req);
  }
  absl::StatusOr<v1::Migration> GetMigration(const std::string& id) {
    return migration_->GetMigration(id);
  }
  std::vector<v1::Migration> ListMigrations(const std::string& job_id,
                                            bool include_finished) {
    return migration_->ListMigrations(job_id, include_finished);
  }
  std::vector<v1::StandbyNode> Standby() { return migration_->Standby(); }
  using MigrationWatchFn = MigrationService::WatchFn;
  uint64_t SubscribeMigrations(const std::string& job_id, bool include_existing,
                               MigrationWatchFn fn) {
    return migration_->Subscribe(job_id, include_existing, std::move(fn));
  }
  void UnsubscribeMigrations(uint64_t id) { migration_->Unsubscribe(id); }
  absl::StatusOr<uint64_t> SubscribeMigrationsClient(const std::string& job_id,
                                                     bool include_existing,
                                                     MigrationWatchFn fn,
                                                     WatchEndFn end) {
    return migration_->SubscribeClient(job_id, include_existing, std::move(fn),
                                       std::move(end));
  }

  // --- Flow path planning (PlanningService, docs/planning.md) ---------------
  absl::StatusOr<v1::FlowPlan> GetFlowPlan(const v1::GetFlowPlanRequest& r) {
    return planning_->GetFlowPlan(r);
  }
  absl::StatusOr<v1::ListLinksResponse> ListLinks(
      const v1::ListLinksRequest& r) {
    return planning_->ListLinks(r);
  }
  absl::StatusOr<v1::SetLinkHealthResponse> SetLinkHealth(
      const v1::SetLinkHealthRequest& r) {
    return planning_->SetLinkHealth(r);
  }
  std::map<std::string, uint64_t> RunPlanning() { return planning_->Run(); }

  // --- WatchFaults (FaultService) -------------------------------------------
  using WatchFn = FaultService::WatchFn;
  uint64_t Subscribe(const std::string& job_id, bool include_existing,
                     WatchFn fn) {
    return faults_->Subscribe(job_id, include_existing, std::move(fn));
  }
  void Unsubscribe(uint64_t id) { faults_->Unsubscribe(id); }
  absl::StatusOr<uint64_t> SubscribeClient(const std::string& job_id,
                                           bool include_existing, WatchFn fn,
                                           WatchEndFn end) {
    return faults_->SubscribeClient(job_id, include_existing, std::move(fn),
                                    std::move(end));
  }
  FaultService& faults() { return *faults_; }

 private:
  // What detection knows of a host's agent: its current session, when a
  // batch of it was last joined, and whether the engine was told NodeLost.
  struct Liveness {
    uint64_t session = 0;  // 0 = not connected
    uint64_t last_seen_unix_ns = 0;
    bool lost = false;
  };
  // A batch joined under the lock, waiting for its completion.
  struct Joined {
    BatchDone done;
    absl::Status status;  // the engine's part, or FailedPrecondition
    uint64_t session = 0;
    std::string host;  // empty: nothing was joined
    const v1::ConnectRequest* batch = nullptr;
  };

  ControllerCore(Options options, std::unique_ptr<FaultStore> store,
                 std::unique_ptr<DetectionEngine> engine);
  // AgentBatch's work under the lock: the session and the engine's part.
  Joined ApplyBatch(uint64_t session, const v1::ConnectRequest* batch,
                    BatchDone done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After the lock: the batch's parts for the other services (counters,
  // records and acks; trainer reports; flows; migration acks and deaths),
  // then its completion with the first error of them all, in that order.
  void Complete(Joined j);
  // Takes mu_ for a scope and releases it with UnlockIngest(): every
  // holder of the lock joins the batches queued meanwhile before it lets
  // go, and their completions run after (ingest_inbox.h).
  class ABSL_SCOPED_LOCKABLE CoreLock {
   public:
    explicit CoreLock(ControllerCore* core)
        ABSL_EXCLUSIVE_LOCK_FUNCTION(core->mu_);
    ~CoreLock() ABSL_UNLOCK_FUNCTION();
    CoreLock(const CoreLock&) = delete;
    CoreLock& operator=(const CoreLock&) = delete;

   private:
    ControllerCore* const core_;
  };
  // Joins every queued batch (ingest_inbox.h), oldest first; their
  // completions wait in finished_ for UnlockIngest().
  void DrainInbox() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drains, unlocks, runs the completions, and drains again what arrived
  // meanwhile when the lock is free, so a batch queued while the lock was
  // held does not wait for the next holder.
  void UnlockIngest() ABSL_UNLOCK_FUNCTION(mu_);
  // The engine's part of a cycle (shedding silent agents, the detectors,
  // profiling requests); with `yield` it joins queued batches between
  // communicators, letting the lock go meanwhile (YieldToIngest), and with
  // detect_off_lock also while the detectors run (on the engine's copy);
  // then the spent copies are left in `*spent`, for the caller to free
  // after letting the lock go.
  CycleResult RunEngineLocked(bool yield, std::unique_ptr<CycleWork>* spent)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The sessions NodeService closed and the hosts it forgot, for the engine.
  void ApplyGone(const NodeService::Gone& gone)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Shedding silent agents and silence marks before a cycle.
  void PrepareCycle() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Metrics, counters and profiling requests of a finished cycle.
  void AfterCycle(const CycleResult& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void YieldToIngest() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stores a cycle's faults (FaultService), then (under mu_) tells the
  // engine about the ones the store ignored.
  void StoreFaults(const std::vector<v1::Fault>& faults);
  void Loop();
  // OK without Leadership or while leading; Unavailable naming the leader.
  absl::Status CheckLeader() const;
  void SendProfiling(const ProfilingRequest& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t NowUnixNs() const;
  // Creates planning_ (off when options_.planning names no fabric) and
  // feeds it the fault event stream.
  absl::Status StartPlanning();

  // The services' small interfaces over each other (controller_links.cc).
  class TrainerLink final : public DirectiveSender {
   public:
    explicit TrainerLink(ControllerCore* core) : core_(core) {}
    bool SendTrainerDirective(const std::string& host,
                              const v1::TrainerDirective& d) override;

   private:
    ControllerCore* const core_;
  };
  class PlanningLink final : public PathDirectiveSender {
   public:
    explicit PlanningLink(ControllerCore* core) : core_(core) {}
    Sent SendPathDirective(const std::string& host,
                           const v1::PathDirective& d) override;

   private:
    ControllerCore* const core_;
  };
  class MigrationLinks final : public MigrationService::Detection,
                               public MigrationService::Nodes,
                               public MigrationService::Faults {
   public:
    explicit MigrationLinks(ControllerCore* core) : core_(core) {}
    std::vector<v1::Communicator> Communicators() override;
    v1::JobPolicy JobPolicy(const std::string& job_id) override;
    void RetireComms(const std::vector<uint64_t>& comm_hashes,
                     const std::string& why) override;
    std::vector<NodeFacts> ListFacts(bool standby_only) override;
    bool SendMigration(const std::string& host,
                       const v1::MigrationDirective& d) override;
    void DrainMigrated(const std::string& host,
                       const std::string& why) override;
    absl::StatusOr<std::vector<v1::Fault>> OpenFaults() override;
    absl::StatusOr<v1::Fault> Fault(const std::string& id) override;
    void MarkMitigating(const v1::Fault& f, const std::string& why) override;

   private:
    ControllerCore* const core_;
  };

  const Options options_;
  const std::unique_ptr<FaultStore> store_;
  // The services; each thread-safe itself, with its own locks (taken after
  // mu_ where the core still calls them under mu_: never the other way).
  const std::unique_ptr<FaultService> faults_;
  const std::unique_ptr<NodeService> nodes_;
  TrainerLink trainer_link_{this};
  const std::unique_ptr<TrainerPolicyService> trainers_;
  PlanningLink planning_link_{this};
  std::unique_ptr<PlanningService> planning_;  // set in Create
  MigrationLinks migration_links_{this};
  const std::unique_ptr<MigrationService> migration_;
  const uint64_t start_unix_ns_;

  // Durable writes (policies) go to the store without mu_, so agent
  // batches are not joined behind a disk sync or an etcd round trip;
  // write_mu_ keeps them and their effect on the state in one order. A
  // detection cycle holds cycle_mu_ throughout (it lets mu_ go between
  // communicators and while storing its faults); BecomeLeader takes it
  // before replacing the engine. Lock order: cycle_mu_, write_mu_, mu_.
  Mutex cycle_mu_ ABSL_ACQUIRED_BEFORE(write_mu_);
  Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);

  IngestInbox inbox_;
  // The hand-off between a batch queued without the lock and a holder that
  // lets it go: both sides do one read-modify-write here between their
  // store (push / unlock) and their load (TryLock / inbox check). RMWs of
  // one atomic are totally ordered, so one side always sees the other's
  // store (a fence would do too, but TSan cannot model fences).
  std::atomic<uint64_t> ingest_handoff_{0};
  Mutex mu_;
  // Batches joined under the lock, completed by UnlockIngest().
  std::vector<Joined> finished_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<DetectionEngine> engine_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Liveness> liveness_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::string> sessions_ ABSL_GUARDED_BY(mu_);
  double last_cycle_ms_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t last_joined_ ABSL_GUARDED_BY(mu_) = 0;
  InputStats input_ ABSL_GUARDED_BY(mu_);

  Mutex loop_mu_;
  CondVar loop_cv_;
  bool stopping_ ABSL_GUARDED_BY(loop_mu_) = false;
  std::thread loop_;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_CONTROLLER_CORE_H_
