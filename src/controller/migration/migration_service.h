// Standby migration (docs/migration.md): the migration state machine
// (migration_manager.h, persisted in the store), requests resolved against
// the job's communicators, its nodes and the standby pool, the agents'
// acknowledgements and rank deaths, migration watchers, policy ACT (a
// CONFIRMED GPU/NIC/node fault of a job whose policy is ACT migrates its
// host when a standby is free), and what follows a commit: the leaver
// drained, the replaced communicators retired from detection, the faults
// that blame the leaver MITIGATING.
//
// Owns: the MigrationManager (and through it every migration record in the
// store: to persist migrations differently, change the manager's Persist
// and the store's SaveMigration/Migrations), the migration watchers, which
// hosts' agents are connected as far as migrations know (told by the
// controller: OnHostUp/OnHostDown/HostGone), and the effects waiting to be
// applied outside the lock (the outbox).
//
// Locks: mu_ guards all of the above and is held while the manager runs
// (its store writes included) and while watchers are called. Directives and
// a commit's effects on other services are queued under mu_ and applied
// after it is released, in order, by one thread at a time (Flush): no other
// service's lock is ever taken under mu_. A reader (GetMigration,
// ListMigrations) first waits until the effects queued before it are
// applied (Settle), so a migration it sees COMMITTED has its leaver drained
// and its faults MITIGATING, as when one lock covered both; settle_mu_ (a
// plain leaf lock, nothing is called under it) guards that count.
//
// Threads: any method from any thread; RunCycle from the controller's
// cycle.
//
// Needs (small interfaces, called without mu_): Detection (communicators,
// job policies, retiring replaced communicators), Nodes (node facts,
// directives to agents, the leaver's drain), Faults (open faults, marking
// them MITIGATING); the store, the clock, Leadership; optionally
// PolicyActions (counted) and, in the manager's options, MigrationEvents
// (migration_metrics.h).
#ifndef PITSTOP_CONTROLLER_MIGRATION_MIGRATION_SERVICE_H_
#define PITSTOP_CONTROLLER_MIGRATION_MIGRATION_SERVICE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "pitstop/clock.h"
#include "pitstop/sync.h"
#include "pitstop/v1/agent.pb.h"
#include "pitstop/v1/controller.pb.h"
#include "src/controller/common/policy_actions.h"
#include "src/controller/common/service_lock.h"
#include "src/controller/common/watch_hub.h"
#include "src/controller/migration/migration_manager.h"
#include "src/controller/nodes/node_facts.h"

namespace pitstop::controller {

class FaultStore;
class Leadership;

class MigrationService {
 public:
  // What migrations ask of detection (IngestService).
  class Detection {
   public:
    virtual ~Detection() = default;
    virtual std::vector<v1::Communicator> Communicators() = 0;
    virtual v1::JobPolicy JobPolicy(const std::string& job_id) = 0;
    // The hosts the scheduler named for the job (SetJobHosts); empty when
    // it named none. Only they become members of the job's migrations.
    virtual std::vector<std::string> JobHosts(const std::string& job_id) {
      (void)job_id;
      return {};
    }
    virtual void SetJobHosts(const std::string& job_id,
                             const std::vector<std::string>& hosts) {
      (void)job_id;
      (void)hosts;
    }
    // A committed migration replaced these communicators.
    virtual void RetireComms(const std::vector<uint64_t>& comm_hashes,
                             const std::string& why) = 0;
  };
  // What migrations ask of the node registry (NodeService).
  class Nodes {
   public:
    virtual ~Nodes() = default;
    virtual std::vector<NodeFacts> ListFacts(bool standby_only) = 0;
    // False when `host`'s agent is not connected.
    virtual bool SendMigration(const std::string& host,
                               const v1::MigrationDirective& d) = 0;
    virtual void DrainMigrated(const std::string& host,
                               const std::string& why) = 0;
  };
  // What migrations ask of the fault records (FaultService).
  class Faults {
   public:
    virtual ~Faults() = default;
    virtual absl::StatusOr<std::vector<v1::Fault>> OpenFaults() = 0;
    virtual absl::StatusOr<v1::Fault> Fault(const std::string& id) = 0;
    virtual void MarkMitigating(const v1::Fault& f, const std::string& why) = 0;
  };
  struct Options {
    Clock* clock = Clock::Real();
    FaultStore* store = nullptr;        // required, not owned
    Leadership* leadership = nullptr;   // not owned; null: always leads
    MigrationManager::Options manager;  // its clock is `clock`
    Detection* detection = nullptr;     // required, not owned
    Nodes* nodes = nullptr;             // required, not owned
    Faults* faults = nullptr;           // required, not owned
    // Told of policy ACT's migrations and the leavers' drains; optional,
    // not owned.
    PolicyActions* policy_actions = nullptr;
  };

