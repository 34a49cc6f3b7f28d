// The controller's state and logic behind its two gRPC services: the
// detection engine fed by agent streams, the fault store, node registry,
// drains, policies and fault watchers. The gRPC service classes are thin
// adapters over this class; tests drive it directly too.
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
#include "src/controller/commands/command_ledger.h"
#include "src/controller/controller_metrics.h"
#include "src/controller/detect/detection_engine.h"
#include "src/controller/ha/leadership.h"
#include "src/controller/ingest_inbox.h"
#include "src/controller/lora/lora_policy.h"
#include "src/controller/migrate/migration_manager.h"
#include "src/controller/planning/live_planner.h"
#include "src/controller/profiling/trainer_profiles.h"
#include "src/controller/record_loss.h"
#include "src/controller/store/fault_store.h"
#include "src/controller/sync/sync_policy.h"

namespace pitstop::controller {

// Where the core sends commands for one agent stream. Send() must not block
// (implementations queue); it is called with the core's lock held.
class CommandSink {
 public:
  virtual ~CommandSink() = default;
  virtual void Send(const v1::ConnectResponse& response) = 0;
  // Ends the stream with `why` (its session was superseded or it went
  // silent), so the agent notices and reconnects. Must not block; called
  // with the core's lock held.
  virtual void Close(const absl::Status& why) { (void)why; }
};

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
    // Agent batches that find the lock busy (a detection cycle, a SQLite
    // write, a query) are queued (src/controller/ingest_inbox.h) instead of
    // waiting; their stream learns each batch's status from a completion
    // (SubmitAgentBatch). False: batches wait for the lock.
    bool ingest_off_lock = true;
    // Nothing slow under the lock either (docs/reliability.md, "Ingest off
    // the lock"): a detection cycle lets the lock go between communicators
    // to join queued batches, and durable writes (the cycle's faults,
    // acknowledgements, drains, policies) go to the store without it, in
    // order. False: the cycle and the writes hold the lock throughout (the
    // benchmark's baseline).
    bool join_off_lock = true;
    // With join_off_lock: the detectors of a cycle run on a copy of what
    // they read, without the lock (DetectionEngine::BeginCycle), so a batch
    // never waits for a detector; the lock is held to copy and to publish
    // the verdicts, letting go between communicators. False: the detectors
    // run under the lock (round 6, the benchmark's baseline).
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
  // joins it, in order, and runs `done` after releasing the lock. `batch`
  // must stay alive and unchanged until `done` runs; a stream sends its
  // next batch only after (so a stream's order holds).
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
  std::vector<v1::Node> Nodes();
  absl::StatusOr<v1::Node> Node(const std::string& host);
  std::vector<v1::Job> Jobs();
  absl::StatusOr<v1::Job> Job(const std::string& job_id);
  std::vector<v1::Communicator> Communicators(const std::string& job_id);
  absl::StatusOr<v1::Communicator> Communicator(uint64_t comm_hash);
  absl::StatusOr<std::vector<v1::Fault>> Faults(const std::string& job_id,
                                                bool include_resolved,
                                                uint32_t limit);
  absl::StatusOr<v1::Fault> Fault(const std::string& fault_id);
  absl::StatusOr<v1::Fault> Acknowledge(const std::string& fault_id,
                                        const std::string& who,
                                        const std::string& note);
  absl::StatusOr<v1::Fault> Resolve(const std::string& fault_id,
                                    const std::string& who,
                                    const std::string& note);
  absl::StatusOr<v1::Node> Drain(const std::string& host,
                                 const std::string& reason);
  absl::StatusOr<v1::Node> Uncordon(const std::string& host);
  absl::StatusOr<v1::JobPolicy> GetPolicy(const std::string& job_id);
  absl::StatusOr<v1::JobPolicy> SetPolicy(const std::string& job_id,
                                          const v1::JobPolicy& policy);

  // --- Sync policy (controller_sync.cc) ------------------------------------
  // NotFound for a job with no reporting trainers and no settings.
  absl::StatusOr<v1::JobSync> JobSync(const std::string& job_id);
  absl::StatusOr<v1::SyncSettings> SetSyncPolicy(
      const std::string& job_id, const v1::SyncSettings& settings);

  // --- Multi-LoRA rescheduling policy (controller_lora.cc) -----------------
  // NotFound for a job without multi-LoRA trainer reports.
  absl::StatusOr<v1::JobLora> JobLora(const std::string& job_id);
  absl::StatusOr<v1::LoraSettings> SetLoraPolicy(
      const std::string& job_id, const v1::LoraSettings& settings);

