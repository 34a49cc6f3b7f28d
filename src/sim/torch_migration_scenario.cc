#include "src/sim/torch_migration_scenario.h"

#include <unistd.h>

#include <algorithm>
#include <memory>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "pitstop/clock.h"
#include "pitstop/grpc_util.h"
#include "pitstop/status_macros.h"
#include "pitstop/v1/controller.grpc.pb.h"
#include "src/sim/local_cluster.h"
#include "src/sim/migration_judge.h"
#include "src/sim/migration_run.h"
#include "src/sim/subprocess.h"
#include "src/sim/torch_job.h"
#include "src/sim/torch_migration_faults.h"
#include "src/sim/torch_scenario.h"

namespace pitstop::sim {
namespace {

using torch_migration_internal::kEndBound;

constexpr char kJob[] = "torch-job";
constexpr const char* kStandby = kTorchMigrationStandby;
constexpr char kBackend[] = "pitstop_nccl";
constexpr absl::Duration kRunDeadline = absl::Minutes(5);

using migration_internal::MigrationClusterOptions;
using migration_internal::ReadFile;
using torch_migration_internal::LargestAfter;
using torch_migration_internal::LossLog;

class Run {
 public:
  Run(const TorchMigrationOptions& o, TorchMigrationResult* r)
      : o_(o), r_(r), world_(o.nodes * o.ranks_per_node) {}
  ~Run() { Teardown(); }

  absl::Status Start();
  absl::Status Reference();
  absl::Status Migrate();
  void Judge();
  bool faulty() const { return o_.fault != TorchMigrationFault::kNone; }
  void Teardown();
  void KeepWorkDir() {
    if (cluster_ == nullptr) return;
    cluster_->KeepWorkDir();
    r_->work_dir_kept = true;
  }

 private:
  void Say(const std::string& line) {
    if (o_.progress) o_.progress(line);
  }
  void Fail(const std::string& why) {
    r_->failures.push_back(why);
    Say(absl::StrCat("[sim] FAIL: ", why));
  }
  bool Cancelled() const { return o_.cancelled && o_.cancelled(); }
  TorchJobOptions JobOptions(const std::string& tag) const;
  absl::Status RunToEnd(TorchJob* job, const std::string& what);
  absl::StatusOr<v1::Migration> RequestMigration();
  absl::Status StartJoiners(const v1::Migration& m);
  absl::StatusOr<v1::Migration> AwaitFinished(const std::string& id);
  void MakeFault(const std::string& id);
  void AwaitEndAfterKill();
  void AwaitEnd(const absl::Time& deadline);
  // How long to wait for the processes a kill ends: kEndBound after it
  // (the run has failed past it), at most `deadline`.
  absl::Time EndDeadline(const absl::Time& deadline) const;
  // Records and prints every process of the job still running (a run that
  // did not end by itself), before they are killed.
  void SayStillRunning(const std::string& why);
  void JudgeWeightsAndSteps();
  void JudgeSwitch();
  std::string JoinerLog(int rank) const {
    return absl::StrCat(Dir("mig"), "/joiner-rank", rank, ".log");
  }
  std::string Dir(const std::string& tag) const {
    return absl::StrCat(cluster_->work_dir(), "/", tag);
  }

