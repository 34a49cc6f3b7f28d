// The library's part of a standby migration (issue #13; docs/migration.md
// "Two-phase rebuild and state transfer (library)"): applies the agent's
// RankMigrationDirectives to this process's virtualised communicators
// (PITSTOP_VIRTUALIZE_COMMS=1, comm_table.h) and moves the trainer's state
// from the leaver to the joiner.
//
//   MAKE_IDS   joiner only, before PREPARE: makes the new ids with
//              ncclGetUniqueId (a real id holds its maker's address, and
//              this process lives through the init): one per listed
//              communicator when make_comm_ids, and the transfer
//              communicator's; answers them. PREPARE brings them back.
//   PREPARE    stayer: non-blocking init of each listed communicator's
//              replacement (same rank and size, the directive's new id);
//              leaver: the transfer communicator (rank 0 of 2); joiner:
//              both (its rank: the one its sandbox handles asked for;
//              transfer rank 1). READY once all are connected.
//   SWITCH_AT  armed; at the first trainer poll where the switch
//              communicator has seen switch_seq operations enqueued, a
//              stayer swaps every listed handle to its new communicator,
//              a leaver sends its state and leaves; SWITCHED. The joiner's
//              join receives the state once its own SWITCH_AT came (a
//              receive posted earlier could not be cancelled by ABORT) and
//              answers SWITCHED when its sandbox handles are bound.
//   COMMIT     stayer: the swapped-out communicators are finalized and
//              destroyed (aborted when in error) on the worker thread.
//   ABORT      the new communicators are aborted, the old ones kept; a
//              joiner waiting in its join gets the reason.
//
// Node failure (from_replica): the leaver died, so the old communicators
// are broken and the stayers' trainers wait in Recover (their collective
// failed). PREPARE as above, but a stayer given a transfer id is the
// replica (transfer rank 0, the joiner 1); a stayer's READY waits for both
// the inits and its trainer's Recover, and carries the failed step as
// progress_seq. SWITCH_AT's switch_seq is the step every rank redoes (the
// lowest failed one): it wakes Recover, the trainer restores its state as
// of that step and calls Resume, which sends the state (the replica),
// swaps every listed handle, restarts its operation count at zero (the
// ranks' counts diverged at the failure) and answers SWITCHED. COMMIT
// aborts the old communicators (in error: never finalized); ABORT wakes
// Recover with the reason.
//
// Directives are idempotent on (migration_id, epoch, phase): a repeat is
// answered again (the stored answer), never redone; MAKE_IDS's ids are
// made once. One migration at a time; a directive of another one while it
// runs is refused, except after MAKE_IDS alone (nothing of NCCL's to undo:
// the next migration replaces it).
//
//   (MAKE_IDS) ──ids made──► IdsMade
//       │ id error              │ PREPARE
//       ▼                       ▼
//     Failed ◄──init error── Preparing ◄── (PREPARE, no MAKE_IDS)
//                               │ all connected
//                               ▼
//                             Ready ──ABORT──► Aborted  (ABORT: from any
//                               │ SWITCH_AT              stage before
//                               ▼                        Switched)
//                           Switching ──boundary──► Switched ──COMMIT──►
//                                        (from_replica:          Committed
//                                         Resume)
//
// Threads: OnDirectives/Tick/TakeAcks on the exporter thread (so is
// MAKE_IDS's ncclGetUniqueId: it waits on no peer); RegisterState/Poll/Join/
// Recover/Resume on the trainer's thread (the C API,
// include/pitstop/trainer.h); COMMIT's and ABORT's NCCL calls on a worker
// thread of its own (finalize is a barrier; the exporter must not wait). Every
// method is thread-safe (one mutex; never held across a call that may block on
// peers, nor across one that frees a communicator: freeing the last one stops
// the exporter, which takes the mutex for its last acks). Nothing here runs on
// the collective path: the switch counter is the table's
// (CommTable::CountEnqueued).
#ifndef PITSTOP_PLUGIN_REBUILD_H_
#define PITSTOP_PLUGIN_REBUILD_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "plugin/comm_table.h"
#include "plugin/plugin_sync.h"
#include "plugin/rebuild_nccl.h"
#include "plugin/state_transfer.h"
#include "plugin/wire.h"

namespace pitstop::plugin {

class Rebuilder {
 public:
  // Poll results (include/pitstop/trainer.h's values).
  static constexpr int kContinue = 0;
  static constexpr int kLeave = 1;
  static constexpr int kError = -1;

  // `table`: the interposer's handles. `ops`: NCCL (null entries: NCCL is
  // missing something; every directive is then refused with `ops_missing`).
  // `now_ns`: a monotonic clock (join's timeout).
  Rebuilder(CommTable* table, const NcclOps& ops, std::string ops_missing,
            std::function<uint64_t()> now_ns);
  ~Rebuilder();  // joins the worker
  Rebuilder(const Rebuilder&) = delete;
  Rebuilder& operator=(const Rebuilder&) = delete;

