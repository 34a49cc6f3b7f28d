// Wall time of the planner at scale: per repetition, a full plan of a ring
// all-reduce on the fabric, then a re-plan after the plan's busiest
// switch-to-switch link (both directions) drops to a fraction of its
// capacity, as `pitstop plan` times them (crc32 switches: flows the re-plan
// moves are pinned to a source port). Prints one JSON line per repetition
// (wall and CPU milliseconds of each; the plan's phases in wall ms and its
// bottleneck searches; the busiest link's time and a digest of every path,
// so a faster planner can be checked to plan the same) and a summary line
// with the medians.
//
//   pitstop-plan-scale-bench SPEC [--placement packed|scattered]
//       [--ranks N] [--qps Q] [--reps N] [--degrade-busiest F]
//       [--evaluate 1]
//
// --evaluate 1: instead, one line with what `pitstop plan -o json` reports
// of the same job (c4p::Evaluate: ECMP over 100 crc32 seeds, the plan, the
// bound, healthy and after the re-plan), for the targets table of
// docs/planning.md on every real description.
//
// SPEC as `pitstop plan --topology`. Exit 2 on a usage or input error.
// tools/plan-scale-bench.sh runs two builds of it side by side.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "src/c4p/ecmp.h"
#include "src/c4p/evaluate.h"
#include "src/c4p/fabric_io.h"
#include "src/c4p/flows.h"
#include "src/c4p/planner.h"

namespace pitstop::c4p {
namespace {

struct Args {
  std::string spec;
  Placement placement = Placement::kPacked;
  int ranks = 0;
  int qps = 1;
  int reps = 5;
  double degrade = 0.25;
  bool evaluate = false;
};

double CpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

double WallMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool ParseArgs(int argc, char** argv, Args* a) {
  if (argc < 2) return false;
  a->spec = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--placement" && (v == "packed" || v == "scattered")) {
      a->placement = v == "packed" ? Placement::kPacked : Placement::kScattered;
    } else if (k == "--ranks") {
      a->ranks = std::atoi(v.c_str());
    } else if (k == "--qps") {
      a->qps = std::max(1, std::atoi(v.c_str()));
    } else if (k == "--reps") {
      a->reps = std::max(1, std::atoi(v.c_str()));
    } else if (k == "--degrade-busiest") {
      a->degrade = std::atof(v.c_str());
    } else if (k == "--evaluate") {
      a->evaluate = v == "1";
    } else {
      return false;
    }
  }
  return (argc % 2) == 0;
}

// The plan's busiest switch-to-switch link (by time at its capacity).
int Busiest(const Fabric& fab, const std::vector<Flow>& flows,
            const FlowPlan& plan) {
  const std::vector<double> bytes = Planner::LinkBytes(fab, flows, plan);
  int busiest = -1;
  for (size_t l = 0; l < bytes.size(); ++l) {
    if (fab.link(l).kind != LinkKind::kFabric || bytes[l] <= 0) continue;
    if (busiest < 0 ||
        bytes[l] / fab.link(l).gbps > bytes[busiest] / fab.link(busiest).gbps) {
      busiest = static_cast<int>(l);
    }
  }
  return busiest;
}

struct Rep {
  double plan_wall = 0, plan_cpu = 0, replan_wall = 0, replan_cpu = 0;
  Planner::PhaseTimes phases;
  double busiest_ms = 0;         // the plan's busiest network link, at capacity
  double replan_busiest_ms = 0;  // the re-plan's, on the degraded fabric
  uint64_t digest = 0;  // of every planned path: equal digests, same plan
};

// The busiest network link's time under `plan` and a digest of its paths,
// so a faster planner can be checked to give the same plan.
double BusiestMs(const Fabric& fab, const std::vector<Flow>& flows,
                 const FlowPlan& plan) {
  const std::vector<double> bytes = Planner::LinkBytes(fab, flows, plan);
  double worst = 0;
  for (size_t l = 0; l < bytes.size(); ++l) {
    if (fab.link(l).kind == LinkKind::kNvLink || bytes[l] <= 0) continue;
    worst = std::max(worst, bytes[l] * 8 / (fab.link(l).gbps * 1e6));
  }
  return worst;
}

