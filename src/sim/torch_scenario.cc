#include "src/sim/torch_scenario.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "pitstop/clock.h"
#include "pitstop/grpc_util.h"
#include "pitstop/status_macros.h"
#include "pitstop/v1/controller.grpc.pb.h"
#include "src/sim/fault_watcher.h"
#include "src/sim/local_cluster.h"
#include "src/sim/torch_faults.h"
#include "src/sim/torch_job.h"

#ifndef PITSTOP_SOURCE_DIR
#define PITSTOP_SOURCE_DIR "."
#endif

namespace pitstop::sim {
namespace {

constexpr char kJob[] = "torch-job";

struct KindInfo {
  const char* name;
  bool fault;
  FaultKind kind;
  const char* expected;  // FaultTruth::expected_class
};

constexpr KindInfo kKinds[] = {
    {"torch-healthy", false, FaultKind::kSlowGpu, ""},
    {"torch-straggler", true, FaultKind::kSlowGpu, "NON_COMM_SLOW"},
    {"torch-hang", true, FaultKind::kNonCommHang, "NON_COMM_HANG"},
    {"torch-crash", true, FaultKind::kCrash, "PROCESS_DIED"},
    {"torch-desync", true, FaultKind::kMismatch, "MISMATCH"},
};

const KindInfo* Kind(const std::string& name) {
  for (const KindInfo& k : kKinds) {
    if (name == k.name) return &k;
  }
  return nullptr;
}

// The job's script: $PITSTOP_TORCH_JOB, else the source tree's.
std::string JobScript() {
  const char* env = std::getenv("PITSTOP_TORCH_JOB");
  if (env != nullptr && *env != '\0') return env;
  return std::string(PITSTOP_SOURCE_DIR) + "/tools/torch-job/train_lm.py";
}

// `value` in front of what the caller's environment has for `name`.
std::string Prepend(const std::string& value, const char* name) {
  const char* old = std::getenv(name);
  return old != nullptr && *old != '\0' ? absl::StrCat(value, ":", old) : value;
}

// What the job needs to run the backend over the NCCL C API from this
// build tree: the CPU NCCL backend as libnccl.so.2 (LD_LIBRARY_PATH), the
// pitstop package (PYTHONPATH) and the backend's extension, built next to
// the package's generated stubs (PITSTOP_PY_GEN, unless the caller set
// it). gloo needs none of it.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> BackendEnv(
    const std::string& backend, const std::string& plugin) {
  std::vector<std::pair<std::string, std::string>> env;
  if (backend == "gloo") return env;
  ASSIGN_OR_RETURN(const std::string nccl, FindPitstopBinary("libnccl.so.2"));
  namespace fs = std::filesystem;
  const fs::path build = fs::path(plugin).parent_path().parent_path();
  env.emplace_back("LD_LIBRARY_PATH",
                   Prepend(fs::path(nccl).parent_path(), "LD_LIBRARY_PATH"));
  env.emplace_back(
      "PYTHONPATH",
      Prepend(std::string(PITSTOP_SOURCE_DIR) + "/python", "PYTHONPATH"));
  if (std::getenv("PITSTOP_PY_GEN") == nullptr) {
    env.emplace_back("PITSTOP_PY_GEN", (build / "python").string());
  }
  return env;
}

// One run: the deployment, the job, the fault and the verdict.
class TorchRun {
 public:
  TorchRun(const TorchScenarioOptions& o, TorchScenarioResult* r)
      : o_(o), r_(r), kind_(*Kind(o.scenario)) {
    world_ = o.nodes * o.ranks_per_node;
    fault_rank_ = o.fault_rank >= 0 ? o.fault_rank : world_ - 1;
  }
  ~TorchRun() { Teardown(); }