  const TorchMigrationOptions& o_;
  TorchMigrationResult* const r_;
  const int world_;
  std::string plugin_;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<v1::Controller::Stub> stub_;
  std::unique_ptr<TorchJob> job_;
  struct Joiner {
    int rank;
    std::unique_ptr<Subprocess> process;
  };
  std::vector<Joiner> joiners_;
  int64_t kill_ns_ = 0;  // with a fault: when the victim was killed
};

absl::Status Run::Start() {
  ASSIGN_OR_RETURN(plugin_, FindPitstopBinary("libnccl-profiler-pitstop.so"));
  const LocalClusterOptions co = MigrationClusterOptions(
      o_.nodes, o_.switch_margin, o_.work_dir, o_.keep_work_dir, o_.log_level);
  ASSIGN_OR_RETURN(cluster_, LocalCluster::Start(co));
  r_->work_dir = cluster_->work_dir();
  r_->work_dir_kept = o_.keep_work_dir || !o_.work_dir.empty();
  stub_ =
      v1::Controller::NewStub(CreateChannel(cluster_->controller_address()));
  Say(absl::StrCat("[sim] controller at ", cluster_->controller_address(), ", ",
                   o_.nodes, " nodes + standby ", kStandby,
                   " (agents with --migration-data-plane library); work dir ",
                   cluster_->work_dir()));
  return absl::OkStatus();
}

TorchJobOptions Run::JobOptions(const std::string& tag) const {
  TorchJobOptions jo;
  jo.nodes = o_.nodes;
  jo.ranks_per_node = o_.ranks_per_node;
  jo.script = TorchJobScript();
  jo.args = {"--backend",           kBackend,  "--seed",
             absl::StrCat(o_.seed), "--steps", absl::StrCat(o_.steps)};
  jo.job_id = kJob;
  jo.out_dir = Dir(tag);
  jo.log_dir = Dir(tag);
  return jo;
}

absl::Status Run::RunToEnd(TorchJob* job, const std::string& what) {
  const absl::Time deadline = absl::Now() + kRunDeadline;
  while (job->Running() > 0) {
    if (Cancelled()) return absl::CancelledError("interrupted");
    if (absl::Now() > deadline) {
      SayStillRunning(absl::StrCat(what, " past its deadline"));
      job->Kill();
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": still running after ",
                       absl::FormatDuration(kRunDeadline), "; killed"));
    }
    usleep(50000);
  }
  if (!job->AllExitedCleanly()) {
    Fail(absl::StrCat(what, ": torchrun ended with ",
                      absl::StrJoin(job->Exits(), ", ")));
  }
  return absl::OkStatus();
}

absl::Status Run::Reference() {
  // A job that a fault ends has no final weights to compare.
  if (faulty() && o_.fault != TorchMigrationFault::kJoinerDiesInSandbox) {
    return absl::OkStatus();
  }
  TorchJobOptions jo = JobOptions("ref");
  ASSIGN_OR_RETURN(jo.env, TorchBackendEnv(kBackend, plugin_));
  jo.env.emplace_back("PITSTOP_CPU_NCCL_STORE_DIR", Dir("ref") + "/nccl");
  Say(absl::StrCat("[sim] reference run: ", world_, " ranks x ", o_.steps,
                   " steps of ", jo.script, " without pitstop"));
  const int64_t t0 = MonotonicNowNs();
  ASSIGN_OR_RETURN(auto job, TorchJob::Start(jo));
  RETURN_IF_ERROR(RunToEnd(job.get(), "reference run"));
  r_->reference_s = (MonotonicNowNs() - t0) / 1e9;
  return absl::OkStatus();
}

absl::StatusOr<v1::Migration> Run::RequestMigration() {
  v1::MigrateNodeRequest req;
  req.set_host(cluster_->host(o_.leaver_node));
  req.set_to(kStandby);
  req.set_job_id(kJob);
  req.set_who("pitstop sim");
  req.set_reason("torch-migration scenario");
  return migration_internal::RequestMigration(stub_.get(), req);
}