void Describe(const Fabric& fab, const std::vector<Flow>& flows,
              const FlowPlan& plan, Rep* r) {
  r->busiest_ms = BusiestMs(fab, flows, plan);
  uint64_t h = 0;
  for (const PlannedPath& p : plan.paths) {
    for (int l : p.links) h = Mix64(h ^ static_cast<uint64_t>(l));
    h = Mix64(h ^ 0xffff);
  }
  r->digest = h;
}

// One repetition on a fresh copy of the fabric.
Rep RunOnce(const Fabric& healthy, const std::vector<Flow>& flows,
            double degrade, int* crossing, int* moved) {
  Fabric fab = healthy;
  Rep r;
  // As `pitstop plan` does: moved flows are pinned to a source port for
  // the fabric's hash and switch seeds (part of the re-plan's cost).
  absl::StatusOr<std::unique_ptr<HashFunction>> hash = MakeHash("crc32");
  PlannerOptions po;
  po.hash = hash.ok() ? hash->get() : nullptr;
  po.fabric_seed = 0x7c4;
  Planner planner(&fab, &flows, po);
  double w = WallMs(), c = CpuMs();
  FlowPlan plan = planner.Plan(1);
  r.plan_wall = WallMs() - w;
  r.plan_cpu = CpuMs() - c;
  r.phases = planner.phase_times();
  Describe(fab, flows, plan, &r);
  const int busiest = Busiest(fab, flows, plan);
  if (busiest < 0) return r;
  for (int l : {busiest, busiest ^ 1}) {
    fab.SetCapacity(l, fab.link(l).nominal_gbps * degrade);
  }
  Planner::ReplanStats stats;
  w = WallMs();
  c = CpuMs();
  FlowPlan after =
      planner.Replan(std::move(plan), {busiest, busiest ^ 1}, 2, &stats);
  r.replan_wall = WallMs() - w;
  r.replan_cpu = CpuMs() - c;
  r.replan_busiest_ms = BusiestMs(fab, flows, after);
  *crossing = stats.crossing;
  *moved = stats.moved;
  return r;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "plan-scale-bench: %s\n",
               std::string(s.message()).c_str());
  return 2;
}

// What `pitstop plan -o json` reports, in one line.
int RunEvaluate(const Args& a, Fabric* fab) {
  EvalOptions o;
  o.ranks = a.ranks;
  o.placement = a.placement;
  o.ring.qps_per_connection = a.qps;
  o.pin_ports = false;  // ports do not change completion times
  o.degrade_busiest = a.degrade;
  absl::StatusOr<EvalReport> r = Evaluate(fab, o);
  if (!r.ok()) return Fail(r.status());
  const Evaluation& h = r->healthy;
  std::printf(
      "{\"ecmp_p50_ms\": %.3f, \"ecmp_p99_ms\": %.3f, \"planned_ms\": %.3f, "
      "\"bound_ms\": %.3f, \"network_flows\": %d, \"degraded\": %s, "
      "\"recovery\": %.3f, \"moved\": %d, \"ecmp_p50_degraded_ms\": %.3f, "
      "\"planned_degraded_ms\": %.3f, \"warnings\": %zu}\n",
      1e3 * h.ecmp.completion_s_p50, 1e3 * h.ecmp.completion_s_p99,
      1e3 * h.planned.completion_s, 1e3 * h.bound.completion_s,
      r->network_flows, r->degraded ? "true" : "false", r->recovery, r->moved,
      1e3 * r->after.ecmp.completion_s_p50, 1e3 * r->after.planned.completion_s,
      fab->warnings().size());
  return 0;
}

