#include "src/sim/runner.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pitstop/clock.h"
#include "pitstop/grpc_util.h"
#include "pitstop/status_macros.h"
#include "pitstop/sync.h"
#include "pitstop/v1/controller.grpc.pb.h"
#include "src/sim/fault_watcher.h"
#include "src/sim/local_cluster.h"
#include "src/sim/report.h"
#include "src/sim/subprocess.h"

namespace pitstop::sim {

namespace {

using Say = std::function<void(const std::string&)>;

// RunScenario's steps, in order.
LocalClusterOptions ClusterOptionsOf(const Scenario& resolved,
                                     const RunOptions& options) {
  LocalClusterOptions copts;
  copts.nodes = resolved.nodes;
  for (int i = 0; i < resolved.nodes; ++i) {
    copts.host_names.push_back(HostName(i));
  }
  copts.work_dir = options.work_dir;
  copts.keep_work_dir = options.keep_work_dir;
  copts.log_level = options.daemon_log_level;
  copts.agent_batch_ms = options.agent_batch_ms;
  copts.controller_config = options.controller_config;
  if (!resolved.fabric.empty()) {
    copts.controller_extra_args = {"--fabric", resolved.fabric,
                                   "--planning-measure-nics",
                                   resolved.measure_nics ? "true" : "false"};
  }
  return copts;
}

// The resolved scenario in the work dir, for the rank processes.
absl::StatusOr<std::string> WriteScenario(const LocalCluster& cluster,
                                          const Scenario& resolved) {
  const std::string path = cluster.work_dir() + "/scenario.yaml";
  std::ofstream out(path);
  out << ScenarioToYaml(resolved);
  if (!out.good()) {
    return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  return path;
}

// One emulated rank process per rank, each pointed at its node's agent.
absl::StatusOr<std::vector<std::unique_ptr<Subprocess>>> StartRanks(
    const Scenario& resolved, const Plan& plan, const LocalCluster& cluster,
    const std::string& rank_bin, const std::string& plugin,
    const std::string& scenario_path, int64_t start_ns) {
  const int world = resolved.world_size();
  std::vector<std::unique_ptr<Subprocess>> ranks;
  for (int r = 0; r < world; ++r) {
    const RankPlan& rp = plan.ranks[r];
    SubprocessOptions so;
    so.argv = {
        rank_bin,        "--scenario", scenario_path,          "--rank",
        absl::StrCat(r), "--start-ns", absl::StrCat(start_ns), "--plugin",
        plugin};
    so.env = {{"PITSTOP_AGENT_SOCKET", cluster.shm_socket(rp.node)},
              {"PITSTOP_HOST", HostName(rp.node)},
              {"PITSTOP_JOB_ID", resolved.job_id},
              {"RANK", absl::StrCat(r)},
              {"LOCAL_RANK", absl::StrCat(rp.gpu)},
              {"WORLD_SIZE", absl::StrCat(world)}};
    so.log_path = absl::StrCat(cluster.work_dir(), "/rank", r, ".log");
    ASSIGN_OR_RETURN(auto p, Subprocess::Start(so));
    ranks.push_back(std::move(p));
  }
  return ranks;
}

// Until every rank exited (or 20 s past the plan's end): progress lines,
// fault lines, operator link marks and flow-plan polls.
void WatchRun(const Scenario& resolved, const Plan& plan,
              const RunOptions& options, int64_t start_ns,
              const std::vector<std::unique_ptr<Subprocess>>& ranks,
              v1::Controller::Stub* stub, FaultWatcher* watcher,
              PlanWatcher* plans, const Say& say) {
  int64_t end_plan = plan.duration_ns;
  for (const RankPlan& rp : plan.ranks)
    end_plan = std::max(end_plan, rp.finish_ns);
  const int64_t hard_deadline = start_ns + end_plan + 20'000'000'000;
  int64_t next_progress = start_ns;
  int64_t next_plan_poll = start_ns;
  size_t next_mark = 0;
  while (true) {
    int alive = 0;
    for (auto& p : ranks) alive += p->Running();
    const int64_t now = MonotonicNowNs();
    for (const ObservedFault& f : watcher->TakeNew()) say(FaultLine(f));
    if (now >= next_progress && now >= start_ns) {
      say(absl::StrFormat(
          "[sim %6.1fs/%.0fs] %d/%d ranks running, %d "
          "collectives joined by the controller",
          (now - start_ns) / 1e9, resolved.duration_s, alive,
          static_cast<int>(ranks.size()), JoinedCollectives(stub)));
      next_progress =
          now + static_cast<int64_t>(options.progress_period_s * 1e9);
    }
    while (next_mark < resolved.link_marks.size() &&
           now >= start_ns + static_cast<int64_t>(
                                 resolved.link_marks[next_mark].at_s * 1e9)) {
      const Scenario::LinkMark& m = resolved.link_marks[next_mark++];
      plans->Mark((now - start_ns) / 1e9, m.link, m.share, say);
    }
    if (!resolved.fabric.empty() && now >= next_plan_poll) {
      plans->Poll((now - start_ns) / 1e9, say);
      next_plan_poll = now + 500'000'000;
    }
    if (alive == 0 || now > hard_deadline) break;
    usleep(100000);
  }
}

// How each rank process ended: planned crashes counted, the rest errors.
void CollectExits(const Plan& plan,
                  const std::vector<std::unique_ptr<Subprocess>>& ranks,
                  RunResult* result) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r]->Running()) {
      result->rank_errors.push_back(absl::StrCat("rank ", r, " did not exit"));
      ranks[r]->Stop(absl::Seconds(1));
      continue;
    }
    const int st = ranks[r]->wait_status();
    const bool planned_crash = plan.ranks[r].crash_ns < plan.duration_ns;
    const bool clean = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (planned_crash && WIFEXITED(st) && WEXITSTATUS(st) == 1) {
      ++result->ranks_crashed;
    } else if (!clean) {
      result->rank_errors.push_back(absl::StrCat("rank ", r, ": ",
                                                 ranks[r]->DescribeExit(),
                                                 " (log rank", r, ".log)"));
    }
  }
}

