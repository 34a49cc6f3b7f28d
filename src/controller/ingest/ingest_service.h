// Ingest and detection (docs/architecture.md, "Services"; docs/reliability.md,
// "Ingest off the lock"): agent batches joined into the detection engine,
// and the engine's part of the detection cycle.
//
// Owns: the DetectionEngine (communicators, joins, windows, the fault
// tracker, job policies), the ingest inbox (batches that found the lock
// busy), what detection knows of each agent (its current session, when a
// batch of it was last joined, whether the engine was told NodeLost), and
// the cycle's counters.
//
// Locks: mu_ guards all of the above. Its holder joins the batches queued
// meanwhile before it lets go, and their completions run after it let go
// (IngestLock): a batch never waits for the lock holder's work to end, only
// for the step in progress. A cycle lets mu_ go between communicators and
// while the detectors run on the engine's copy. policy_mu_ keeps policy and
// job-host writes (held across the store write) and their effect in one
// order; order: policy_mu_, then mu_ (SetJobHosts lets mu_ go once without
// joining, as no completion may run under policy_mu_, and joins what queued
// meanwhile when it lets mu_ go at its end). No other service's lock is taken
// under either: a joined batch's parts for the other services run in its
// completion, after mu_ is let go (AfterJoin).
//
// Threads: SubmitAgentBatch from agent streams' threads; RunCycle from the
// controller's cycle (one at a time: the Controller serialises cycles and
// Reset with its cycle lock); the rest from any thread.
//
// Needs: the clock, metrics (optional), Leadership (policy writes refused on
// a follower), the store (policies, the hosts named per job), and an AfterJoin
// (the Controller: counters and command acks, trainer reports, flows, migration
// acks).
#ifndef PITSTOP_CONTROLLER_INGEST_INGEST_SERVICE_H_
#define PITSTOP_CONTROLLER_INGEST_INGEST_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pitstop/clock.h"
#include "pitstop/v1/agent.pb.h"
#include "pitstop/v1/controller.pb.h"
#include "src/controller/common/service_lock.h"
#include "src/controller/detect/detection_engine.h"
#include "src/controller/ingest/ingest_inbox.h"

namespace pitstop::controller {

class ControllerMetrics;
class FaultStore;
class Leadership;

// A joined batch's parts for the other services; called after the ingest
// lock is let go, before the batch's completion, on the thread that joined
// it. Returns the batch's status: the first error of the batch in the order
// a reader meets them (`engine_status` is the detection records' part).
class AfterJoin {
 public:
  virtual ~AfterJoin() = default;
  virtual absl::Status Joined(uint64_t session, const std::string& host,
                              const v1::ConnectRequest& batch,
                              absl::Status engine_status) = 0;
};

class IngestService {
 public:
  struct Options {
    Clock* clock = Clock::Real();
    FaultStore* store = nullptr;           // required, not owned
    Leadership* leadership = nullptr;      // not owned; null: always leads
    ControllerMetrics* metrics = nullptr;  // optional, not owned
    AfterJoin* after_join = nullptr;       // required, not owned
    DetectionEngine::Options engine;
    // An agent whose stream sent nothing for this long is treated like a
    // closed one by the detectors until it sends again. Zero: off.
    absl::Duration agent_silence = absl::ZeroDuration();
    // Batches that find the lock busy are queued instead of waiting.
    bool ingest_off_lock = true;
    // The detectors run on the engine's copy without the lock.
    bool detect_off_lock = true;
    // Serialized bytes queued at most; beyond, batches wait for the lock.
    size_t inbox_bytes = 256 << 20;
  };
  // What ingest and detection counted.
  struct Stats {
    uint64_t batches_queued = 0;  // agent batches that did not wait
    // Engine budgets (every share: cluster, host, job).
    uint64_t members_refused = 0;
    uint64_t comms_refused = 0;
    // Records for another host's members, deaths of another host's ranks.
    uint64_t claims_refused = 0;
    uint64_t deaths_refused = 0;
    uint32_t communicators = 0;
    uint64_t collectives_joined = 0;
    double last_cycle_ms = 0;
  };

  // A fresh engine with the store's policies and next fault number, and
  // `open` (when given: the faults open in the store) adopted, so the same
  // condition seen again updates them instead of opening duplicates.
  static absl::StatusOr<std::unique_ptr<DetectionEngine>> NewEngine(
      const Options& options, FaultStore* store,
      const std::vector<v1::Fault>* open);
  IngestService(Options options, std::unique_ptr<DetectionEngine> engine);
  IngestService(const IngestService&) = delete;
  IngestService& operator=(const IngestService&) = delete;

  // --- agent streams ---------------------------------------------------------
  // Joins what is queued (a new session may supersede a queued batch's).
  void Flush();
  // A stream registered as `session` (NodeService decided): the engine
  // learns the node; a superseded session of the host is forgotten.
  void SessionOpened(uint64_t session, const v1::NodeRegistration& reg);
  // The stream of `session` ended, after its queued batches were joined;
  // returns its host ("" when superseded or shed before).
  std::string SessionClosed(uint64_t session);
  // Sessions NodeService closed for silence (host, session) and hosts it
  // forgot.
  void SessionsGone(const std::vector<std::pair<std::string, uint64_t>>& shed,
                    const std::vector<std::string>& forgotten);
  // One batch of a session: joined at once when the lock is free, else
  // queued and joined by the next holder; `done` runs once, after the
  // AfterJoin parts, never with the lock held. FailedPrecondition for a
  // session that ended. `batch` must stay alive and unchanged until then.
  void SubmitAgentBatch(uint64_t session, const v1::ConnectRequest* batch,
                        BatchDone done);