int Run(const Args& a) {
  absl::StatusOr<Fabric> fab = LoadFabric(a.spec, ClosCsvOptions{});
  if (!fab.ok()) return Fail(fab.status());
  for (const std::string& w : fab->warnings()) {
    std::fprintf(stderr, "warning: %s\n", w.c_str());
  }
  if (a.evaluate) return RunEvaluate(a, &*fab);
  const int ranks = a.ranks > 0 ? a.ranks : fab->gpu_count();
  absl::StatusOr<std::vector<int>> place =
      PlaceJob(*fab, ranks, a.placement, 1);
  if (!place.ok()) return Fail(place.status());
  RingSpec ring;
  ring.qps_per_connection = a.qps;
  int channels = 0;
  const std::vector<Flow> flows = BuildRingFlows(*fab, *place, ring, &channels);
  std::vector<double> pw, pc, rw, rc;
  int crossing = 0, moved = 0;
  for (int i = 0; i < a.reps; ++i) {
    const Rep r = RunOnce(*fab, flows, a.degrade, &crossing, &moved);
    std::printf(
        "{\"rep\": %d, \"plan_wall_ms\": %.1f, \"plan_cpu_ms\": %.1f, "
        "\"replan_wall_ms\": %.2f, \"replan_cpu_ms\": %.2f, "
        "\"greedy_ms\": %.1f, \"goal_ms\": %.1f, \"repair_ms\": %.1f, "
        "\"negotiate_ms\": %.1f, \"searches\": %lld, "
        "\"busiest_link_ms\": %.4f, \"replan_busiest_link_ms\": %.4f, "
        "\"plan_digest\": \"%016llx\"}\n",
        i, r.plan_wall, r.plan_cpu, r.replan_wall, r.replan_cpu,
        r.phases.greedy_ms, r.phases.goal_ms, r.phases.repair_ms,
        r.phases.negotiate_ms, static_cast<long long>(r.phases.searches),
        r.busiest_ms, r.replan_busiest_ms,
        static_cast<unsigned long long>(r.digest));
    pw.push_back(r.plan_wall);
    pc.push_back(r.plan_cpu);
    rw.push_back(r.replan_wall);
    rc.push_back(r.replan_cpu);
  }
  std::printf(
      "{\"summary\": true, \"gpus\": %d, \"ranks\": %d, \"flows\": %zu, "
      "\"crossing\": %d, \"moved\": %d, \"plan_wall_ms\": %.1f, "
      "\"plan_cpu_ms\": %.1f, \"replan_wall_ms\": %.2f, "
      "\"replan_cpu_ms\": %.2f}\n",
      fab->gpu_count(), ranks, flows.size(), crossing, moved, Median(pw),
      Median(pc), Median(rw), Median(rc));
  return 0;
}

}  // namespace
}  // namespace pitstop::c4p

int main(int argc, char** argv) {
  constexpr char kUsage[] =
      "usage: pitstop-plan-scale-bench SPEC [--placement packed|scattered] "
      "[--ranks N] [--qps Q] [--reps N] [--degrade-busiest F] [--evaluate 1]\n"
      "  SPEC: a fabric as `pitstop plan --topology` takes it (a file or "
      "gen:...)\n"
      "  defaults: --placement packed, --ranks every GPU, --qps 1, --reps 5, "
      "--degrade-busiest 0.25\n"
      "  prints one JSON line per repetition and a summary line "
      "(docs/planning.md, \"Wall time at scale\")\n";
  const std::string first = argc > 1 ? argv[1] : "";
  if (first == "-h" || first == "--help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  pitstop::c4p::Args a;
  // A SPEC that starts with '-' is a flag in its place (before, `--help`
  // was read as a file name: "cannot open").
  if (first.empty() || first[0] == '-' ||
      !pitstop::c4p::ParseArgs(argc, argv, &a)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  return pitstop::c4p::Run(a);
}