// Each moved rank's joiner: what a launcher on the standby is given — the
// leaver's command line and environment — with the standby's agent, the
// joiner role and the shadow records.
absl::Status Run::StartJoiners(const v1::Migration& m) {
  std::vector<int> moved;
  for (const v1::MigrationMember& mem : m.members()) {
    if (mem.role() == v1::MIGRATION_ROLE_JOINER) {
      moved.assign(mem.global_ranks().begin(), mem.global_ranks().end());
    }
  }
  Say(absl::StrCat("[sim] migration ", m.migration_id(), ": starting ",
                   moved.size(), " joiner processes on ", kStandby, " (ranks ",
                   absl::StrJoin(moved, ","),
                   "; the leavers' command line "
                   "and environment, ",
                   o_.shadow_steps, " shadow steps in the sandbox)"));
  for (int rank : moved) {
    if (rank < 0 || rank >= world_) {
      return absl::InternalError(absl::StrCat("joiner rank ", rank));
    }
    const pid_t leaver = job_->worker_pid(rank);
    SubprocessOptions so;
    so.argv = CommandLineOf(leaver);
    so.env = EnvironmentOf(leaver);
    if (so.argv.empty() || so.env.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", rank, "'s process ", leaver,
                       " is gone: no command line "
                       "or environment to start its joiner with"));
    }
    so.env.insert(so.env.end(),
                  {{"PITSTOP_AGENT_SOCKET", cluster_->shm_socket(o_.nodes)},
                   {"PITSTOP_HOST", kStandby},
                   {"PITSTOP_MIGRATION_ROLE", "joiner"},
                   {"PITSTOP_SHADOW_RECORD", ""},
                   {"PITSTOP_SHADOW_DIR", Dir("shadow")},
                   {"PITSTOP_SHADOW_STEPS", absl::StrCat(o_.shadow_steps)},
                   {"PITSTOP_JOIN_TIMEOUT_S", "240"}});
    so.log_path = JoinerLog(rank);
    ASSIGN_OR_RETURN(auto p, Subprocess::Start(so));
    joiners_.push_back({rank, std::move(p)});
  }
  r_->joiners = static_cast<int>(joiners_.size());
  return absl::OkStatus();
}

absl::StatusOr<v1::Migration> Run::AwaitFinished(const std::string& id) {
  return migration_internal::AwaitMigrationFinished(
      stub_.get(), id, [this](const std::string& line) { Say(line); },
      [this] { return Cancelled(); });
}