  // --- Standby migration (controller_migrate.cc, docs/migration.md) -------
  // FailedPrecondition / InvalidArgument say why a request cannot be
  // served; a second migration of a job is returned QUEUED.
  absl::StatusOr<v1::Migration> MigrateNode(const v1::MigrateNodeRequest& req);
  absl::StatusOr<v1::Migration> GetMigration(const std::string& id);
  std::vector<v1::Migration> ListMigrations(const std::string& job_id,
                                            bool include_finished);
  std::vector<v1::StandbyNode> Standby();
  using MigrationWatchFn =
      std::function<void(const v1::WatchMigrationsResponse&)>;
  // As Subscribe, for migration changes (include_existing: the unfinished
  // ones first).
  uint64_t SubscribeMigrations(const std::string& job_id, bool include_existing,
                               MigrationWatchFn fn);
  void UnsubscribeMigrations(uint64_t id);

  // --- Flow path planning (controller_planning.cc, docs/planning.md) -------
  // FailedPrecondition when planning is off (no fabric); else as
  // LivePlanner's.
  absl::StatusOr<v1::FlowPlan> GetFlowPlan(const v1::GetFlowPlanRequest& r);
  absl::StatusOr<v1::ListLinksResponse> ListLinks(
      const v1::ListLinksRequest& r);
  // Marks the links, re-plans the jobs crossing them at once (off the
  // core's lock) and sends the new plans to their agents.
  absl::StatusOr<v1::SetLinkHealthResponse> SetLinkHealth(
      const v1::SetLinkHealthRequest& r);
  // One planning pass now (the loop runs one after every cycle): plans
  // what changed, then sends the directives. Returns job -> new epoch.
  std::map<std::string, uint64_t> RunPlanning();

  // --- WatchFaults --------------------------------------------------------
  using WatchFn = std::function<void(const v1::WatchFaultsResponse&)>;
  // Calls `fn` (with the core's lock held; it must not block or call back)
  // for every fault change of `job_id` ("" = all); with include_existing,
  // first for every open fault. Returns an id for Unsubscribe.
  uint64_t Subscribe(const std::string& job_id, bool include_existing,
                     WatchFn fn);
  void Unsubscribe(uint64_t id);

  // --- Watch streams of clients (controller_ha.cc) --------------------------
  // Ends a client's watch stream (the gRPC reactor's Finish); called with
  // the core's lock held, so it must not block or call back.
  using WatchEndFn = std::function<void(const absl::Status&)>;
  // As Subscribe / SubscribeMigrations, for a client's stream: refused with
  // Unavailable naming the leader on a follower (it runs no detection, so a
  // watch there would stay silent). When this controller steps down, every
  // such watch is ended with `end`: Unavailable naming the new leader
  // ("leader=HOST:PORT") once it is known, at most kWatchEndWait later, so
  // pitstopctl and schedulers re-follow the leader. Unsubscribe /
  // UnsubscribeMigrations with the id as usual.
  static constexpr absl::Duration kWatchEndWait = absl::Seconds(5);
  absl::StatusOr<uint64_t> SubscribeClient(const std::string& job_id,
                                           bool include_existing, WatchFn fn,
                                           WatchEndFn end);
  absl::StatusOr<uint64_t> SubscribeMigrationsClient(const std::string& job_id,
                                                     bool include_existing,
                                                     MigrationWatchFn fn,
                                                     WatchEndFn end);

 private:
  struct NodeEntry {
    v1::NodeRegistration registration;
    uint64_t session = 0;  // 0 = not connected
    CommandSink* sink = nullptr;
    uint64_t last_seen_unix_ns = 0;
    uint32_t connected_ranks = 0;
    uint64_t plugin_dropped = 0;
    uint64_t undelivered = 0;  // counters.undelivered (lost in agents)
    RecordLossLedger records;  // records lost in killed agents
    bool lost = false;         // the engine was told NodeLost
  };
  struct Watcher {
    std::string job_id;
    WatchFn fn;
    WatchEndFn end;  // set for a client's stream (SubscribeClient)
  };

