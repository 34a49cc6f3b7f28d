// Standby migration's control plane (docs/migration.md): each migration is a
// persisted state machine
//
//   QUEUED -> PREPARING --(READY from every member)--> SWITCHING
//          --(SWITCHED from every member but the leaver)--> COMMITTED
//
// or ABORTED from any state (a phase timing out, a member reporting failure,
// the joiner dying, the leaver dying during state transfer, a member host
// dying), with the old communicators untouched. PREPARING starts with
// MAKE_IDS to the joiner alone when the joiner's data plane makes the new
// ids (plan.ids_from_joiner); PREPARE goes to every member once they came,
// within the same phase timeout. Every state change is written
// to the FaultStore before the directives of the new phase go out, so a
// restarted controller resumes (or, with resume off, aborts) what it finds
// there. A second migration of the same job waits QUEUED until the first one
// finishes.
//
// The class decides; it does no I/O but the store and MigrationSender. The
// per-rank data plane (communicator virtualisation, two-phase rebuild, state
// transfer) answers the directives through the agents.
#ifndef PITSTOP_CONTROLLER_MIGRATION_MIGRATION_MANAGER_H_
#define PITSTOP_CONTROLLER_MIGRATION_MIGRATION_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "pitstop/clock.h"
#include "pitstop/v1/agent.pb.h"
#include "pitstop/v1/controller.pb.h"
#include "src/controller/migration/migration_events.h"
#include "src/controller/store/fault_store.h"

namespace pitstop::controller {

// Delivers a directive to one host's agent. Must not block (the controller
// calls it with its lock held). False when the host's agent is not
// connected.
class MigrationSender {
 public:
  virtual ~MigrationSender() = default;
  virtual bool SendMigration(const std::string& host,
                             const v1::MigrationDirective& directive) = 0;
};

// What the caller resolved about the job before asking for a migration.
struct MigrationPlan {
  std::string job_id;
  std::string leaver_host;
  std::string joiner_host;
  // Every host with ranks of the job (leaver included, joiner not) and its
  // global ranks.
  std::map<std::string, std::vector<int32_t>> ranks_by_host;
  // Communicators to rebuild (hash, name): those with a rank on the leaver.
  std::vector<std::pair<uint64_t, std::string>> comms;
  // The communicator whose sequence number names the switch point.
  uint64_t switch_comm_hash = 0;
  std::string requested_by;
  std::string reason;
  std::string fault_id;
  bool from_replica = false;
  // The joiner's data plane makes the new ids (PHASE_MAKE_IDS before
  // PREPARE; real NCCL ids hold their maker's address). Otherwise the
  // controller makes random ids (emulated data planes).
  bool ids_from_joiner = false;
};

// Not thread-safe: the owner serialises every call (MigrationService calls it
// with its mu_ held). Watchers and the sender are called from inside these
// calls.
class MigrationManager {
 public:
  struct Options {
    Clock* clock = Clock::Real();
    // PREPARING: building communicators, state transfer, the joiner's
    // sandbox warm-up. SWITCHING: reaching the switch point and draining.
    absl::Duration prepare_timeout = absl::Seconds(120);
    absl::Duration switch_timeout = absl::Seconds(60);
    // SWITCH_AT = the highest sequence number any rank reported with READY
    // plus this many collectives (room for the directive to arrive).
    uint64_t switch_margin = 4;
    // Migrations a restarted controller finds PREPARING/SWITCHING: resume
    // (re-send the phase's directive as agents reconnect, with a fresh
    // phase timeout) or abort them.
    bool resume = true;
    // Told of every start, commit and abort (metrics); null: nobody.
    MigrationEvents* events = nullptr;
  };
  using WatchFn = std::function<void(v1::WatchMigrationsResponse::Change,
                                     const v1::Migration&)>;

  // Loads the migrations in `store` and resumes or aborts the unfinished
  // ones. `store` and `sender` must outlive the manager. Internal when the
  // store cannot be read.
  static absl::StatusOr<std::unique_ptr<MigrationManager>> Create(
      Options options, FaultStore* store, MigrationSender* sender);

