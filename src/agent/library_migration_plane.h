// The agent's relay between the controller's per-host MigrationDirectives
// and the in-process library's per-rank RankMigrationDirectives
// (docs/migration.md "The agent relay"), migration.data_plane "library".
//
// For each directive the relay picks this host's ranks of the job:
//  - stayer, leaver: every connected rank stream of the job (hello job_id),
//    fixed at the migration's first directive here;
//  - joiner: the streams whose RANK is one of the moved ranks. Those
//    processes are started for the migration (PITSTOP_MIGRATION_ROLE=
//    joiner), so a directive waits for their hello and goes out then.
// It sends each rank its own directive (its global rank, the comms' ids,
// its transfer communicator's id) and folds their answers into one
// MigrationAck: ok once every rank answered ok (progress_seq the highest,
// MAKE_IDS's ids gathered), failed at the first rank that failed, naming
// it. COMMIT and ABORT are relayed and not answered upstream.
//
// Joiner launch (joiner_launcher.h): when the operator configured a
// launcher for the job, the first MAKE_IDS or PREPARE that makes this host a
// migration's joiner starts one process per moved rank with it (outside the
// relay's mutex) before the directive is relayed; a launch that fails
// answers that directive with the launcher's reason, so the controller
// aborts the migration at once. Without a launcher the joiners are started
// by someone else and the directive waits for their hello, as before.
//
// A repeated directive (same migration, epoch and phase: a reconnect or a
// restarted controller) is answered again from what is stored; ranks get
// each phase once. One migration's state is kept per job; a directive of a
// newer epoch replaces it.
//
// Thread-safe: OnDirective comes from the upstream thread, the listener
// calls from ingest threads. Lock order: this relay's mutex, then
// AgentCore's. The AckFn is called with the mutex held and must not block.
#ifndef PITSTOP_AGENT_LIBRARY_MIGRATION_PLANE_H_
#define PITSTOP_AGENT_LIBRARY_MIGRATION_PLANE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "pitstop/sync.h"
#include "pitstop/v1/agent.pb.h"
#include "pitstop/v1/telemetry.pb.h"
#include "src/agent/agent_core.h"
#include "src/agent/joiner_launcher.h"
#include "src/agent/migration_plane.h"

namespace pitstop::agent {

class LibraryMigrationPlane final : public MigrationPlane,
                                    public RankMigrationListener {
 public:
  // Each job's joiner launcher (by job id; none: no launches) and what
  // every joiner is told: this host and the agent's shared-memory socket.
  struct Launch {
    std::map<std::string, std::unique_ptr<JoinerLauncher>> launchers;
    std::string host;
    std::string agent_socket;
  };
  // Registers itself as `core`'s migration listener; `core` must outlive
  // the relay.
  LibraryMigrationPlane(AgentCore* core, AckFn ack, Launch launch = {});
  ~LibraryMigrationPlane() override;

  void OnDirective(const v1::MigrationDirective& d) override;
  std::string name() const override { return "library"; }

  void OnRankHello(uint64_t stream, const std::string& job_id,
                   int32_t global_rank) override;
  void OnRankAcks(uint64_t stream, const google::protobuf::RepeatedPtrField<
                                       v1::RankMigrationAck>& acks) override;

 private:
  // One migration of one job on this host.
  struct Relay {
    std::string migration_id;
    uint64_t epoch = 0;
    std::string job_id;
    // The latest directive of each phase.
    std::map<int, v1::MigrationDirective> directives;
    // The ranks that must answer: fixed at the first directive (stayer,
    // leaver) or the moved ranks (joiner).
    std::set<int32_t> expected;
    // (phase, global rank) -> stream the phase went to.
    std::map<std::pair<int, int32_t>, uint64_t> sent;
    std::map<int, std::map<int32_t, v1::RankMigrationAck>> acks;
    // Phases answered upstream, with the answer (for repeats).
    std::map<int, v1::MigrationAck> answered;
  };

  // The job's launcher when `d` is the first directive that needs this
  // host's joiners started (marks it started), else null.
  JoinerLauncher* LauncherFor(const v1::MigrationDirective& d)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts a joiner per moved rank; the first failure's reason.
  absl::Status LaunchJoiners(JoinerLauncher* launcher,
                             const v1::MigrationDirective& d);
  Relay* RelayFor(const v1::MigrationDirective& d)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends `phase` to every expected rank that has a stream and has not
  // had it yet; answers at once when the job has no rank here.
  void Dispatch(Relay* r, int phase) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::RankMigrationDirective ForRank(const Relay& r,
                                     const v1::MigrationDirective& d,
                                     int32_t global_rank) const;
  // Answers `phase` upstream once every expected rank answered it ok, or at
  // the first failure.
  void Fold(Relay* r, int phase) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Answer(Relay* r, int phase, bool ok, const std::string& error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  AgentCore* const core_;
  AckFn ack_;
  const Launch launch_;
  Mutex mu_;
  // (migration, epoch) whose joiners were started (or failed to be).
  std::set<std::pair<std::string, uint64_t>> launched_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Relay> relays_ ABSL_GUARDED_BY(mu_);  // by job
};

}  // namespace pitstop::agent

#endif  // PITSTOP_AGENT_LIBRARY_MIGRATION_PLANE_H_