  // Not leading until Load().
  explicit MigrationService(Options options);
  MigrationService(const MigrationService&) = delete;
  MigrationService& operator=(const MigrationService&) = delete;

  // --- leadership ------------------------------------------------------------
  // (Re)creates the manager from the store (a start, a new leader):
  // unfinished migrations resume or abort. Internal when the store cannot
  // be read.
  absl::Status Load();
  // Stepping down: the next leader drives the migrations from the store;
  // client watches wait to be ended naming it.
  void StepDown(const std::string& why);
  // Ends them once the leader is known (or `now`, or past the wait).
  void EndFormerWatches(bool now);

  // --- the Controller API (errors as in controller.proto) -------------------
  // FailedPrecondition / InvalidArgument say why a request cannot be
  // served; a second migration of a job is returned QUEUED.
  absl::StatusOr<v1::Migration> MigrateNode(const v1::MigrateNodeRequest& req);
  absl::StatusOr<v1::Migration> GetMigration(const std::string& id);
  std::vector<v1::Migration> ListMigrations(const std::string& job_id,
                                            bool include_finished);
  std::vector<v1::StandbyNode> Standby();

  // --- the migration event stream -----------------------------------------
  using WatchFn = std::function<void(const v1::WatchMigrationsResponse&)>;
  // Calls `fn` (with mu_ held: it must not block or call a service) for
  // every migration change of `job_id` ("" = all); include_existing: the
  // unfinished ones first.
  uint64_t Subscribe(const std::string& job_id, bool include_existing,
                     WatchFn fn);
  // For a client's WatchMigrations stream (as FaultService::SubscribeClient).
  absl::StatusOr<uint64_t> SubscribeClient(const std::string& job_id,
                                           bool include_existing, WatchFn fn,
                                           WatchEndFn end);
  void Unsubscribe(uint64_t id);

  // --- agents and the controller's cycle ------------------------------------
  // A joined batch of `host`'s agent: rank deaths and migration acks.
  // InvalidArgument names the first bad ack ("migration_acks[i]: ...").
  absl::Status OnBatch(const std::string& host,
                       const v1::ConnectRequest& batch);
  // `host`'s agent connected: it gets the current phase's directive again.
  void OnHostUp(const std::string& host);
  // `host`'s agent stream was lost (a member lost aborts its migration).
  void OnHostDown(const std::string& host);
  // `host`'s stream was closed for silence or the registry forgot it: its
  // agent is not connected (no abort: a new stream may come).
  void HostGone(const std::string& host);
  // Phase timeouts, faults stored after a commit, then policy ACT.
  void RunCycle();

 private:
  struct Committed {
    v1::Migration migration;
  };
  struct Directive {
    std::string host;
    v1::MigrationDirective directive;
  };
  using Effect = std::variant<Directive, Committed>;

  // The manager's sender: queues the directive (sent by Flush) and answers
  // from connected_ (called with mu_ held).
  class Outbox final : public MigrationSender {
   public:
    explicit Outbox(MigrationService* s) : s_(s) {}
    bool SendMigration(const std::string& host,
                       const v1::MigrationDirective& d) override;