absl::Status Run::Migrate() {
  TorchJobOptions jo = JobOptions("mig");
  jo.plugin = plugin_;
  for (int i = 0; i < o_.nodes; ++i) {
    jo.agent_sockets.push_back(cluster_->shm_socket(i));
    jo.hosts.push_back(cluster_->host(i));
  }
  ASSIGN_OR_RETURN(jo.env, TorchBackendEnv(kBackend, plugin_));
  jo.env.insert(jo.env.end(),
                {{"PITSTOP_CPU_NCCL_STORE_DIR", Dir("mig") + "/nccl"},
                 {"PITSTOP_VIRTUALIZE_COMMS", "1"},
                 {"PITSTOP_FLUSH_INTERVAL_MS", "5"},
                 // Every rank records its communicators' first collectives:
                 // the joiners' sandbox answers from them (one recorder
                 // would do; all-reduce/broadcast outputs are the same on
                 // every rank and the records are written atomically).
                 {"PITSTOP_SHADOW_RECORD", Dir("shadow")}});
  Say(absl::StrCat("[sim] training: ", world_, " ranks (", o_.nodes,
                   " torchrun x ", o_.ranks_per_node, ") x ", o_.steps,
                   " steps, pitstop LD_PRELOADed, communicators virtualised"));
  const int64_t t0 = MonotonicNowNs();
  ASSIGN_OR_RETURN(job_, TorchJob::Start(jo));
  RETURN_IF_ERROR(job_->FindWorkers(absl::Minutes(3)));
  const absl::Time deadline = absl::Now() + kRunDeadline;
  while (job_->StepsDone(0) < o_.migrate_after_step) {
    if (Cancelled()) return absl::CancelledError("interrupted");
    if (job_->Running() < o_.nodes || absl::Now() > deadline) {
      return absl::InternalError(absl::StrCat(
          "the job did not reach step ", o_.migrate_after_step, " (torchrun: ",
          absl::StrJoin(job_->Exits(), ", "), "; logs ", Dir("mig"), ")"));
    }
    usleep(20000);
  }
  Say(absl::StrCat("[sim] step ", job_->StepsDone(0), ": pitstopctl migrate ",
                   cluster_->host(o_.leaver_node), " --to ", kStandby));
  absl::StatusOr<v1::Migration> m = RequestMigration();
  if (!m.ok()) {
    Fail(std::string(m.status().message()));
    return RunToEnd(job_.get(), "migrated run");
  }
  RETURN_IF_ERROR(StartJoiners(*m));
  if (faulty()) MakeFault(m->migration_id());
  absl::StatusOr<v1::Migration> done = AwaitFinished(m->migration_id());
  if (!done.ok()) {
    Fail(std::string(done.status().message()));
  } else {
    r_->migration = *done;
    // With a fault, JudgeFault says which end the migration must have.
    if (!faulty() && done->state() != v1::MIGRATION_STATE_COMMITTED) {
      Fail(absl::StrCat("migration ", done->migration_id(),
                        " aborted: ", done->abort_reason()));
    }
  }
  if (faulty()) {
    AwaitEndAfterKill();
  } else if (!r_->failures.empty()) {
    // Joiners wait for a state that will not come: end them now.
    for (Joiner& j : joiners_) j.process->Stop(absl::Seconds(1));
  }
  if (faulty() && o_.fault != TorchMigrationFault::kJoinerDiesInSandbox) {
    // The job ended on the dead rank; how each process ended is judged from
    // the errors in its log.
    AwaitEnd(deadline);
    r_->migrated_s = (MonotonicNowNs() - t0) / 1e9;
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(RunToEnd(job_.get(), "migrated run"));
  for (Joiner& j : joiners_) {
    // A joiner of an aborted migration ends with the abort's error.
    if (faulty() && !j.process->Running()) continue;
    if (!j.process->Wait(std::max(deadline - absl::Now(), absl::Seconds(1)))) {
      j.process->Stop(absl::Seconds(1));
      Fail(absl::StrCat("joiner of rank ", j.rank, " still running; killed"));
    } else if (j.process->wait_status() != 0) {
      Fail(absl::StrCat("joiner of rank ", j.rank, " ended with ",
                        j.process->DescribeExit(), " (log ", Dir("mig"),
                        "/joiner-rank", j.rank, ".log)"));
    }
  }
  r_->migrated_s = (MonotonicNowNs() - t0) / 1e9;
  return absl::OkStatus();
}

// The victim: the highest moved rank's joiner or leaver.
void Run::MakeFault(const std::string& id) {
  if (joiners_.empty()) return;
  const int rank = joiners_.back().rank;
  const bool leaver = o_.fault == TorchMigrationFault::kLeaverDiesInTransfer;
  const pid_t victim =
      leaver ? job_->worker_pid(rank) : joiners_.back().process->pid();
  absl::StatusOr<int64_t> killed = torch_migration_internal::KillAtTheMoment(
      o_.fault, stub_.get(), id, victim, JoinerLog(rank),
      [this] { return Cancelled(); });
  if (!killed.ok()) {
    Fail(std::string(killed.status().message()));
    return;
  }
  kill_ns_ = *killed;
  r_->victim_rank = rank;
  Say(absl::StrCat("[sim] FAULT ", TorchMigrationFaultName(o_.fault),
                   ": SIGKILLed rank ", rank, "'s ",
                   leaver ? "leaver" : "joiner", " (pid ", victim, ")"));
}

// A joiner dead in the sandbox: the other joiners must end (the abort
// wakes their join) while the job trains on.
void Run::AwaitEndAfterKill() {
  if (o_.fault != TorchMigrationFault::kJoinerDiesInSandbox) return;
  const absl::Time deadline = EndDeadline(absl::Now() + kRunDeadline);
  for (Joiner& j : joiners_) {
    j.process->Wait(std::max(deadline - absl::Now(), absl::Seconds(1)));
  }
  for (Joiner& j : joiners_) {
    if (j.process->Running()) {
      SayStillRunning(
          absl::StrCat(absl::FormatDuration(kEndBound), " after the kill"));
      break;
    }
  }
  if (kill_ns_ != 0) {
    r_->ended_after_kill_s = (MonotonicNowNs() - kill_ns_) / 1e9;
  }
}

// Every torchrun and joiner ends by itself (what still runs kEndBound after
// the kill, or at `run_deadline`, is described and killed); the time of the
// last end after the kill.
void Run::AwaitEnd(const absl::Time& run_deadline) {
  const absl::Time deadline = EndDeadline(run_deadline);
  std::string running;
  while (absl::Now() < deadline && !Cancelled()) {
    running.clear();
    if (job_->Running() > 0) running = "torchrun";
    for (Joiner& j : joiners_) {
      if (j.process->Running()) {
        running = absl::StrCat("the joiner of rank ", j.rank);
      }
    }
    if (running.empty()) break;
    r_->last_to_end = running;
    usleep(20000);
  }
  if (kill_ns_ != 0) {
    r_->ended_after_kill_s = (MonotonicNowNs() - kill_ns_) / 1e9;
  }
  if (!running.empty() && !Cancelled()) {
    SayStillRunning(
        kill_ns_ != 0
            ? absl::StrCat(absl::FormatDuration(kEndBound), " after the kill")
            : "at the run's deadline");
  }
  for (Joiner& j : joiners_) {
    if (j.process->Running()) j.process->Stop(absl::Seconds(1));
  }
  if (job_->Running() > 0) job_->Kill();
}

absl::Time Run::EndDeadline(const absl::Time& deadline) const {
  if (kill_ns_ == 0) return deadline;
  const absl::Duration since_kill =
      absl::Nanoseconds(MonotonicNowNs() - kill_ns_);
  return std::min(deadline, absl::Now() + kEndBound - since_kill);
}

void Run::SayStillRunning(const std::string& why) {
  std::vector<std::string> lines;
  if (job_ != nullptr) lines = job_->DescribeRunning();
  for (Joiner& j : joiners_) {
    if (!j.process->Running()) continue;
    lines.push_back(absl::StrCat("the joiner of rank ", j.rank, ": ",
                                 DescribeProcess(j.process->pid()), " (log ",
                                 JoinerLog(j.rank), ")"));
  }
  if (lines.empty()) return;
  Say(absl::StrCat("[sim] still running ", why, " (killed now):"));
  for (std::string& line : lines) {
    Say(absl::StrCat("[sim]   ", line));
    r_->still_running.push_back(std::move(line));
  }
}

void Run::Judge() {
  r_->ranks = world_;
  r_->steps = o_.steps;
  if (!faulty() || o_.fault == TorchMigrationFault::kJoinerDiesInSandbox) {
    JudgeWeightsAndSteps();
  }
  if (!faulty()) JudgeSwitch();
  if (faulty()) {
    for (int node = 0; node < o_.nodes; ++node) {
      if (node == o_.leaver_node) continue;
      for (std::string& e : torch_migration_internal::CollectiveErrors(ReadFile(
               absl::StrCat(Dir("mig"), "/torchrun-node", node, ".log")))) {
        r_->stayer_errors.push_back(std::move(e));
      }
    }
    torch_migration_internal::JudgeFault(
        o_, *r_, [this](const std::string& why) { Fail(why); });
  }
  r_->passed = r_->failures.empty();
  if (!r_->passed) KeepWorkDir();
}

void Run::JudgeWeightsAndSteps() {
  for (int rank = 0; rank < world_; ++rank) {
    const std::string name = absl::StrCat("/weights-rank", rank, ".sha256");
    const std::string want = ReadFile(Dir("ref") + name);
    const std::string got = ReadFile(Dir("mig") + name);
    ++r_->weights_compared;
    if (!want.empty() && got == want) {
      ++r_->weights_identical;
    } else {
      Fail(absl::StrCat(
          "rank ", rank, ": final weights ",
          got.empty() ? "missing" : absl::StripAsciiWhitespace(got),
          " differ from the undisturbed run's ",
          want.empty() ? "(missing)" : absl::StripAsciiWhitespace(want)));
    }
    // The leaver's lines, then its joiner's, in the same file.
    const std::string why = CheckMovedOnce(
        LossLog(absl::StrCat(Dir("mig"), "/losses-rank", rank, ".jsonl")), {},
        o_.steps);
    if (!why.empty()) Fail(absl::StrCat("rank ", rank, "'s steps: ", why));
  }
}

void Run::JudgeSwitch() {
  r_->leaver_poll_ms =
      LargestAfter(ReadFile(absl::StrCat(Dir("mig"), "/torchrun-node",
                                         o_.leaver_node, ".log")),
                   "the poll took ");
  for (const Joiner& j : joiners_) {
    r_->joiner_restore_ms = std::max(
        r_->joiner_restore_ms,
        LargestAfter(
            ReadFile(absl::StrCat(Dir("mig"), "/joiner-rank", j.rank, ".log")),
            "restored the small state in "));
  }
  // The switch: the step the joiners continued at, from their "joined
  // before step S" line (S 0-based: the step index the judge uses).
  for (const Joiner& j : joiners_) {
    const std::string log =
        ReadFile(absl::StrCat(Dir("mig"), "/joiner-rank", j.rank, ".log"));
    const std::string key = "joined before step ";
    const size_t at = log.find(key);
    int step = -1;
    if (at != std::string::npos &&
        absl::SimpleAtoi(
            log.substr(at + key.size(),
                       log.find_first_not_of("0123456789", at + key.size()) -
                           at - key.size()),
            &step)) {
      r_->switch_step = step;
    }
  }
  if (r_->switch_step < 0) {
    Fail("no joiner logged 'joined before step': nothing moved");
  } else {
    // A stayer's steps: a moved rank's first step after the switch holds
    // its joiner's wait.
    r_->probe_rank = o_.leaver_node == 0 ? o_.ranks_per_node : 0;
    const auto [longest, median] =
        LongestAroundAndMedian(LossLog(absl::StrCat(Dir("mig"), "/losses-rank",
                                                    r_->probe_rank, ".jsonl")),
                               r_->switch_step);
    r_->longest_step_ms = longest;
    r_->median_step_ms = median;
    r_->downtime_ms = longest - median;
  }
}

void Run::Teardown() {
  for (Joiner& j : joiners_) {
    if (j.process->Running()) j.process->Stop(absl::Seconds(1));
  }
  if (job_ != nullptr) job_->Kill();
  if (cluster_ != nullptr) {
    const absl::Status st = cluster_->Shutdown(absl::Seconds(5));
    if (!st.ok()) Say(absl::StrCat("[sim] warning: ", st.message()));
  }
  joiners_.clear();
  job_.reset();
  cluster_.reset();
}

}  // namespace

absl::StatusOr<TorchMigrationResult> RunTorchMigrationScenario(
    const TorchMigrationOptions& options) {
  RETURN_IF_ERROR(ValidateTorchMigrationOptions(options));
  TorchMigrationResult result;
  Run run(options, &result);
  absl::Status s = run.Start();
  if (s.ok()) s = run.Reference();
  if (s.ok()) s = run.Migrate();
  if (!s.ok()) {
    if (!absl::IsCancelled(s)) run.KeepWorkDir();
    run.Teardown();
    if (result.work_dir_kept && !absl::IsCancelled(s)) {
      return absl::Status(s.code(), absl::StrCat(s.message(), " (work dir ",
                                                 result.work_dir, " kept)"));
    }
    return s;
  }
  run.Judge();
  run.Teardown();
  return result;
}

}  // namespace pitstop::sim