  absl::Status Start();
  absl::Status WarmUp();
  void Inject();
  absl::Status Observe();
  void Judge();
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
  double Now() const { return (MonotonicNowNs() - start_ns_) / 1e9; }
  bool Cancelled() const { return o_.cancelled && o_.cancelled(); }
  std::vector<std::string> JobArgs() const;
  std::string Where(int rank) const {
    return absl::StrCat(
        "rank ", rank, " (", cluster_->host(rank / o_.ranks_per_node), " GPU ",
        rank % o_.ranks_per_node, ", pid ", job_->worker_pid(rank), ")");
  }
  void SayNewFaults() {
    for (const ObservedFault& f : watcher_->TakeNew()) Say(FaultLine(f));
  }
  void SayProgress(const char* what);
  // The expected fault, found with the right first suspect and seen
  // CONFIRMED: when it was seen so (ns after the start), else -1.
  int64_t ConfirmedMatch();

  const TorchScenarioOptions& o_;
  TorchScenarioResult* const r_;
  const KindInfo kind_;
  int world_ = 0;
  int fault_rank_ = 0;
  int64_t start_ns_ = 0;
  int64_t next_progress_ns_ = 0;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<v1::Controller::Stub> stub_;
  std::unique_ptr<FaultWatcher> watcher_;
  std::unique_ptr<TorchJob> job_;
  std::unique_ptr<DutyCycle> duty_;
};

std::vector<std::string> TorchRun::JobArgs() const {
  std::vector<std::string> a = {"--backend",    o_.backend,
                                "--seed",       absl::StrCat(o_.seed),
                                "--eval-every", absl::StrCat(o_.eval_every),
                                "--ckpt-every", absl::StrCat(o_.ckpt_every)};
  if (!kind_.fault) {
    if (o_.duration_s > 0) {
      a.insert(a.end(), {"--steps", "100000000", "--duration-s",
                         absl::StrCat(o_.duration_s)});
    } else {
      a.insert(a.end(), {"--steps", "100"});
    }
    return a;
  }
  // A fault run ends when the verdict is in; the job would train on.
  a.insert(a.end(), {"--steps", "100000000"});
  if (kind_.kind == FaultKind::kMismatch) {
    a.insert(a.end(), {"--inject-desync",
                       absl::StrCat(fault_rank_, ":", o_.warmup_steps)});
  }
  return a;
}

absl::Status TorchRun::Start() {
  ASSIGN_OR_RETURN(const std::string plugin,
                   FindPitstopBinary("libnccl-profiler-pitstop.so"));
  LocalClusterOptions co;
  co.nodes = o_.nodes;
  co.work_dir = o_.work_dir;
  co.keep_work_dir = o_.keep_work_dir;
  co.log_level = o_.log_level;
  co.agent_batch_ms = 200;
  Say(absl::StrCat("[sim] scenario ", o_.scenario, ": ", r_->description));
  Say(absl::StrCat("[sim] starting pitstop-controller and ", o_.nodes,
                   " pitstop-agent(s) on loopback"));
  ASSIGN_OR_RETURN(cluster_, LocalCluster::Start(co));
  r_->controller_address = cluster_->controller_address();
  r_->work_dir = cluster_->work_dir();
  r_->work_dir_kept = o_.keep_work_dir || !o_.work_dir.empty();
  Say(absl::StrCat("[sim] controller at ", cluster_->controller_address(),
                   ", logs and database in ", cluster_->work_dir()));
  auto channel = CreateChannel(cluster_->controller_address());
  stub_ = v1::Controller::NewStub(channel);
  start_ns_ = MonotonicNowNs();
  watcher_ = std::make_unique<FaultWatcher>(channel, start_ns_);

  TorchJobOptions jo;
  jo.nodes = o_.nodes;
  jo.ranks_per_node = o_.ranks_per_node;
  jo.script = JobScript();
  jo.args = JobArgs();
  jo.plugin = plugin;
  for (int i = 0; i < o_.nodes; ++i) {
    jo.agent_sockets.push_back(cluster_->shm_socket(i));
    jo.hosts.push_back(cluster_->host(i));
  }
  jo.job_id = kJob;
  ASSIGN_OR_RETURN(jo.env, BackendEnv(o_.backend, plugin));
  jo.env.emplace_back("PITSTOP_CPU_NCCL_STORE_DIR",
                      cluster_->work_dir() + "/nccl");
  jo.out_dir = cluster_->work_dir() + "/job";
  jo.log_dir = cluster_->work_dir();
  Say(absl::StrCat("[sim] torchrun x ", o_.nodes, " (", o_.nodes, " nodes x ",
                   o_.ranks_per_node, " ranks, backend ", o_.backend,
                   ", pitstop LD_PRELOADed): ", jo.script, " ",
                   absl::StrJoin(jo.args, " ")));
  ASSIGN_OR_RETURN(job_, TorchJob::Start(jo));
  return job_->FindWorkers(absl::Minutes(3));
}

void TorchRun::SayProgress(const char* what) {
  const int64_t now = MonotonicNowNs();
  if (now < next_progress_ns_) return;
  next_progress_ns_ = now + 3'000'000'000;
  Say(absl::StrFormat(
      "[sim %6.1fs] %s: %d/%d torchrun running, rank 0 at step %d, %d "
      "collectives joined by the controller",
      Now(), what, job_->Running(), o_.nodes, job_->StepsDone(0),
      JoinedCollectives(stub_.get())));
}

absl::Status TorchRun::WarmUp() {
  std::vector<std::string> pids;
  for (int r = 0; r < world_; ++r) {
    pids.push_back(absl::StrCat(r, ":", job_->worker_pid(r)));
  }
  Say(absl::StrFormat("[sim %6.1fs] workers (rank:pid) %s", Now(),
                      absl::StrJoin(pids, " ")));
  if (!kind_.fault) return absl::OkStatus();
  const int64_t deadline = MonotonicNowNs() + 180'000'000'000;
  while (job_->StepsDone(fault_rank_) < o_.warmup_steps) {
    SayNewFaults();
    SayProgress("warming up");
    if (Cancelled()) return absl::CancelledError("interrupted");
    if (job_->Running() < o_.nodes || MonotonicNowNs() > deadline) {
      return absl::InternalError(absl::StrCat(
          "the job did not reach step ", o_.warmup_steps,
          " (torchrun: ", absl::StrJoin(job_->Exits(), ", "), "; logs ",
          cluster_->work_dir(), "/torchrun-node*.log)"));
    }
    usleep(20000);
  }
  return absl::OkStatus();
}

void TorchRun::Inject() {
  if (!kind_.fault) return;
  const pid_t pid = job_->worker_pid(fault_rank_);
  std::string what;
  switch (kind_.kind) {
    case FaultKind::kSlowGpu:
      duty_ = std::make_unique<DutyCycle>(pid, absl::Milliseconds(o_.stop_ms),
                                          absl::Milliseconds(o_.period_ms));
      what = absl::StrFormat("throttled: SIGSTOP %.0f ms of every %.0f ms",
                             o_.stop_ms, o_.period_ms);
      break;
    case FaultKind::kNonCommHang: {
      // Anywhere in the step: in the rank's own work, or inside the
      // gradient all-reduce (a step takes ~50-100 ms here). Seeded: a
      // rerun with the same --seed stops it at the same point.
      const int delay_ms = static_cast<int>(std::mt19937_64(o_.seed)() % 100);
      usleep(static_cast<useconds_t>(delay_ms) * 1000);
      kill(pid, SIGSTOP);
      what = absl::StrCat("stopped for good (SIGSTOP), ", delay_ms,
                          " ms after it logged a step");
      break;
    }
    case FaultKind::kCrash:
      kill(pid, SIGKILL);
      what = "killed (SIGKILL)";
      break;
    default:  // kMismatch: the job's knob fires at the warm-up step
      what = absl::StrCat("issues an all-gather at step ", o_.warmup_steps,
                          " where the others all-reduce");
      break;
  }
  r_->injected_ns = MonotonicNowNs() - start_ns_;
  r_->steps_at_injection = job_->StepsDone(fault_rank_);
  r_->description = absl::StrCat(Where(fault_rank_), " ", what);
  Say(absl::StrFormat("[sim %6.1fs] INJECT %s", Now(), r_->description));

  FaultTruth t;
  t.spec.kind = kind_.kind;
  t.spec.rank = fault_rank_;
  t.spec.at_s = r_->injected_ns / 1e9;
  t.onset_ns = r_->injected_ns;
  t.expected_class = kind_.expected;
  t.rank = fault_rank_;
  t.host = cluster_->host(fault_rank_ / o_.ranks_per_node);
  t.gpu = fault_rank_ % o_.ranks_per_node;
  r_->plan.truths.push_back(t);
}

int64_t TorchRun::ConfirmedMatch() {
  const std::vector<ObservedFault> seen = watcher_->Snapshot();
  const RunScore s = ScoreRun(r_->plan, seen);
  if (s.truths.empty() || !s.truths[0].localised) return -1;
  for (const ObservedFault& f : seen) {
    if (f.fault.fault_id() == s.truths[0].fault_id) return f.confirmed_seen_ns;
  }
  return -1;
}

absl::Status TorchRun::Observe() {
  const int64_t deadline =
      MonotonicNowNs() + static_cast<int64_t>(o_.observe_s * 1e9);
  int64_t settle_until = 0;
  while (true) {
    SayNewFaults();
    SayProgress(kind_.fault ? "after the fault" : "training");
    if (Cancelled()) return absl::CancelledError("interrupted");
    const int64_t now = MonotonicNowNs();
    if (!kind_.fault) {
      if (job_->Running() == 0) break;  // the job ended by itself
    } else {
      if (settle_until == 0) {
        if (const int64_t c = ConfirmedMatch(); c >= 0) {
          r_->confirmed_after_ns = std::max<int64_t>(0, c - r_->injected_ns);
          settle_until = now + static_cast<int64_t>(o_.settle_s * 1e9);
        }
      }
      if (settle_until > 0 && now >= settle_until) break;
      if (now > deadline) break;
      if (kind_.kind != FaultKind::kCrash && job_->Running() < o_.nodes) {
        r_->problems.push_back(
            absl::StrCat("the job ended before the verdict (torchrun: ",
                         absl::StrJoin(job_->Exits(), ", "), ")"));
        break;
      }
    }
    usleep(100000);
  }
  if (!kind_.fault) {
    if (!job_->AllExitedCleanly()) {
      r_->problems.push_back(absl::StrCat(
          "torchrun ended with ", absl::StrJoin(job_->Exits(), ", "), " (logs ",
          cluster_->work_dir(), "/torchrun-node*.log)"));
    }
    usleep(2'000'000);  // the agents' last batches
  }
  return absl::OkStatus();
}

void TorchRun::Judge() {
  SayNewFaults();
  r_->steps_done = job_->StepsDone(0);
  absl::StatusOr<std::vector<v1::Fault>> listed = ListAllFaults(stub_.get());
  if (!listed.ok()) {
    r_->problems.push_back(
        absl::StrCat("ListFaults: ", listed.status().message()));
    listed = std::vector<v1::Fault>();
  }
  r_->faults = watcher_->Merge(*listed, MonotonicNowNs() - start_ns_);
  r_->score = ScoreRun(r_->plan, r_->faults);
  r_->wall_s = Now();
  if (!r_->passed()) KeepWorkDir();
}

void TorchRun::Teardown() {
  if (duty_ != nullptr) duty_->Stop();
  if (job_ != nullptr) job_->Kill();
  if (watcher_ != nullptr) watcher_->Stop();
  if (cluster_ != nullptr) {
    const absl::Status st = cluster_->Shutdown(absl::Seconds(5));
    if (!st.ok()) Say(absl::StrCat("[sim] warning: ", st.message()));
  }
  duty_.reset();
  job_.reset();
  watcher_.reset();
  cluster_.reset();
}

}  // namespace