// The last flow plan, each node's tuner table, and which epoch each host
// acked.
bool EveryHostAckedTheNewestEpoch(const v1::FlowPlan& plan) {
  for (const v1::FlowPlanHost& h : plan.hosts()) {
    if (h.epoch_acked() != h.epoch_sent()) return false;
  }
  return true;
}

void ReportPlans(const LocalCluster& cluster, int64_t start_ns,
                 PlanWatcher* plans, const Say& say, RunResult* result) {
  // A host acks a directive with its agent's next batch; on a loaded
  // machine the last one can still be on its way after the drain. Wait for
  // it (bounded: a host that never acks is reported as such).
  constexpr int64_t kAckWaitNs = 10'000'000'000;
  const int64_t deadline = MonotonicNowNs() + kAckWaitNs;
  plans->Poll((MonotonicNowNs() - start_ns) / 1e9, say);
  while (!EveryHostAckedTheNewestEpoch(plans->last()) &&
         MonotonicNowNs() < deadline) {
    usleep(200'000);
    plans->Poll((MonotonicNowNs() - start_ns) / 1e9, say);
  }
  result->plan_epochs = plans->epochs();
  result->final_plan = plans->last();
  for (int i = 0; i < cluster.nodes(); ++i) {
    TunerTableView t = ReadTunerTable(cluster.host(i), cluster.tuner_table(i));
    say(absl::StrFormat(
        "[sim] tuner table of %s: %s", t.host,
        t.error.empty()
            ? absl::StrFormat("%d steered communicators", t.entries.size())
            : t.error));
    for (const tuner::Steering& s : t.entries) {
      say(absl::StrFormat(
          "[sim]   comm %x: plan epoch %d, max_channels %d, %d ranks on %d "
          "nodes",
          s.comm_id, s.plan_epoch, s.max_channels, s.n_ranks, s.n_nodes));
    }
    result->tuner_tables.push_back(std::move(t));
  }
  for (const v1::FlowPlanHost& h : result->final_plan.hosts()) {
    say(absl::StrFormat("[sim] %s acked flow plan epoch %d (sent %d)", h.host(),
                        h.epoch_acked(), h.epoch_sent()));
  }
}

// "[sim] schedule: slow_link at 8 s on node0 <-> node2 (not observable: ...)".
std::string ScheduleLine(const FaultTruth& t) {
  std::string note;
  switch (StateOf(t)) {
    case TruthState::kDeceptiveNormal:
      note = " (deceptive normal: no fault expected)";
      break;
    case TruthState::kNotObservable:
      note = absl::StrCat(" (not observable: ", t.not_observable,
                          "; scored neither found nor missed)");
      break;
    case TruthState::kDidNotTakeEffect:
      note = " (does not take effect in this run; not scored)";
      break;
    case TruthState::kExpected:
      break;
  }
  return absl::StrCat("[sim] schedule: ", t.Describe(), note);
}

}  // namespace