  ControllerCore(Options options, std::unique_ptr<FaultStore> store,
                 std::unique_ptr<DetectionEngine> engine);
  // AgentBatch's work under the lock.
  absl::Status ApplyBatch(uint64_t session, const v1::ConnectRequest& batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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
  // Shedding silent agents and silence marks before a cycle.
  void PrepareCycle() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Metrics, counters and profiling requests of a finished cycle.
  void AfterCycle(const CycleResult& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void YieldToIngest() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stores a cycle's faults, then (under mu_) tells the engine about the
  // ones the store ignored and notifies watchers. Called holding write_mu_;
  // with join_off_lock also holding mu_ (the old way), else without it.
  void StoreFaults(const std::vector<v1::Fault>& faults)
      ABSL_NO_THREAD_SAFETY_ANALYSIS;
  void Loop();
  // OK without Leadership or while leading; Unavailable naming the leader.
  absl::Status CheckLeader() const;
  // Subscribe / SubscribeMigrations under the lock; `end` null for a
  // watcher inside the controller (fault actions, metrics).
  uint64_t AddWatcher(const std::string& job_id, bool include_existing,
                      WatchFn fn, WatchEndFn end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t AddMigrationWatcher(const std::string& job_id, bool include_existing,
                               MigrationWatchFn fn, WatchEndFn end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the client watches to ending_watches_ (StepDown).
  void DetachClientWatches(const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends ending_watches_ once the leader is known (or `now`, or past
  // ending_deadline_) with Unavailable naming it.
  void EndFormerWatches(bool now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drain (`reason` set) or Uncordon `host`.
  absl::StatusOr<v1::Node> ChangeDrain(const std::string& host,
                                       const std::string* reason);
  // Runs a store write without mu_ (join_off_lock), or holding it (the old
  // way). Callers hold write_mu_, so writes and their effects keep one
  // order.
  absl::Status Durable(const std::function<absl::Status()>& write);
  // Acknowledge (resolve = false) or Resolve, then notify watchers.
  absl::StatusOr<v1::Fault> MoveFault(const std::string& fault_id,
                                      const std::string& who,
                                      const std::string& note, bool resolve);
  v1::Node ToNode(const std::string& host, const NodeEntry* e) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Notify(v1::WatchFaultsResponse::Change change, const v1::Fault& f)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendProfiling(const ProfilingRequest& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes `cmd` (its command_id set) to `host`'s agent stream and, for a
  // command the agent acks, keeps it until the ack (commands_): it is
  // written again when the agent reconnects, and waits for a known host's
  // agent that is not connected now. False when it was not written now.
  bool SendToAgent(const std::string& host, const v1::AgentCommand& cmd)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A new stream of `host`: the commands its agent has not acked.
  void ResendUnacked(const std::string& host, CommandSink* sink)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishCommandCounts() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t NowUnixNs() const;
  // Closes agent streams silent for longer than node_grace and forgets
  // nodes gone for longer than node_expiry.
  void ShedAndExpire() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CountRefused(const char* what, uint64_t* counter, uint64_t n = 1)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Feeds batch.process_records to the host's RecordLossLedger.
  void AccountRecords(const std::string& host, NodeEntry* node,
                      const v1::ConnectRequest& batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The trainer policies' cycle (sync, then multi-LoRA) on one read of the
  // open faults (read by the caller, without the lock).
  void RunTrainerPolicies(const absl::StatusOr<std::vector<v1::Fault>>& open)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends a trainer directive to each of `hosts`' agents; logs the ones not
  // connected (`what` names the directive in the log).
  void SendTrainerDirective(const std::string& job_id,
                            const std::vector<std::string>& hosts,
                            const v1::TrainerDirective& directive,
                            const char* what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sync policy cycle: evaluates and sends directives to the job's agents.
  void RunSyncPolicy(const std::vector<v1::Fault>& open)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fills Job.sync and adds jobs known only from trainer reports.
  void AddSyncJobs(std::vector<v1::Job>* jobs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The trainer policies' settings as stored (SetSyncPolicy /
  // SetLoraPolicy), read at start and when this controller becomes leader.
  struct TrainerSettings {
    std::map<std::string, v1::SyncSettings> sync;
    std::map<std::string, v1::LoraSettings> lora;
  };
  absl::StatusOr<TrainerSettings> ReadTrainerSettings() const;
  // Sets them on the engines; one the engine refuses is logged and skipped.
  static void ApplyTrainerSettings(const TrainerSettings& t,
                                   SyncPolicyEngine* sync,
                                   LoraPolicyEngine* lora);
  // torch.profiler diffs of slow ranks (src/controller/profiling/): asks
  // trainers for captures and stores the finished diffs on their faults.
  // Takes write_mu_ and mu_ itself (controller_sync.cc).
  void RunTrainerProfiles(const std::vector<v1::Fault>& open);
  // Multi-LoRA policy cycle and Job.lora (controller_lora.cc).
  void RunLoraPolicy(const std::vector<v1::Fault>& open)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddLoraJobs(std::vector<v1::Job>* jobs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Migration directives to agent streams (controller_migrate.cc); called
  // by the manager with the core's lock held.
  class MigrationLink final : public MigrationSender {
   public:
    explicit MigrationLink(ControllerCore* core) : core_(core) {}
    bool SendMigration(const std::string& host,
                       const v1::MigrationDirective& d) override;

   private:
    ControllerCore* const core_;
  };
  // Creates planner_ when options_.planning names a fabric (logs that
  // planning is off otherwise).
  absl::Status StartPlanning();
  // (Re)creates the migration manager from the store (Create, BecomeLeader).
  absl::Status LoadMigrations() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Resolves a MigrateNode request against the nodes, the engine's
  // communicators and the standby pool.
  absl::StatusOr<MigrationPlan> PlanMigration(const v1::MigrateNodeRequest& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<v1::StandbyNode> StandbyLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Agent input for migrations: acks and rank deaths of a batch.
  absl::Status MigrationInput(const std::string& host,
                              const v1::ConnectRequest& batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Timeouts, then policy ACT: a CONFIRMED GPU/NIC/node fault of an ACT
  // job starts a migration when a standby is free.
  void RunMigrations() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A committed migration: its fault becomes MITIGATING, the leaver is
  // drained, and the communicators it replaced are retired from detection.
  void MigrationFinished(const v1::Migration& m)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every open fault whose first suspect is a host its job was migrated off
  // (and not back to) becomes MITIGATING: a hand-started migration names no
  // fault, and a fault may be stored after the commit.
  void MitigateMigratedFaults() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SUSPECTED/CONFIRMED/ACKNOWLEDGED -> MITIGATING with `why`; stored and
  // watchers told. Other states are left.
  void MarkMitigating(v1::Fault f, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const std::unique_ptr<FaultStore> store_;
  // Null when planning is off; set in Create, thread-safe itself.
  std::unique_ptr<LivePlanner> planner_;
  const uint64_t start_unix_ns_;

  // Durable writes (faults of a cycle, acknowledgements, drains, policies,
  // trainer settings) go to the store without mu_, so agent batches are not
  // joined behind a disk sync or an etcd round trip; write_mu_ keeps them
  // and their effect on the state in one order. A detection cycle holds
  // cycle_mu_ throughout (it lets mu_ go between communicators and while
  // storing its faults); BecomeLeader takes it before replacing the engine.
  // Lock order: cycle_mu_, write_mu_, mu_.
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
  // Completions of batches joined under the lock, run by UnlockIngest().
  std::vector<std::pair<BatchDone, absl::Status>> finished_
      ABSL_GUARDED_BY(mu_);
  std::unique_ptr<DetectionEngine> engine_ ABSL_GUARDED_BY(mu_);
  // One directive-id sequence per job for both trainer policies.
  DirectiveIds directive_ids_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<SyncPolicyEngine> sync_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<LoraPolicyEngine> lora_ ABSL_GUARDED_BY(mu_);
  // Thread-safe itself (a leaf lock).
  std::unique_ptr<TrainerProfileService> profiles_;
  std::map<std::string, NodeEntry> nodes_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::string> sessions_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> drains_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Watcher> watchers_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Starts at the controller's start time in microseconds, so a restarted
  // controller never reuses an id an agent has applied (agents apply an id
  // once).
  uint64_t next_command_id_ ABSL_GUARDED_BY(mu_) = 1;
  CommandLedger commands_ ABSL_GUARDED_BY(mu_);
  double last_cycle_ms_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t last_joined_ ABSL_GUARDED_BY(mu_) = 0;
  InputStats input_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<MigrationLink> migration_link_;
  // Null on a follower until it leads.
  std::unique_ptr<MigrationManager> migrations_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> act_refused_ ABSL_GUARDED_BY(mu_);  // logged once
  struct MigrationWatcher {
    std::string job_id;
    MigrationWatchFn fn;
    WatchEndFn end;  // set for a client's stream
  };
  std::map<uint64_t, MigrationWatcher> migration_watchers_ ABSL_GUARDED_BY(mu_);
  // Client watches of the term this controller lost, waiting to be ended
  // naming the new leader (EndFormerWatches), by subscription id.
  std::map<uint64_t, WatchEndFn> ending_watches_ ABSL_GUARDED_BY(mu_);
  std::string ending_why_ ABSL_GUARDED_BY(mu_);
  absl::Time ending_deadline_ ABSL_GUARDED_BY(mu_);
  int64_t process_budget_ ABSL_GUARDED_BY(mu_);

  Mutex loop_mu_;
  CondVar loop_cv_;
  bool stopping_ ABSL_GUARDED_BY(loop_mu_) = false;
  std::thread loop_;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_CONTROLLER_CORE_H_