const std::vector<std::pair<std::string, std::string>>& TorchScenarios() {
  static const auto* list = new std::vector<
      std::pair<std::string, std::string>>{
      {"torch-straggler",
       "a real PyTorch DDP job (byte-level LM on Debian's fortunes, torchrun "
       "per node, pitstop LD_PRELOADed); one rank's process is throttled "
       "(SIGSTOP/SIGCONT duty cycle): NON_COMM_SLOW on that rank"},
      {"torch-hang",
       "the same job; one rank's process is stopped for good (SIGSTOP): "
       "NON_COMM_HANG on that rank"},
      {"torch-crash",
       "the same job; one rank's process is killed (SIGKILL), torchrun stops "
       "the rest: PROCESS_DIED on that rank"},
      {"torch-desync",
       "the same job; one rank issues an all-gather where the others "
       "all-reduce: MISMATCH on that rank"},
      {"torch-healthy",
       "the same job with checkpoints and evaluations, no fault: nothing may "
       "be raised (--duration-s S trains S seconds)"}};
  return *list;
}

bool IsTorchScenario(const std::string& name) { return Kind(name) != nullptr; }

std::string TorchJobScript() { return JobScript(); }

absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
TorchBackendEnv(const std::string& backend, const std::string& plugin) {
  return BackendEnv(backend, plugin);
}

