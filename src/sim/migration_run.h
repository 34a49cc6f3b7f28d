// Internal to the migration scenarios (migration_scenario.h): one run's
// deployment, processes and verdict. migration_scenario.cc holds the
// common path and the scenarios that ask for the migration themselves;
// migration_policy.cc the one where detection and policy ACT start it.
// Only src/sim/migration_*.cc and torch_migration_scenario.cc (asking for
// a migration and waiting for it) include this header.
//
// Thread-compatible: one caller.
#ifndef PITSTOP_SRC_SIM_MIGRATION_RUN_H_
#define PITSTOP_SRC_SIM_MIGRATION_RUN_H_

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "pitstop/v1/controller.grpc.pb.h"
#include "src/sim/local_cluster.h"
#include "src/sim/migration_judge.h"
#include "src/sim/migration_scenario.h"
#include "src/sim/subprocess.h"

namespace pitstop::sim::migration_internal {

inline constexpr char kJob[] = "dp-migrate";
inline constexpr char kStandby[] = "spare0";
inline constexpr absl::Duration kRunDeadline = absl::Minutes(5);
// Joiners warm up on this many recorded steps (PITSTOP_SHADOW_COLLECTIVES
// defaults to 16 recorded collectives; one all-reduce per step).
inline constexpr int kShadowSteps = 8;

// One unary call to the controller, `call(&ctx)`: each try gets a 5 s
// deadline and waits for the channel to be ready; UNAVAILABLE is tried
// again, up to `tries` times (calls that change nothing: a retried call
// that did reach the controller must not act twice). On a loaded machine a
// keepalive ping answered late closes the transport and the next call fails
// with "Broken pipe" while the controller is fine.
template <typename Call>
grpc::Status CallController(const Call& call, int tries = 4) {
  grpc::Status st;
  for (int attempt = 0; attempt < tries; ++attempt) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    ctx.set_wait_for_ready(true);
    st = call(&ctx);
    if (st.error_code() != grpc::StatusCode::UNAVAILABLE) return st;
  }
  return st;
}

// MigrateNode `req`, asked again while the controller answers
// FAILED_PRECONDITION ("not migratable now": not every agent reported the
// job's communicators yet), for up to 60 s.
absl::StatusOr<v1::Migration> RequestMigration(
    v1::Controller::Stub* stub, const v1::MigrateNodeRequest& req);
// Polls migration `id` until COMMITTED or ABORTED (kRunDeadline), telling
// `say` each new state; CANCELLED once `cancelled` says so.
absl::StatusOr<v1::Migration> AwaitMigrationFinished(
    v1::Controller::Stub* stub, const std::string& id,
    const std::function<void(const std::string&)>& say,
    const std::function<bool()>& cancelled);

// The deployment every migration scenario runs on: agents on `nodes` nodes
// ("node0", ...) plus the standby kStandby, moving state through the
// library's data plane, and a controller whose migration phases fail a run
// in a minute, not the production default's two, with `switch_margin`.
LocalClusterOptions MigrationClusterOptions(int nodes, int switch_margin,
                                            const std::string& work_dir,
                                            bool keep_work_dir,
                                            const std::string& log_level);

std::string ReadFile(const std::string& path);
StepLogLines StepLog(const std::string& path);
double NowMs();

// degraded-node-migration's lines of the report: the fault, how fast it
// was found and acted on, and the step times before, during and after.
void PrintPolicyReport(const MigrationScenarioResult& r, std::ostream& out);
// "F1 NON_COMM_SLOW MITIGATING; F2 …", or "none".
std::string DescribeFaults(const std::vector<v1::Fault>& faults);

struct Proc {
  std::string name;  // "r5", "joiner5"
  int rank = 0;
  std::unique_ptr<Subprocess> process;
  bool killed = false;  // by the scenario (node failure, or a failed run)
};

class ScenarioRun {
 public:
  ScenarioRun(const MigrationScenarioOptions& o, MigrationScenarioResult* r)
      : o_(o), r_(r), world_(o.nodes * o.ranks_per_node) {}

  absl::Status Start();
  absl::Status Reference();
  absl::Status Restart();
  absl::Status Migrate();
  void Judge();
  // The run failed: its logs stay (they are named in its failures).
  void KeepWorkDir() {
    if (cluster_ == nullptr) return;
    cluster_->KeepWorkDir();
    r_->work_dir_kept = true;
  }
  std::string controller_address() const {
    return cluster_->controller_address();
  }

 private:
  // The migrated run's trainer processes, rank 0 recording for the
  // joiners' shadow iterations; the degraded GPU's rank slows down.
  absl::Status LaunchJob(const std::string& id);
  // standby/node-failure: at migrate_after_step the scenario (kills the
  // leaver's processes and) asks MigrateNode, as pitstopctl migrate does.
  absl::StatusOr<v1::Migration> RequestAfterStep();
  // degraded-node (migration_policy.cc): waits, printing what pitstop
  // finds, until policy ACT starts a migration, seen on WatchMigrations
  // as a scheduler integration sees it.
  absl::StatusOr<v1::Migration> AwaitPolicyMigration();
  // Every fault of the job, resolved ones too.
  grpc::Status ListJobFaults(v1::ListFaultsResponse* resp);
  // Prints each new fault of the job, and each change of its state.
  void SayFaults(std::map<std::string, int>* seen);
  // The standby's processes: the leaver's global ranks, in sandbox mode.
  absl::Status StartJoiners(const v1::Migration& m, const std::string& id);
  // Every global rank's steps by the scenario's rule (migration_judge.h).
  void JudgeSteps();
  // Every joiner ran its shadow iterations on rank 0's records.
  void JudgeShadow();
  // degraded-node: policy ACT started it for a fault on the leaver, and
  // the job ran at full speed again after the switch.
  void JudgePolicy(const StepLogLines& r0);
  // Every scenario: the job's faults; a hang or mismatch fault is a false
  // one (the job ran on), e.g. the replaced communicators judged as hung.
  void JudgeFaults();
  int SlowRank() const {
    return o_.leaver_node * o_.ranks_per_node + o_.slow_local_rank;
  }
  void Say(const std::string& line) {
    if (o_.progress) o_.progress(line);
  }
  std::string Path(const std::string& tag, const std::string& who,
                   const char* ext) const;
  absl::StatusOr<std::string> MakeId(const std::string& tag);
  std::vector<std::string> Argv(const std::string& tag, const std::string& id,
                                const std::string& who, int rank,
                                int steps = -1) const;
  absl::StatusOr<std::unique_ptr<Subprocess>> Launch(
      std::vector<std::string> argv,
      std::vector<std::pair<std::string, std::string>> env,
      const std::string& log);
  std::vector<std::pair<std::string, std::string>> PitstopEnv(int node,
                                                              int rank) const;
  // Waits for every process; false (and a failure) past the deadline or
  // for a non-zero exit.
  bool WaitAll(std::vector<Proc>* procs, const std::string& what);
  absl::StatusOr<v1::Migration> RequestMigration();
  // Node failure: SIGKILLs every trainer process of the leaver node.
  void KillLeaver();
  absl::StatusOr<v1::Migration> AwaitFinished(const std::string& id);
  void Fail(const std::string& why) { r_->failures.push_back(why); }

  const MigrationScenarioOptions o_;
  MigrationScenarioResult* const r_;
  const int world_;
  std::string trainer_, plugin_, dir_;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<v1::Controller::Stub> stub_;
  std::vector<Proc> procs_;  // the migrated run's, joiners appended
};

}  // namespace pitstop::sim::migration_internal

#endif  // PITSTOP_SRC_SIM_MIGRATION_RUN_H_
