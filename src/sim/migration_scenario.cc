#include "src/sim/migration_scenario.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "grpcpp/grpcpp.h"
#include "pitstop/grpc_util.h"
#include "pitstop/status_macros.h"
#include "pitstop/v1/controller.grpc.pb.h"
#include "src/sim/migration_run.h"

namespace pitstop::sim {
namespace migration_internal {

LocalClusterOptions MigrationClusterOptions(int nodes, int switch_margin,
                                            const std::string& work_dir,
                                            bool keep_work_dir,
                                            const std::string& log_level) {
  LocalClusterOptions co;
  co.nodes = nodes + 1;
  for (int i = 0; i < nodes; ++i) {
    co.host_names.push_back(absl::StrCat("node", i));
  }
  co.host_names.push_back(kStandby);
  co.work_dir = work_dir;
  co.keep_work_dir = keep_work_dir;
  co.log_level = log_level;
  co.agent_batch_ms = 50;
  co.agent_extra_args = {"--migration-data-plane", "library"};
  co.agent_args_by_node[nodes] = {"--standby"};
  co.controller_extra_args = {
      "--migrate-switch-margin",     absl::StrCat(switch_margin),
      "--migrate-prepare-timeout-s", "60",
      "--migrate-switch-timeout-s",  "60"};
  return co;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

StepLogLines StepLog(const std::string& path) {
  return ParseStepLog(ReadFile(path));
}

double NowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string ScenarioRun::Path(const std::string& tag, const std::string& who,
                              const char* ext) const {
  return absl::StrCat(dir_, "/", tag, "-", who, ".", ext);
}

absl::Status ScenarioRun::Start() {
  std::error_code ec;
  if (!o_.work_dir.empty() && std::filesystem::exists(o_.work_dir, ec) &&
      !std::filesystem::is_empty(o_.work_dir, ec)) {
    // Every id, step log and weights file is named by role: a second run
    // in the same directory would read the first one's.
    return absl::InvalidArgumentError(absl::StrCat(
        "work dir ", o_.work_dir,
        " is not empty (a run's files are named by role and would mix with "
        "an earlier run's): give a new or empty directory"));
  }
  ASSIGN_OR_RETURN(trainer_, FindPitstopBinary("pitstop-dp-trainer"));
  ASSIGN_OR_RETURN(plugin_, FindPitstopBinary("libnccl-profiler-pitstop.so"));
  LocalClusterOptions co = MigrationClusterOptions(
      o_.nodes, o_.switch_margin, o_.work_dir, o_.keep_work_dir, o_.log_level);
  // degraded-node: the default policy mode is ACT, so a CONFIRMED hardware
  // fault moves its node to the standby with nobody asking.
  if (o_.degrade) {
    co.controller_extra_args.insert(co.controller_extra_args.end(),
                                    {"--detection-mode", "act"});
  }
  ASSIGN_OR_RETURN(cluster_, LocalCluster::Start(co));
  dir_ = cluster_->work_dir();
  r_->work_dir = dir_;
  // A directory the caller named is never removed (LocalCluster).
  r_->work_dir_kept = o_.keep_work_dir || !o_.work_dir.empty();
  stub_ =
      v1::Controller::NewStub(CreateChannel(cluster_->controller_address()));
  Say(absl::StrCat("[sim] controller at ", cluster_->controller_address(), ", ",
                   o_.nodes, " nodes + standby ", kStandby,
                   " (agents with --migration-data-plane library); work dir ",
                   dir_));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Subprocess>> ScenarioRun::Launch(
    std::vector<std::string> argv,
    std::vector<std::pair<std::string, std::string>> env,
    const std::string& log) {
  SubprocessOptions so;
  so.argv = std::move(argv);
  so.env = std::move(env);
  so.env.emplace_back("PITSTOP_CPU_NCCL_STORE_DIR", dir_ + "/nccl");
  so.log_path = log;
  return Subprocess::Start(so);
}

absl::StatusOr<std::string> ScenarioRun::MakeId(const std::string& tag) {
  const std::string out = absl::StrCat(dir_, "/", tag, ".id");
  ASSIGN_OR_RETURN(auto p, Launch({trainer_, "--make-unique-id"}, {}, out));
  if (!p->Wait(absl::Seconds(30)) || p->wait_status() != 0) {
    return absl::InternalError(absl::StrCat(
        "pitstop-dp-trainer --make-unique-id failed: ", p->DescribeExit()));
  }
  std::string id = ReadFile(out);
  return std::string(absl::StripAsciiWhitespace(id));
}

std::vector<std::string> ScenarioRun::Argv(const std::string& tag,
                                           const std::string& id,
                                           const std::string& who, int rank,
                                           int steps) const {
  return {trainer_, "--rank", absl::StrCat(rank), "--nranks",
          absl::StrCat(world_), "--unique-id", id, "--steps",
          absl::StrCat(steps >= 0 ? steps : o_.steps), "--batch",
          absl::StrCat(o_.batch), "--hidden", absl::StrCat(o_.hidden),
          "--log-every", "0", "--out", Path(tag, who, "bin"), "--step-log",
          Path(tag, who, "steps"), "--recover-timeout-ms", "240000",
          // The reference only fixes the weights: it runs without the
          // emulated GPU time, which never changes them.
          "--compute-ms", tag == "ref" ? "0" : absl::StrCat(o_.compute_ms)};
}

std::vector<std::pair<std::string, std::string>> ScenarioRun::PitstopEnv(
    int node, int rank) const {
  return {{"LD_PRELOAD", plugin_},
          {"PITSTOP_VIRTUALIZE_COMMS", "1"},
          {"PITSTOP_AGENT_SOCKET", cluster_->shm_socket(node)},
          {"PITSTOP_HOST", cluster_->host(node)},
          {"PITSTOP_JOB_ID", kJob},
          {"PITSTOP_FLUSH_INTERVAL_MS", "5"},
          // Below the controller's PREPARE timeout (60 s, above): after a
          // node failure a survivor must be out of its failed collective
          // and in pitstop_trainer_recover before PREPARE times out. The
          // failure reaches survivors in milliseconds (the failed rank
          // closes its connections), yet one loaded run left a survivor
          // blocked in its all-reduce until this timeout (then 120 s).
          {"PITSTOP_CPU_NCCL_TIMEOUT_MS", "30000"},
          {"RANK", absl::StrCat(rank)},
          {"LOCAL_RANK", absl::StrCat(rank % o_.ranks_per_node)},
          {"WORLD_SIZE", absl::StrCat(world_)}};
}

bool ScenarioRun::WaitAll(std::vector<Proc>* procs, const std::string& what) {
  const absl::Time deadline = absl::Now() + kRunDeadline;
  bool ok = true;
  for (Proc& p : *procs) {
    if (p.killed) continue;
    if (!p.process->Wait(std::max(deadline - absl::Now(), absl::Seconds(1)))) {
      p.process->Stop(absl::Seconds(1));
      Fail(absl::StrCat(what, ": ", p.name, " still running after ",
                        absl::FormatDuration(kRunDeadline), "; killed"));
      ok = false;
    } else if (p.process->wait_status() != 0) {
      Fail(absl::StrCat(what, ": ", p.name, " ended with ",
                        p.process->DescribeExit(), " (log ", dir_, "/", what,
                        "-", p.name, ".log)"));
      ok = false;
    }
  }
  return ok;
}

absl::Status ScenarioRun::Reference() {
  ASSIGN_OR_RETURN(const std::string id, MakeId("ref"));
  Say(absl::StrCat("[sim] reference run: ", world_, " ranks x ", o_.steps,
                   " steps without pitstop (checkpoint at step ",
                   o_.migrate_after_step, ")"));
  std::vector<Proc> procs;
  for (int r = 0; r < world_; ++r) {
    const std::string who = absl::StrCat("r", r);
    std::vector<std::string> argv = Argv("ref", id, who, r);
    argv.insert(argv.end(), {"--save-at", absl::StrCat(o_.migrate_after_step),
                             "--save", Path("ckpt", who, "bin")});
    ASSIGN_OR_RETURN(auto p, Launch(argv, {{"NCCL_PROFILER_PLUGIN", "none"}},
                                    Path("ref", who, "log")));
    procs.push_back({who, r, std::move(p)});
  }
  if (!WaitAll(&procs, "ref")) {
    return absl::InternalError(absl::StrJoin(r_->failures, "; "));
  }
  return absl::OkStatus();
}

absl::Status ScenarioRun::Restart() {
  ASSIGN_OR_RETURN(const std::string id, MakeId("restart"));
  std::vector<Proc> procs;
  const double t0 = NowMs();
  for (int r = 0; r < world_; ++r) {
    const std::string who = absl::StrCat("r", r);
    // One step past the checkpoint: the first step of the restarted job.
    std::vector<std::string> argv =
        Argv("restart", id, who, r, o_.migrate_after_step + 1);
    argv.insert(argv.end(), {"--resume", Path("ckpt", who, "bin")});
    ASSIGN_OR_RETURN(auto p, Launch(argv, {{"NCCL_PROFILER_PLUGIN", "none"}},
                                    Path("restart", who, "log")));
    procs.push_back({who, r, std::move(p)});
  }
  // Polled: a measurement, not an assertion.
  while (StepLog(Path("restart", "r0", "steps")).empty() &&
         procs[0].process->Running()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  r_->restart_ms = NowMs() - t0;
  if (!WaitAll(&procs, "restart")) {
    return absl::InternalError(absl::StrJoin(r_->failures, "; "));
  }
  Say(absl::StrCat(
      "[sim] full restart from the step-", o_.migrate_after_step,
      " checkpoint (new processes, new communicator, first step): ",
      static_cast<int>(r_->restart_ms), " ms"));
  return absl::OkStatus();
}

void ScenarioRun::KillLeaver() {
  std::vector<std::string> names;
  for (Proc& p : procs_) {
    if (p.rank / o_.ranks_per_node != o_.leaver_node) continue;
    p.process->Signal(SIGKILL);
    p.process->Wait(absl::Seconds(10));
    p.killed = true;
    names.push_back(p.name);
  }
  Say(absl::StrCat("[sim] node ", cluster_->host(o_.leaver_node),
                   " fails: its trainer processes (", absl::StrJoin(names, ","),
                   ") are killed; the others' next all-reduce fails and they "
                   "wait in pitstop_trainer_recover"));
}

absl::StatusOr<v1::Migration> RequestMigration(
    v1::Controller::Stub* stub, const v1::MigrateNodeRequest& req) {
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (true) {
    v1::MigrateNodeResponse resp;
    // One try: MigrateNode acts, and a call that did reach the controller
    // before its transport broke must not queue a second migration.
    const grpc::Status st = CallController(
        [&](grpc::ClientContext* ctx) {
          return stub->MigrateNode(ctx, req, &resp);
        },
        /*tries=*/1);
    if (st.ok()) return resp.migration();
    if (st.error_code() != grpc::StatusCode::FAILED_PRECONDITION ||
        absl::Now() > deadline) {
      return absl::FailedPreconditionError(
          absl::StrCat("MigrateNode ", req.host(), " -> ", req.to(), ": ",
                       st.error_message()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

absl::StatusOr<v1::Migration> AwaitMigrationFinished(
    v1::Controller::Stub* stub, const std::string& id,
    const std::function<void(const std::string&)>& say,
    const std::function<bool()>& cancelled) {
  const absl::Time deadline = absl::Now() + kRunDeadline;
  std::string last_state;
  while (absl::Now() < deadline) {
    if (cancelled()) return absl::CancelledError("interrupted");
    v1::GetMigrationRequest req;
    req.set_migration_id(id);
    v1::GetMigrationResponse resp;
    const grpc::Status st = CallController([&](grpc::ClientContext* ctx) {
      return stub->GetMigration(ctx, req, &resp);
    });
    if (!st.ok()) {
      return absl::UnavailableError(
          absl::StrCat("GetMigration ", id, ": ", st.error_message()));
    }
    const v1::Migration& m = resp.migration();
    const std::string state = v1::MigrationState_Name(m.state());
    if (state != last_state) {
      say(absl::StrCat("[sim] migration ", id, ": ", state));
      last_state = state;
    }
    if (m.state() == v1::MIGRATION_STATE_COMMITTED ||
        m.state() == v1::MIGRATION_STATE_ABORTED) {
      return m;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("migration ", id, " not finished after ",
                   absl::FormatDuration(kRunDeadline)));
}

absl::StatusOr<v1::Migration> ScenarioRun::RequestMigration() {
  v1::MigrateNodeRequest req;
  req.set_host(cluster_->host(o_.leaver_node));
  req.set_to(kStandby);
  req.set_job_id(kJob);
  req.set_who("pitstop sim");
  req.set_reason(o_.node_failure ? "node-failure-migration scenario"
                                 : "standby-migration scenario");
  // The leaver's processes are dead: the state comes from a replica.
  req.set_from_replica(o_.node_failure);
  return migration_internal::RequestMigration(stub_.get(), req);
}

absl::StatusOr<v1::Migration> ScenarioRun::AwaitFinished(
    const std::string& id) {
  return AwaitMigrationFinished(
      stub_.get(), id, [this](const std::string& line) { Say(line); },
      [] { return false; });
}

absl::Status ScenarioRun::LaunchJob(const std::string& id) {
  for (int r = 0; r < world_; ++r) {
    const std::string who = absl::StrCat("r", r);
    auto env = PitstopEnv(r / o_.ranks_per_node, r);
    // Rank 0 records the first collectives' outputs for the joiners'
    // shadow iterations (its first kShadowSteps all-reduces suffice).
    if (r == 0) env.emplace_back("PITSTOP_SHADOW_RECORD", dir_ + "/shadow");
    std::vector<std::string> argv = Argv("mig", id, who, r);
    if (o_.degrade && r == SlowRank()) {
      argv.insert(argv.end(),
                  {"--slow-from-step", absl::StrCat(o_.migrate_after_step),
                   "--slow-factor", absl::StrCat(o_.slow_factor)});
    }
    ASSIGN_OR_RETURN(auto p, Launch(argv, env, Path("mig", who, "log")));
    procs_.push_back({who, r, std::move(p)});
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Migration> ScenarioRun::RequestAfterStep() {
  while (static_cast<int>(StepLog(Path("mig", "r0", "steps")).size()) <
         o_.migrate_after_step) {
    if (!procs_[0].process->Running()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (o_.node_failure) KillLeaver();
  Say(absl::StrCat("[sim] step ", o_.migrate_after_step,
                   ": pitstopctl migrate ", cluster_->host(o_.leaver_node),
                   " --to ", kStandby,
                   o_.node_failure ? " --from-replica" : ""));
  return RequestMigration();
}

absl::Status ScenarioRun::StartJoiners(const v1::Migration& m,
                                       const std::string& id) {
  const int standby = o_.nodes;
  std::vector<int> moved;
  for (const v1::MigrationMember& mem : m.members()) {
    if (mem.role() == v1::MIGRATION_ROLE_JOINER) {
      moved.assign(mem.global_ranks().begin(), mem.global_ranks().end());
    }
  }
  Say(absl::StrCat("[sim] migration ", m.migration_id(), ": starting ",
                   moved.size(), " joiner processes on ", kStandby, " (ranks ",
                   absl::StrJoin(moved, ","), ", sandbox mode)"));
  for (int r : moved) {
    const std::string who = absl::StrCat("joiner", r);
    std::vector<std::string> argv = Argv("mig", id, who, r);
    // Shadow iterations: warm up on rank 0's recorded all-reduce outputs
    // in the sandbox before joining.
    argv.insert(argv.end(), {"--join", "--join-timeout-ms", "240000",
                             "--shadow-steps", absl::StrCat(kShadowSteps)});
    auto env = PitstopEnv(standby, r);
    env.emplace_back("PITSTOP_MIGRATION_ROLE", "joiner");
    env.emplace_back("PITSTOP_SHADOW_DIR", dir_ + "/shadow");
    ASSIGN_OR_RETURN(auto p, Launch(argv, env, Path("mig", who, "log")));
    procs_.push_back({who, r, std::move(p)});
  }
  return absl::OkStatus();
}

absl::Status ScenarioRun::Migrate() {
  ASSIGN_OR_RETURN(const std::string id, MakeId("mig"));
  Say(absl::StrCat("[sim] training: ", world_, " ranks (", o_.nodes,
                   " nodes x ", o_.ranks_per_node, ") x ", o_.steps,
                   " steps, pitstop loaded, communicators virtualised",
                   o_.compute_ms > 0
                       ? absl::StrCat(", ", o_.compute_ms,
                                      " ms of emulated GPU time per step")
                       : ""));
  RETURN_IF_ERROR(LaunchJob(id));
  absl::StatusOr<v1::Migration> m =
      o_.degrade ? AwaitPolicyMigration() : RequestAfterStep();
  if (!m.ok()) {
    Fail(std::string(m.status().message()));
    WaitAll(&procs_, "mig");
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(StartJoiners(*m, id));
  absl::StatusOr<v1::Migration> done = AwaitFinished(m->migration_id());
  if (done.ok()) {
    r_->migration = *done;
    if (done->state() != v1::MIGRATION_STATE_COMMITTED) {
      Fail(absl::StrCat("migration ", done->migration_id(),
                        " aborted: ", done->abort_reason()));
    }
  } else {
    Fail(std::string(done.status().message()));
  }
  if (!r_->failures.empty()) {
    // The verdict is FAIL already. The joiners wait for a state that will
    // not come, and after a node failure so do the survivors (in
    // pitstop_trainer_recover, up to its timeout): end every process now
    // rather than make the user wait minutes for the report. Their logs
    // stay in the kept work dir.
    for (Proc& p : procs_) {
      if (p.killed || !p.process->Running()) continue;
      p.process->Stop(absl::Seconds(1));
      p.killed = true;
    }
  }
  WaitAll(&procs_, "mig");
  return absl::OkStatus();
}

void ScenarioRun::JudgeSteps() {
  const int redo = static_cast<int>(r_->migration.switch_seq());
  for (int rank = 0; rank < world_; ++rank) {
    const StepLogLines own =
        StepLog(Path("mig", absl::StrCat("r", rank), "steps"));
    const StepLogLines joined =
        StepLog(Path("mig", absl::StrCat("joiner", rank), "steps"));
    if (!joined.empty() && r_->switch_step < 0) {
      r_->switch_step = joined.front().first;
    }
    const bool moved = rank / o_.ranks_per_node == o_.leaver_node;
    std::string why;
    if (!o_.node_failure) {
      why = CheckMovedOnce(own, joined, o_.steps);
    } else if (moved) {
      why = CheckRecoveredMoved(own, joined, redo, o_.steps);
    } else {
      why = CheckRecoveredStayer(own, redo, o_.steps);
    }
    if (!why.empty()) Fail(absl::StrCat("rank ", rank, "'s steps: ", why));
  }
}

void ScenarioRun::JudgeShadow() {
  const std::string want =
      absl::StrCat("shadow: ", kShadowSteps, " steps in the sandbox");
  for (const Proc& p : procs_) {
    if (p.name.rfind("joiner", 0) != 0) continue;
    const std::string log = ReadFile(Path("mig", p.name, "log"));
    if (log.find(want) == std::string::npos) {
      Fail(absl::StrCat(p.name, " did not warm up on the records (no '", want,
                        "' in ", Path("mig", p.name, "log"), ")"));
    } else {
      ++r_->shadow_joiners;
    }
  }
}

void ScenarioRun::Judge() {
  r_->ranks = world_;
  const std::string reference = ReadFile(Path("ref", "r0", "bin"));
  if (reference.empty()) Fail("the reference run wrote no weights");
  std::map<int, std::string> final_of;  // global rank -> final process
  for (const Proc& p : procs_) final_of[p.rank] = p.name;
  for (const auto& [rank, who] : final_of) {
    ++r_->weights_compared;
    if (!reference.empty() && ReadFile(Path("mig", who, "bin")) == reference) {
      ++r_->weights_identical;
    } else {
      Fail(absl::StrCat(who, " (rank ", rank,
                        "): final weights differ from the undisturbed run"));
    }
  }
  JudgeSteps();
  JudgeShadow();
  JudgeFaults();
  const StepLogLines r0 = StepLog(Path("mig", "r0", "steps"));
  if (r_->switch_step >= 0) {
    const auto [longest, median] = LongestAroundAndMedian(r0, r_->switch_step);
    r_->longest_step_ms = longest;
    r_->median_step_ms = median;
    r_->downtime_ms = longest - median;
    if (o_.degrade) JudgePolicy(r0);
  } else {
    Fail("no joiner ran a step: nothing moved");
  }
  r_->passed = r_->failures.empty();
  if (!r_->passed) KeepWorkDir();
}

}  // namespace migration_internal

absl::StatusOr<MigrationScenarioResult> RunMigrationScenario(
    const MigrationScenarioOptions& options) {
  RETURN_IF_ERROR(ValidateMigrationOptions(options));
  MigrationScenarioResult result;
  result.scenario = options.degrade        ? "degraded-node-migration"
                    : options.node_failure ? "node-failure-migration"
                                           : "standby-migration";
  result.compute_ms = options.compute_ms;
  result.slow_factor = options.slow_factor;
  migration_internal::ScenarioRun run(options, &result);
  auto cancelled = [&options] {
    return options.cancelled && options.cancelled();
  };
  absl::Status s = run.Start();
  if (s.ok() && !cancelled()) s = run.Reference();
  if (s.ok() && !cancelled()) s = run.Restart();
  if (s.ok() && !cancelled()) s = run.Migrate();
  if (cancelled()) return absl::CancelledError("interrupted");
  if (!s.ok()) {
    // Its message may name a log in the work dir: keep it.
    run.KeepWorkDir();
    if (result.work_dir_kept) {
      return absl::Status(s.code(), absl::StrCat(s.message(), " (work dir ",
                                                 result.work_dir, " kept)"));
    }
    return s;
  }
  run.Judge();
  result.controller_address = run.controller_address();
  if (options.before_stop)
    options.before_stop(result, run.controller_address());
  return result;
}

}  // namespace pitstop::sim