absl::Status ValidateTorchOptions(const TorchScenarioOptions& o) {
  if (!IsTorchScenario(o.scenario)) {
    return absl::InvalidArgumentError(
        absl::StrCat("no torch scenario '", o.scenario, "'"));
  }
  if (o.nodes < 1 || o.ranks_per_node < 1 || o.nodes * o.ranks_per_node < 2) {
    return absl::InvalidArgumentError(
        "nodes x ranks_per_node: the job needs at least 2 ranks");
  }
  if (o.fault_rank >= o.nodes * o.ranks_per_node) {
    return absl::InvalidArgumentError(
        absl::StrCat("fault rank ", o.fault_rank, ": the job has ranks 0..",
                     o.nodes * o.ranks_per_node - 1));
  }
  if (o.warmup_steps < 1 || o.eval_every < 1 || o.ckpt_every < 1) {
    return absl::InvalidArgumentError(
        "warmup_steps, eval_every and ckpt_every must be >= 1");
  }
  if (!(o.stop_ms > 0 && o.stop_ms < o.period_ms)) {
    return absl::InvalidArgumentError(
        absl::StrCat("straggler duty cycle: stop_ms ", o.stop_ms,
                     " must be in (0, period_ms ", o.period_ms, ")"));
  }
  if (o.duration_s < 0 || o.observe_s <= 0 || o.settle_s < 0) {
    return absl::InvalidArgumentError(
        "duration_s, observe_s and settle_s must be >= 0 (observe_s > 0)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TorchScenarioResult>> RunTorchScenario(
    const TorchScenarioOptions& options) {
  RETURN_IF_ERROR(ValidateTorchOptions(options));
  auto result = std::make_unique<TorchScenarioResult>();
  result->scenario = options.scenario;
  result->plan.scenario.name = options.scenario;
  result->description = "no fault injected";
  for (const auto& [name, about] : TorchScenarios()) {
    if (name == options.scenario) result->description = about;
  }
  TorchRun run(options, result.get());
  absl::Status s = run.Start();
  if (s.ok()) s = run.WarmUp();
  if (s.ok()) {
    run.Inject();
    s = run.Observe();
  }
  if (!s.ok()) {
    if (!absl::IsCancelled(s)) run.KeepWorkDir();
    run.Teardown();
    if (result->work_dir_kept && !absl::IsCancelled(s)) {
      return absl::Status(s.code(), absl::StrCat(s.message(), " (work dir ",
                                                 result->work_dir, " kept)"));
    }
    return s;
  }
  run.Judge();
  if (options.before_stop) options.before_stop(*result);
  run.Teardown();
  return result;
}

}  // namespace pitstop::sim
