#include "src/sim/bench.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "src/sim/model.h"
#include "src/sim/runner.h"

namespace pitstop::sim {
namespace {

constexpr double kOnsetS = 6;
constexpr double kRunS = 20;

Scenario Shape(int nodes, int gpus, uint64_t seed) {
  Scenario s;
  s.nodes = nodes;
  s.gpus_per_node = gpus;
  s.nics_per_node = gpus;
  s.tp = gpus;
  s.dp = nodes;
  s.channels = 2;
  s.steps_per_proxy_op = 4;
  s.seed = seed;
  s.duration_s = kRunS;
  s.step = {PhaseSpec{true, 60, Group::kTp, "", 0},
            PhaseSpec{false, 0, Group::kTp, "AllReduce", 16 << 20},
            PhaseSpec{true, 90, Group::kDp, "", 0},
            PhaseSpec{false, 0, Group::kDp, "AllReduce", 128 << 20},
            PhaseSpec{false, 0, Group::kWorld, "AllReduce", 64 << 10}};
  s.eval_step = {PhaseSpec{true, 60, Group::kDp, "", 0},
                 PhaseSpec{false, 0, Group::kWorld, "AllGather", 1 << 20},
                 PhaseSpec{false, 0, Group::kWorld, "Broadcast", 64 << 10}};
  return s;
}

FaultSpec Draw(FaultKind kind, const Scenario& s, std::mt19937_64* rng) {
  auto pick = [rng](int n) {
    return static_cast<int>(std::uniform_int_distribution<int>(0, n - 1)(*rng));
  };
  FaultSpec f;
  f.kind = kind;
  f.at_s = kOnsetS;
  switch (kind) {
    case FaultKind::kSlowGpu:
      f.rank = pick(s.world_size());
      f.factor = 1.5;
      break;
    case FaultKind::kSlowNic:
    case FaultKind::kFlappingNic:
      f.node = pick(s.nodes);
      f.nic = pick(s.nics_per_node);
      f.factor = kind == FaultKind::kSlowNic ? 4 : 5;
      f.period_s = 2;
      break;
    case FaultKind::kSlowLink:
    case FaultKind::kCommHang:
      f.node = pick(s.nodes);
      f.peer_node = (f.node + 1) % s.nodes;  // ring neighbours: crossed
      f.factor = 4;
      break;
    case FaultKind::kNonCommHang:
    case FaultKind::kCrash:
    case FaultKind::kMismatch:
      f.rank = pick(s.world_size());
      break;
    default:
      break;
  }
  return f;
}

// "rank 5", "node2 mlx5_1", "node0 -> node1".
std::string Target(const FaultSpec& f) {
  if (f.rank >= 0) return absl::StrCat("rank ", f.rank);
  if (f.nic >= 0) return absl::StrCat(HostName(f.node), " ", NicName(f.nic));
  return absl::StrCat(HostName(f.node), " -> ", HostName(f.peer_node));
}

std::vector<FaultSpec> Deceptive() {
  FaultSpec ckpt{.kind = FaultKind::kCheckpointPause, .at_s = 4, .pause_s = 3};
  FaultSpec eval{.kind = FaultKind::kEvalPhase, .at_s = 9, .duration_s = 3};
  FaultSpec jitter{.kind = FaultKind::kDataLoaderJitter,
                   .at_s = 12,
                   .duration_s = 6,
                   .jitter_ms = 30,
                   .probability = 0.2};
  FaultSpec slow{.kind = FaultKind::kSlowCollective, .at_s = 17, .factor = 8};
  return {ckpt, eval, jitter, slow};
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const size_t i =
      std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

std::string Sec(double s) { return s < 0 ? "-" : absl::StrFormat("%.1f s", s); }

struct Row {
  int runs = 0, scored = 0, detected = 0, localised = 0, false_faults = 0;
  std::vector<double> latency_s;
  std::vector<std::string> notes;
};

// Concurrent and subtle faults, and normals that are hard to tell from
// faults (issue #12), one seed per size:
// - concurrent: a slow GPU on one node and a slow NIC on another at once;
//   both must be found, and the slow GPU's node-mates (late to every DP
//   all-reduce because they wait for it in their TP all-reduce) must not be
//   reported as stragglers;
// - slow_link /2: a node pair at half bandwidth (COMM_SLOW on the pair);
// - noisy compute: compute jitter 8% (4x the default) on a healthy job, and
//   a slow GPU under it;
// - checkpoint 12 s: every rank pauses at a step boundary for longer than
//   the hang timeout (max(5 s, 10 x p99)): not a hang;
// - pipeline layout: tp x pp x dp = 2 x 2 x 2 on 4 nodes x 2 GPUs with a
//   slow GPU and an embedding-gradient all-reduce over each PP group. The
//   simulator models no point-to-point traffic, so the stages exchange no
//   activations: this checks the detectors on the layout's communicators,
//   not on PP send/recv.
std::vector<BenchCase> HardCases(int nodes, int gpus, const std::string& size) {
  std::vector<BenchCase> out;
  auto add = [&](std::string row, std::string what, Scenario s) {
    s.name = absl::StrCat(row, "-", size);
    for (char& ch : s.name) {
      if (ch == ' ' || ch == '/') ch = '_';
    }
    s.source = "bench";
    out.push_back({absl::StrCat(row, " ", size, " (", what, ")"), size,
                   std::move(s), row});
  };
  {
    Scenario s = Shape(nodes, gpus, 501);
    std::mt19937_64 rng(501 + nodes * 10 + gpus);
    FaultSpec gpu = Draw(FaultKind::kSlowGpu, s, &rng);
    FaultSpec nic = Draw(FaultKind::kSlowNic, s, &rng);
    const int gpu_node = gpu.rank / s.gpus_per_node;
    if (nic.node == gpu_node) nic.node = (gpu_node + 1) % s.nodes;
    s.faults = {gpu, nic};
    add("concurrent", absl::StrCat(Target(gpu), " slow + ", Target(nic), " /4"),
        s);
  }
  {
    Scenario s = Shape(nodes, gpus, 502);
    std::mt19937_64 rng(502 + nodes * 10 + gpus);
    FaultSpec f = Draw(FaultKind::kSlowLink, s, &rng);
    f.factor = 2;
    s.faults = {f};
    add("slow_link /2", Target(f), s);
  }
  {
    Scenario s = Shape(nodes, gpus, 503);
    s.compute_jitter = 0.08;
    add("noisy compute", "clean, compute jitter 8%", s);
  }
  {
    Scenario s = Shape(nodes, gpus, 504);
    s.compute_jitter = 0.08;
    std::mt19937_64 rng(504 + nodes * 10 + gpus);
    s.faults = {Draw(FaultKind::kSlowGpu, s, &rng)};
    add("slow_gpu, noisy compute", Target(s.faults[0]), s);
  }
  {
    Scenario s = Shape(nodes, gpus, 505);
    s.faults = {FaultSpec{
        .kind = FaultKind::kCheckpointPause, .at_s = 4, .pause_s = 12}};
    add("checkpoint 12 s", "all ranks, longer than the hang timeout", s);
  }
  if (gpus == 2 && nodes == 4) {
    Scenario s = Shape(nodes, gpus, 506);
    s.tp = 2;
    s.pp = 2;
    s.dp = 2;
    // The first and last stage all-reduce their tied embedding gradients
    // (Megatron's embedding group), the only PP-group collective.
    s.step.insert(s.step.begin() + 4,
                  PhaseSpec{false, 0, Group::kPp, "AllReduce", 4 << 20});
    std::mt19937_64 rng(506);
    s.faults = {Draw(FaultKind::kSlowGpu, s, &rng)};
    add("pipeline layout", absl::StrCat("tp2 pp2 dp2, ", Target(s.faults[0])),
        s);
  }
  return out;
}

}  // namespace

std::vector<BenchCase> BenchCases(bool quick) {
  const std::vector<std::pair<int, int>> sizes =
      quick ? std::vector<std::pair<int, int>>{{4, 2}}
            : std::vector<std::pair<int, int>>{{4, 2}, {4, 4}};
  const std::vector<uint64_t> seeds =
      quick ? std::vector<uint64_t>{1} : std::vector<uint64_t>{1, 2};
  const FaultKind kinds[] = {FaultKind::kSlowGpu,     FaultKind::kSlowNic,
                             FaultKind::kFlappingNic, FaultKind::kSlowLink,
                             FaultKind::kNonCommHang, FaultKind::kCommHang,
                             FaultKind::kCrash};
  std::vector<BenchCase> cases;
  for (auto [nodes, gpus] : sizes) {
    const std::string size = absl::StrCat(nodes, "x", gpus);
    for (FaultKind k : kinds) {
      for (uint64_t seed : seeds) {
        Scenario s = Shape(nodes, gpus, seed * 1000 + static_cast<int>(k));
        std::seed_seq seq{seed, static_cast<uint64_t>(k),
                          static_cast<uint64_t>(nodes),
                          static_cast<uint64_t>(gpus)};
        std::mt19937_64 rng(seq);
        s.faults = {Draw(k, s, &rng)};
        s.name = absl::StrCat(FaultKindName(k), "-", size, "-", seed);
        s.source = "bench";
        cases.push_back({absl::StrCat(FaultKindName(k), " ", size, " seed ",
                                      seed, " (", Target(s.faults[0]), ")"),
                         size, s, ""});
      }
    }
    Scenario clean = Shape(nodes, gpus, 77);
    clean.name = absl::StrCat("clean-", size);
    clean.source = "bench";
    cases.push_back({absl::StrCat("clean ", size), size, clean, ""});
    Scenario dec = Shape(nodes, gpus, 78);
    dec.name = absl::StrCat("deceptive-", size);
    dec.source = "bench";
    dec.faults = Deceptive();
    cases.push_back({absl::StrCat("deceptive normals ", size), size, dec, ""});
    for (BenchCase& c : HardCases(nodes, gpus, size)) {
      cases.push_back(std::move(c));
    }
  }
  if (!quick) {
    Scenario large = Shape(8, 8, 99);
    large.channels = 1;
    large.steps_per_proxy_op = 2;
    large.duration_s = 25;
    large.step[0].compute_ms = 120;
    large.step[2].compute_ms = 160;
    std::mt19937_64 rng(99);
    large.faults = {Draw(FaultKind::kSlowNic, large, &rng)};
    large.faults[0].at_s = 10;
    large.name = "slow_nic-8x8";
    large.source = "bench";
    cases.push_back({absl::StrCat("slow_nic 8x8 seed 1 (64 ranks, ",
                                  Target(large.faults[0]), ")"),
                     "8x8", large, ""});
  }
  return cases;
}

// Everything the benchmark counts over its runs.
struct BenchTally::Counts {
  std::map<std::string, Row> rows;  // "kind|size"
  std::vector<std::string> kinds_order;
  double clean_hours = 0, all_hours = 0;
  int clean_false = 0, all_false = 0;
  std::map<std::string, std::vector<double>> lat_by_class;
  std::vector<std::string> misses;
  std::vector<std::string> unobservable;  // injections no traffic crossed
  int failed = 0;
};

namespace {

// What pitstop raised in a run, for a miss's line.
std::string Raised(const RunResult& r) {
  std::string got;
  for (const ObservedFault& f : r.faults) {
    absl::StrAppend(
        &got, got.empty() ? "" : "; ", ShortClassName(f.fault.fault_class()),
        f.fault.suspects_size() > 0 ? " " + DescribeSuspect(f.fault.suspects(0))
                                    : "");
  }
  return got.empty() ? "nothing" : got;
}

// One case's run into its row: detections, localisations, latencies,
// false faults, and a line per miss.
void Count(const BenchCase& c, const RunResult& r, BenchTally::Counts* t) {
  const std::string kind = !c.row.empty()              ? c.row
                           : c.scenario.faults.empty() ? "clean"
                           : c.label.rfind("deceptive", 0) == 0
                               ? "deceptive normals"
                               : FaultKindName(c.scenario.faults[0].kind);
  const std::string key = absl::StrCat(kind, "|", c.size);
  if (!t->rows.count(key)) t->kinds_order.push_back(key);
  Row& row = t->rows[key];
  ++row.runs;
  const double hours = c.scenario.duration_s / 3600.0;
  t->all_hours += hours;
  t->all_false += r.score.false_faults.size();
  bool any_expected = false;
  for (const TruthScore& ts : r.score.truths) {
    if (!ts.truth->not_observable.empty()) {
      t->unobservable.push_back(absl::StrCat(c.label, ": injected ",
                                             ts.truth->Describe(), "; ",
                                             ts.truth->not_observable));
    }
    if (!ts.scored) continue;
    any_expected = true;
    ++row.scored;
    row.detected += ts.detected;
    row.localised += ts.detected && ts.localised;
    if (ts.detected) {
      row.latency_s.push_back(ts.latency_ns / 1e9);
      t->lat_by_class[ts.truth->expected_class].push_back(ts.latency_ns / 1e9);
    }
    if (!ts.detected || !ts.localised) {
      t->misses.push_back(absl::StrCat(c.label, ": injected ",
                                       ts.truth->Describe(), "; ", ts.note,
                                       "; pitstop raised: ", Raised(r)));
    }
  }
  if (!any_expected) {
    t->clean_hours += hours;
    t->clean_false += r.score.false_faults.size();
  }
  row.false_faults += r.score.false_faults.size();
  for (const ObservedFault* f : r.score.false_faults) {
    t->misses.push_back(absl::StrCat(
        c.label, ": false fault ", ShortClassName(f->fault.fault_class()),
        f->fault.suspects_size() > 0
            ? " " + DescribeSuspect(f->fault.suspects(0))
            : "",
        " at t=", absl::StrFormat("%.1f", f->first_seen_ns / 1e9), " s"));
  }
}

// The markdown report: one row per fault kind and cluster, then the totals.
std::string Report(const BenchTally::Counts& t, double minutes) {
  std::ostringstream md;
  int scored = 0, detected = 0, localised = 0;
  md << "| fault kind | cluster | runs | detected | localised | false faults"
        " | latency p50 | latency p90 |\n"
     << "|---|---|---|---|---|---|---|---|\n";
  for (const std::string& key : t.kinds_order) {
    const Row& row = t.rows.at(key);
    const size_t bar = key.find('|');
    scored += row.scored;
    detected += row.detected;
    localised += row.localised;
    md << absl::StrFormat(
        "| %s | %s | %d | %s | %s | %d | %s | %s |\n", key.substr(0, bar),
        key.substr(bar + 1), row.runs,
        row.scored ? absl::StrCat(row.detected, "/", row.scored) : "-",
        row.scored ? absl::StrCat(row.localised, "/", row.scored) : "-",
        row.false_faults, Sec(Percentile(row.latency_s, 0.5)),
        Sec(Percentile(row.latency_s, 0.9)));
  }
  md << "\n";
  md << absl::StrFormat(
      "- **Recall**: %d/%d = %.1f%% of injected faults raised with the right "
      "class%s.\n",
      detected, scored, scored ? 100.0 * detected / scored : 0,
      t.unobservable.empty()
          ? ""
          : absl::StrFormat(" (%d more not observable, not counted: listed "
                            "below)",
                            t.unobservable.size()));
  md << absl::StrFormat(
      "- **Localisation**: %d/%d = %.1f%% (first suspect is the injected "
      "rank/GPU, NIC or node pair), %d/%d of the detected ones.\n",
      localised, scored, scored ? 100.0 * localised / scored : 0, localised,
      detected);
  md << absl::StrFormat(
      "- **False faults**: %d in %.1f min of clean and deceptive-normal "
      "running (%.0f per hour); %d in all %.1f min simulated.\n",
      t.clean_false, t.clean_hours * 60,
      t.clean_hours > 0 ? t.clean_false / t.clean_hours : 0, t.all_false,
      t.all_hours * 60);
  for (const auto& [cls, v] : t.lat_by_class) {
    md << absl::StrFormat("- **Latency %s**: p50 %s, p90 %s (%zu faults).\n",
                          cls, Sec(Percentile(v, 0.5)), Sec(Percentile(v, 0.9)),
                          v.size());
  }
  md << absl::StrFormat("- Cases that could not run: %d. Wall time %.1f min.\n",
                        t.failed, minutes);
  if (!t.unobservable.empty()) {
    md << "\nNot observable (no traffic crossed them; scored neither found "
          "nor missed):\n\n";
    for (const std::string& m : t.unobservable) md << "- " << m << "\n";
  }
  if (!t.misses.empty()) {
    md << "\nMisses, wrong suspects and false faults:\n\n";
    for (const std::string& m : t.misses) md << "- " << m << "\n";
  }
  return md.str();
}

}  // namespace

BenchTally::BenchTally() : counts_(std::make_unique<Counts>()) {}
BenchTally::~BenchTally() = default;
void BenchTally::Add(const BenchCase& c, const RunResult& r) {
  Count(c, r, counts_.get());
}
void BenchTally::AddFailed() { ++counts_->failed; }
int BenchTally::failed() const { return counts_->failed; }
std::string BenchTally::Markdown(double minutes) const {
  return Report(*counts_, minutes);
}

int RunBench(const BenchOptions& options, std::ostream& out) {
  auto say = [&](const std::string& s) {
    if (options.progress) options.progress(s);
  };
  const std::vector<BenchCase> cases = BenchCases(options.quick);
  BenchTally t;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < cases.size(); ++i) {
    const BenchCase& c = cases[i];
    say(absl::StrFormat("[bench %zu/%zu] %s ...", i + 1, cases.size(),
                        c.label));
    RunOptions ro;
    ro.daemon_log_level = options.daemon_log_level;
    ro.drain_s = 1.5;
    auto result = RunScenario(c.scenario, ro);
    if (!result.ok()) {
      say(absl::StrCat("[bench] ", c.label,
                       ": could not run: ", result.status().message()));
      t.AddFailed();
      continue;
    }
    const RunResult& r = **result;
    t.Add(c, r);
    say(absl::StrFormat("[bench %zu/%zu] %s: %s (%.0f s)", i + 1, cases.size(),
                        c.label, r.score.ok() ? "ok" : "MISMATCH", r.wall_s));
  }
  const double minutes =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count() /
      60;
  const std::string md = t.Markdown(minutes);
  out << "\n" << md;
  if (!options.markdown_path.empty()) {
    std::ofstream f(options.markdown_path);
    f << md;
  }
  return t.failed() > 0 ? 2 : 0;
}

}  // namespace pitstop::sim