absl::StatusOr<std::unique_ptr<RunResult>> RunScenario(
    const Scenario& scenario, const RunOptions& options) {
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  const int64_t wall_start = MonotonicNowNs();
  ASSIGN_OR_RETURN(const std::string rank_bin,
                   FindPitstopBinary("pitstop-sim-rank"));
  ASSIGN_OR_RETURN(const std::string plugin,
                   FindPitstopBinary("libnccl-profiler-pitstop.so"));
  // Ranks read the scenario back from YAML; so does the coordinator, so both
  // build the plan from the very same numbers.
  ASSIGN_OR_RETURN(Scenario resolved,
                   ParseScenario(ScenarioToYaml(scenario), scenario.source));
  auto result = std::make_unique<RunResult>();
  const int64_t plan_started = MonotonicNowNs();
  ASSIGN_OR_RETURN(result->plan, BuildPlan(resolved));
  const Plan& plan = result->plan;
  // Every rank process builds the same plan before it replays its part: a
  // long run's plan (an hour: ~20 s of CPU each) must be ready before the
  // start, or the ranks replay the first minutes late and compressed.
  const int64_t plan_ns = MonotonicNowNs() - plan_started;
  const int64_t cores =
      std::max<int64_t>(1, std::thread::hardware_concurrency());
  say(absl::StrCat("[sim] scenario ", resolved.name, ": ",
                   resolved.description));
  // Said at load time, before anything starts: which injections the job's
  // traffic cannot show, and why.
  for (const FaultTruth& t : plan.truths) say(ScheduleLine(t));
  say(absl::StrCat("[sim] starting pitstop-controller and ", resolved.nodes,
                   " pitstop-agent(s) on loopback"));
  ASSIGN_OR_RETURN(std::unique_ptr<LocalCluster> cluster,
                   LocalCluster::Start(ClusterOptionsOf(resolved, options)));
  result->controller_address = cluster->controller_address();
  result->work_dir = cluster->work_dir();
  ASSIGN_OR_RETURN(const std::string scenario_path,
                   WriteScenario(*cluster, resolved));
  if (options.on_cluster_ready) {
    options.on_cluster_ready(cluster->controller_address(),
                             cluster->work_dir());
  }
  auto channel = CreateChannel(cluster->controller_address());
  auto stub = v1::Controller::NewStub(channel);
  const int world = resolved.world_size();
  // Time for every rank process to load the plugin and connect first.
  const int64_t start_ns = MonotonicNowNs() + 1'500'000'000 +
                           int64_t{60'000'000} * world +
                           2 * plan_ns * ((world + cores - 1) / cores);
  FaultWatcher watcher(channel, start_ns);
  say(absl::StrCat("[sim] starting ", world, " emulated ranks (",
                   resolved.nodes, " nodes x ", resolved.gpus_per_node,
                   " GPUs, ", plan.comms.size(), " communicators); job runs ",
                   resolved.duration_s, " s"));
  ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Subprocess>> ranks,
                   StartRanks(resolved, plan, *cluster, rank_bin, plugin,
                              scenario_path, start_ns));
  PlanWatcher plans(stub.get(), resolved.job_id);
  WatchRun(resolved, plan, options, start_ns, ranks, stub.get(), &watcher,
           &plans, say);
  CollectExits(plan, ranks, result.get());
  usleep(static_cast<useconds_t>(options.drain_s * 1e6));
  for (const ObservedFault& f : watcher.TakeNew()) say(FaultLine(f));
  ASSIGN_OR_RETURN(std::vector<v1::Fault> listed, ListAllFaults(stub.get()));
  result->faults = watcher.Merge(listed, MonotonicNowNs() - start_ns);
  result->score = ScoreRun(result->plan, result->faults);
  if (!resolved.fabric.empty()) {
    ReportPlans(*cluster, start_ns, &plans, say, result.get());
  }
  result->wall_s = (MonotonicNowNs() - wall_start) / 1e9;
  if (options.after_run) options.after_run(*result);
  if (options.keep_running) {
    while (options.keep_running() && cluster->ControllerRunning()) {
      usleep(200000);
    }
    say("[sim] stopping the cluster");
  }
  watcher.Stop();
  const absl::Status shut = cluster->Shutdown(absl::Seconds(5));
  if (!shut.ok()) say(absl::StrCat("[sim] warning: ", shut.message()));
  if (!options.keep_running) {
    result->wall_s = (MonotonicNowNs() - wall_start) / 1e9;
  }
  return result;
}

}  // namespace pitstop::sim