  // Exporter thread.
  void OnDirectives(std::vector<MigrationDirective>* directives) noexcept;
  void Tick() noexcept;
  void TakeAcks(std::vector<MigrationAck>* out) noexcept;

  // Trainer thread. 0 or kError with *error set.
  int RegisterState(const char* name, void* data, uint64_t bytes,
                    std::string* error) noexcept;
  // kContinue, kLeave (this leaver's state went to the joiner: exit), or
  // kError (the migration failed here; training goes on as before).
  int Poll(uint64_t next_step, std::string* error) noexcept;
  // Joiner: waits up to `timeout_ms` for READY and SWITCH_AT, receives the
  // state, then binds the sandbox handles. 0 with *next_step set, or
  // kError. A receive that fails because the leaver's end closed waits
  // (within `timeout_ms`) for the ABORT, whose reason it returns: the
  // leaver's death or failure is reported by its own side.
  int Join(uint64_t* next_step, int64_t timeout_ms,
           std::string* error) noexcept;
  // Node failure, stayer: the trainer's collective of step `failed_step`
  // failed. Waits up to `timeout_ms` for the recovery migration's
  // SWITCH_AT; 0 with *redo_step (its switch_seq), or kError (aborted,
  // failed or timed out: training cannot go on).
  int Recover(uint64_t failed_step, uint64_t* redo_step, int64_t timeout_ms,
              std::string* error) noexcept;
  // The trainer's registered state is as of the start of `redo_step`: the
  // replica sends it to the joiner, every listed handle is swapped,
  // SWITCHED. 0 or kError.
  int Resume(uint64_t redo_step, std::string* error) noexcept;

 private:
  struct Plan {
    uint64_t old_hash = 0;
    std::string new_id;
    uint64_t new_hash = 0;
    void* handle = nullptr;
    int rank = -1;
    int n_ranks = 0;
    OwnedComm fresh;  // the replacement, until the handle owns it
    OwnedComm old;    // stayer: swapped out, freed at COMMIT
  };
  enum class Stage {
    kIdsMade,
    kPreparing,
    kReady,
    kSwitching,
    kSwitched,
    kCommitted,
    kAborted,
    kFailed
  };
  struct Migration {
    std::string id;
    uint64_t epoch = 0;
    MigrationRole role = kRoleUnspecified;
    int32_t global_rank = -1;
    std::vector<Plan> plans;
    std::string transfer_id;
    OwnedComm transfer;
    void* switch_handle = nullptr;
    uint64_t switch_seq = 0;
    Stage stage = Stage::kPreparing;
    bool transfer_busy = false;  // the trainer thread is sending/receiving
    std::string failure;
    std::set<int> seen;                   // phases received
    std::map<int, MigrationAck> answers;  // phase -> its answer
    uint64_t last_poll_enqueued = 0;
    bool polled = false;
    bool from_replica = false;  // node failure: the leaver is dead
    bool replica = false;       // a from_replica stayer that sends the state
    uint64_t serial = 0;        // tells migrations apart (Recover)
  };