  // A new migration: QUEUED behind a running one of the same job, else
  // PREPARING (PREPARE sent to every member). InvalidArgument for a plan
  // without job, leaver, joiner or ranks on the leaver; FailedPrecondition
  // when the joiner is already reserved; the store's error when the record
  // cannot be written.
  absl::StatusOr<v1::Migration> Start(const MigrationPlan& plan);
  // An agent's answer. Stale answers (other epoch, finished migration,
  // phase already left) are ignored: OK. NotFound for an unknown id,
  // InvalidArgument for a host that is not a member.
  absl::Status OnAck(const std::string& host, const v1::MigrationAck& ack);
  // An agent (re)connected: re-send the current phase's directive to it if
  // it has not answered that phase.
  void OnHostUp(const std::string& host);
  // An agent's stream or a rank of `job_id` ("" = every job) on `host` died.
  void OnHostDown(const std::string& host, const std::string& job_id,
                  absl::string_view why);
  // Aborts running migrations whose phase deadline passed.
  void Tick();
  // An operator's abort. FailedPrecondition once finished.
  absl::StatusOr<v1::Migration> Abort(const std::string& migration_id,
                                      const std::string& why);

  absl::StatusOr<v1::Migration> Get(const std::string& migration_id) const;
  // Oldest first; job_id "" = all.
  std::vector<v1::Migration> List(const std::string& job_id,
                                  bool include_finished) const;
  // Unfinished migrations (QUEUED, PREPARING, SWITCHING) by joiner host.
  std::map<std::string, v1::Migration> Reserved() const;
  // The latest COMMITTED migration by joiner host.
  std::map<std::string, v1::Migration> Committed() const;
  // An unfinished migration of `job_id` exists.
  bool Busy(const std::string& job_id) const;
  // A migration (in any state, aborted too) was started for `fault_id`.
  bool HasForFault(const std::string& fault_id) const;

  uint64_t Subscribe(WatchFn fn);
  void Unsubscribe(uint64_t id);

 private:
  MigrationManager(Options options, FaultStore* store, MigrationSender* sender);
  static bool Finished(const v1::Migration& m);
  uint64_t NowUnixNs() const;
  v1::Migration* Find(const std::string& id);
  // Saves `m`, then notifies watchers with `change`. Logs a store error
  // (the in-memory state still moves: agents have been told).
  void Persist(const v1::Migration& m,
               v1::WatchMigrationsResponse::Change change);
  // QUEUED -> PREPARING; sends PREPARE. With abort_unreachable, a member
  // whose agent is not connected aborts it at once.
  void BeginPrepare(v1::Migration* m, bool abort_unreachable);
  void BeginSwitch(v1::Migration* m);
  void Commit(v1::Migration* m);
  void AbortLocked(v1::Migration* m, const std::string& why, AbortCause cause);
  // Starts the oldest QUEUED migration of `job_id`, if nothing runs.
  void StartNextQueued(const std::string& job_id, bool abort_unreachable);
  v1::MigrationDirective Directive(const v1::Migration& m,
                                   v1::MigrationDirective::Phase phase,
                                   const v1::MigrationMember& member) const;
  // Sends the current phase's directive to `member`; false if not connected.
  bool SendCurrent(const v1::Migration& m, const v1::MigrationMember& member);
  // SendCurrent to every member; with abort_unreachable, a member whose
  // agent is not connected aborts the migration.
  void SendToAll(v1::Migration* m, bool abort_unreachable);
  // SWITCH_AT's point: past every member's progress by switch_margin, or
  // with from_replica the lowest failed step of the stayers (the step they
  // all redo).
  uint64_t SwitchPoint(const v1::Migration& m) const;
  // Who sends each moved rank's state: the leaver's rank, or with
  // from_replica one stayer rank per moved rank (migration_ids.cc).
  static void AssignSources(v1::Migration* m);
  // PREPARING and the joiner's ids have not come yet (migration_ids.cc).
  static bool AwaitingIds(const v1::Migration& m);
  // Random ids for every communicator and moved rank (the controller makes
  // them when the data plane does not).
  void MakeIds(v1::Migration* m);
  // The joiner's MAKE_IDS answer: checks and stores the ids, then sends
  // PREPARE to every member (aborting when one is not connected).
  void OnIds(v1::Migration* m, const v1::MigrationAck& ack);
  std::string Missing(const v1::Migration& m, bool switched) const;
  void Notify(v1::WatchMigrationsResponse::Change change,
              const v1::Migration& m);

  const Options options_;
  FaultStore* const store_;
  MigrationSender* const sender_;
  std::map<std::string, v1::Migration> migrations_;  // by id
  uint64_t next_number_ = 1;
  std::map<uint64_t, WatchFn> watchers_;
  uint64_t next_watcher_ = 1;
  std::mt19937_64 rng_;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_MIGRATION_MIGRATION_MANAGER_H_