  // --- the detection cycle (the Controller's cycle, one at a time) ----------
  // Faults operators resolved: the engine stops updating them.
  void ForgetFaults(const std::vector<std::string>& fault_ids);
  // Silence marks, the engine's cycle (yielding to batches between
  // communicators), metrics; the spent copies are freed without the lock.
  CycleResult RunCycle();
  // A committed migration replaced these communicators.
  void RetireComms(const std::vector<uint64_t>& comm_hashes,
                   const std::string& why);
  // A new term: `engine` replaces the engine; agents and counters start
  // afresh.
  void Reset(std::unique_ptr<DetectionEngine> engine);
  // Stepping down: every session ends (their batches are refused).
  void CloseSessions();

  // --- queries and policies (errors as in controller.proto) ----------------
  std::vector<v1::Communicator> Communicators(const std::string& job_id);
  absl::StatusOr<v1::Communicator> Communicator(uint64_t comm_hash);
  // Jobs with n_ranks, hosts, comm_hashes and policy (not open faults).
  std::vector<v1::Job> Jobs();
  absl::StatusOr<v1::JobPolicy> GetPolicy(const std::string& job_id);
  // Checked, stored, then set: a write the store refuses changes nothing.
  absl::StatusOr<v1::JobPolicy> SetPolicy(const std::string& job_id,
                                          const v1::JobPolicy& policy);
  // The resolved policy of a job (defaults for unknown jobs).
  v1::JobPolicy JobPolicy(const std::string& job_id);
  // The scheduler (`who`, kept with the naming) names a job's hosts
  // (DetectionEngine::SetJobHosts; the leader only); an empty list forgets
  // them. Checked, stored (so a restart or a new leader enforces them),
  // then set: a write the store refuses changes nothing. Returns them
  // sorted; errors of CheckJobHosts and CheckSchedulerName.
  absl::StatusOr<std::vector<std::string>> SetJobHosts(
      const std::string& job_id, const std::vector<std::string>& hosts,
      const std::string& who);
  // The hosts named for a job; empty when none are.
  std::vector<std::string> JobHosts(const std::string& job_id);
  Stats stats();
  // The inbox's counters; does not take the lock.
  IngestInbox::Stats inbox_stats() const { return inbox_.stats(); }

 private:
  // What detection knows of a host's agent.
  struct Liveness {
    uint64_t session = 0;  // 0 = not connected
    uint64_t last_seen_unix_ns = 0;
    bool lost = false;  // the engine was told NodeLost or NodeSilent
  };
  // A batch joined under the lock, waiting for its completion.
  struct Joined {
    BatchDone done;
    absl::Status status;  // the engine's part, or FailedPrecondition
    uint64_t session = 0;
    std::string host;  // empty: nothing was joined
    const v1::ConnectRequest* batch = nullptr;
  };
  // Takes mu_ for a scope and releases it with UnlockIngest().
  class ABSL_SCOPED_LOCKABLE IngestLock {
   public:
    explicit IngestLock(IngestService* s) ABSL_EXCLUSIVE_LOCK_FUNCTION(s->mu_);
    ~IngestLock() ABSL_UNLOCK_FUNCTION();
    IngestLock(const IngestLock&) = delete;
    IngestLock& operator=(const IngestLock&) = delete;

   private:
    IngestService* const s_;
  };

  // The session check and the engine's part of a batch.
  Joined ApplyBatch(uint64_t session, const v1::ConnectRequest* batch,
                    BatchDone done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After the lock: the other services' parts, then the completion.
  void Complete(Joined j);
  // Joins every queued batch, oldest first; completions wait in finished_.
  void DrainInbox() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drains, unlocks, runs the completions, and drains again what arrived
  // meanwhile when the lock is free.
  void UnlockIngest() ABSL_UNLOCK_FUNCTION(mu_);
  // Between communicators of a cycle: joins waiting batches and lets the
  // lock go while their completions run.
  void YieldToIngest() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Agents silent for longer than agent_silence: not judged until they
  // report again.
  void MarkSilent() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The engine's cycle (see RunCycle); the copies are left in `*spent`.
  CycleResult RunEngineLocked(std::unique_ptr<CycleWork>* spent)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counters and metrics of a finished cycle.
  void AfterCycle(const CycleResult& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NodeLost(const std::string& host, Liveness* l)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t NowUnixNs() const;

  const Options options_;
  ServiceMutex policy_mu_{"ingest", "policy_mu_"};
  IngestInbox inbox_;
  // The hand-off between a batch queued without the lock and a holder that
  // lets it go: both sides do one read-modify-write here between their
  // store (push / unlock) and their load (TryLock / inbox check). RMWs of
  // one atomic are totally ordered, so one side always sees the other's
  // store (a fence would do too, but TSan cannot model fences).
  std::atomic<uint64_t> ingest_handoff_{0};
  ServiceMutex mu_{"ingest", "mu_"};
  std::vector<Joined> finished_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<DetectionEngine> engine_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Liveness> liveness_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::string> sessions_ ABSL_GUARDED_BY(mu_);
  double last_cycle_ms_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t last_joined_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t batches_queued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t members_refused_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t comms_refused_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t claims_refused_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t deaths_refused_ ABSL_GUARDED_BY(mu_) = 0;
  // Engine refusals already added to refused_total{what}, by what.
  std::map<std::string, uint64_t> refused_last_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_INGEST_INGEST_SERVICE_H_