   private:
    MigrationService* const s_;
  };
  // The pool as of `standbys` (NodeFacts with standby set) and the
  // communicators' members.
  std::vector<v1::StandbyNode> Pool(const std::vector<NodeFacts>& standbys,
                                    const std::vector<v1::Communicator>& comms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Resolves a request against the nodes, the communicators and the pool.
  // `scheduled`: the hosts the scheduler named for the job (empty: none);
  // only they become members (issue #33 R21-6).
  absl::StatusOr<MigrationPlan> Plan(const v1::MigrateNodeRequest& r,
                                     const std::vector<NodeFacts>& nodes,
                                     const std::vector<v1::Communicator>& comms,
                                     const std::vector<std::string>& scheduled)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A started migration of a job whose hosts the scheduler named: its
  // joiner (a standby the controller chose) is named too, so that the
  // job's records from there are taken. Without mu_.
  void NameJoiner(const v1::Migration& m, std::vector<std::string> scheduled);
  uint64_t AddWatcher(const std::string& job_id, bool include_existing,
                      WatchFn fn, WatchEndFn end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies the queued effects in order, without mu_; one thread at a time
  // (another caller's effects are applied by the thread already flushing).
  void Flush();
  // Flushes, then waits until every effect queued so far was applied (or
  // dropped by StepDown), by whichever thread flushes it.
  void Settle();
  // The effects through `seq` are applied (or dropped).
  void Applied(uint64_t seq);
  // A committed migration: the communicators it replaced are retired from
  // detection, the leaver is drained, its fault and the job's other faults
  // that blame the leaver become MITIGATING.
  void Finished(const v1::Migration& m);
  // Every open fault whose first suspect is a host its job was migrated off
  // (and not back to) becomes MITIGATING: a hand-started migration names no
  // fault, and a fault may be stored after the commit.
  void MitigateMigratedFaults();
  // Notes a committed migration in migrated_off_.
  void NoteMigratedOff(const v1::Migration& m)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Policy ACT (RunCycle).
  void ActOnFaults();
  // Policy ACT's migrations for `wanted` (a fault, the host it blames)
  // that start now; the others are logged once per fault. `scheduled`: the
  // hosts named for each wanted job.
  std::vector<v1::Migration> StartForFaults(
      const std::vector<std::pair<v1::Fault, std::string>>& wanted,
      const std::vector<NodeFacts>& nodes,
      const std::vector<v1::Communicator>& comms,
      std::map<std::string, std::vector<std::string>>* scheduled)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  Outbox outbox_sender_{this};
  ServiceMutex mu_{"migration", "mu_"};
  // Null when not leading.
  std::unique_ptr<MigrationManager> manager_ ABSL_GUARDED_BY(mu_);
  WatchHub<v1::WatchMigrationsResponse> watchers_ ABSL_GUARDED_BY(mu_);
  uint64_t next_watcher_ ABSL_GUARDED_BY(mu_) = 1;
  std::set<std::string> connected_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> act_refused_ ABSL_GUARDED_BY(mu_);  // logged once
  // (job, host) -> why, for each host a committed migration moved its job
  // off and no later one moved it back onto; kept as migrations commit.
  std::map<std::pair<std::string, std::string>, std::string> migrated_off_
      ABSL_GUARDED_BY(mu_);
  std::vector<Effect> outbox_ ABSL_GUARDED_BY(mu_);
  uint64_t queued_ ABSL_GUARDED_BY(mu_) = 0;  // effects ever queued
  bool flushing_ ABSL_GUARDED_BY(mu_) = false;
  Mutex settle_mu_;
  CondVar settled_;
  uint64_t applied_ ABSL_GUARDED_BY(settle_mu_) = 0;  // of queued_
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_MIGRATION_MIGRATION_SERVICE_H_