  void HandleLocked(const MigrationDirective& d) PLUGIN_REQUIRES(mu_);
  // A directive of a migration that is not the current one: makes it the
  // current one (PREPARE, a joiner's MAKE_IDS) and returns true, or answers
  // it here and returns false.
  bool BeginLocked(const MigrationDirective& d) PLUGIN_REQUIRES(mu_);
  // True when `phase` of the current migration was answered (again) here.
  bool AnsweredLocked(int phase) PLUGIN_REQUIRES(mu_);
  void MakeIdsLocked(const MigrationDirective& d) PLUGIN_REQUIRES(mu_);
  // A new ncclUniqueId into *id (kCommIdBytes), or false with *error.
  bool MakeId(std::string* id, std::string* error) const;
  void PrepareLocked(const MigrationDirective& d) PLUGIN_REQUIRES(mu_);
  bool PlanLocked(const MigrationDirective& d, std::string* error)
      PLUGIN_REQUIRES(mu_);
  void TickLocked() PLUGIN_REQUIRES(mu_);
  void ArmLocked(const MigrationDirective& d) PLUGIN_REQUIRES(mu_);
  // Node failure: SWITCH_AT names the step to redo; wakes Recover.
  void ArmRedoLocked() PLUGIN_REQUIRES(mu_);
  void CommitLocked() PLUGIN_REQUIRES(mu_);
  void AbortLocked(const std::string& reason) PLUGIN_REQUIRES(mu_);
  int SwitchLocked(std::string* error) PLUGIN_REQUIRES(mu_);
  // Swaps every listed handle to its new communicator (false: the
  // migration failed); `restart_counts`: from zero (node failure).
  bool SwapAllLocked(bool restart_counts, std::string* error)
      PLUGIN_REQUIRES(mu_);
  int LeaveLocked(uint64_t next_step, std::string* error) PLUGIN_REQUIRES(mu_);
  // Sends the registered state over the transfer communicator, the lock
  // released meanwhile (it waits on the joiner). True with the transfer
  // communicator in *done (to finalize); false: aborted, migration failed.
  bool SendStateLocked(uint64_t next_step,
                       const std::vector<uint64_t>& enqueued, OwnedComm* done,
                       std::string* error) PLUGIN_REQUIRES(mu_);
  // Aborts `comm` with the lock released, as every NCCL call that frees a
  // communicator must be: freeing the process's last one ends in the
  // profiler's finalize, which stops the exporter and waits for its last
  // drain, and that drain takes the lock (TakeAcks). Held across the abort,
  // the lock deadlocked a joiner whose transfer ended in an ABORT.
  void AbortUnlocked(OwnedComm* comm) PLUGIN_REQUIRES(mu_);
  // Recover's wait for a from_replica migration other than `stale_serial`
  // to reach SWITCH_AT.
  bool WaitRedoLocked(uint64_t stale_serial, int64_t timeout_ms,
                      std::string* error) PLUGIN_REQUIRES(mu_);
  int ResumeLocked(uint64_t redo_step, std::string* error) PLUGIN_REQUIRES(mu_);
  int BindJoinerLocked(const TransferHeader& h, std::string* error)
      PLUGIN_REQUIRES(mu_);
  bool WaitSwitchLocked(int64_t timeout_ms, std::string* error)
      PLUGIN_REQUIRES(mu_);
  // The join's receive failed or the migration was aborted meanwhile:
  // aborts `transfer`; when `leaver_gone` (the leaver's end closed) waits,
  // until `deadline` (now_ns), for the ABORT that names the leaver's
  // failure. kError with *error: the ABORT's reason, else the receive's
  // (then SWITCH_AT is answered failed).
  int JoinFailedLocked(OwnedComm* transfer, bool leaver_gone, uint64_t deadline,
                       std::string* error) PLUGIN_REQUIRES(mu_);
  // Fails the migration: aborts every communicator it made that is still
  // live (on the worker) and answers `phase` !ok.
  void FailLocked(int phase, const std::string& error) PLUGIN_REQUIRES(mu_);
  void AnswerLocked(int phase, bool ok, const std::string& error)
      PLUGIN_REQUIRES(mu_);
  MigrationAck AckLocked(int phase, bool ok, const std::string& error) const
      PLUGIN_REQUIRES(mu_);
  // Stores `a` as its phase's answer; sends it once that phase came.
  void PostLocked(MigrationAck a) PLUGIN_REQUIRES(mu_);
  void RefuseLocked(const MigrationDirective& d, const std::string& error)
      PLUGIN_REQUIRES(mu_);
  uint64_t ProgressLocked() const PLUGIN_REQUIRES(mu_);
  // Runs `task` on the worker thread (started at the first task).
  void RunLater(std::function<void()> task) PLUGIN_REQUIRES(mu_);
  void WorkerLoop();

  CommTable* const table_;
  const NcclOps ops_;
  const std::string ops_missing_;
  const std::function<uint64_t()> now_ns_;
  // Set while a migration may switch: the trainer's poll takes the lock
  // only then.
  std::atomic<bool> tracking_{false};

  Mutex mu_;
  CondVar cv_;  // a join waits for PREPARE's outcome
  std::unique_ptr<Migration> current_ PLUGIN_GUARDED_BY(mu_);
  std::vector<MigrationAck> outbox_ PLUGIN_GUARDED_BY(mu_);
  std::vector<StateBuffer> state_ PLUGIN_GUARDED_BY(mu_);
  // The trainer waits in Recover (from its call until Resume) since its
  // collective of step failed_step_ failed.
  bool recovering_ PLUGIN_GUARDED_BY(mu_) = false;
  uint64_t failed_step_ PLUGIN_GUARDED_BY(mu_) = 0;
  uint64_t serial_ PLUGIN_GUARDED_BY(mu_) = 0;
  std::deque<std::function<void()>> tasks_ PLUGIN_GUARDED_BY(mu_);
  bool stopping_ PLUGIN_GUARDED_BY(mu_) = false;
  CondVar task_cv_;
  std::thread worker_;  // started under mu_, joined by the destructor
};

}  // namespace pitstop::plugin

#endif  // PITSTOP_PLUGIN_REBUILD_H_
