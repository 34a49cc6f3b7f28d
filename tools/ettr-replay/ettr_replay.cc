// pitstop-ettr-replay: effective training time ratio (ETTR) of one large job
// replaying a real fault history (../shared/data/fault-traces, docs/
// migration.md "ETTR replay"): standby migration with a pool of k standby
// nodes vs checkpoint-restart, on the same trace, nodes and spares.
//
// Model (every number a flag):
//  - The job runs on `job_nodes` node slots; each slot fails as one node of
//    the trace does (drawn, seeded, from the trace's nodes; a fault that
//    starts while the slot's previous fault is still open is the same
//    outage and is not counted again). Every trace node had faults, so this
//    is a pessimistic fleet: about one fault a day on a 128-node job.
//  - A fault interrupts the job. Checkpoint-restart: detect_s + restart_s of
//    downtime, and the work since the last checkpoint (every ckpt_min of
//    progress) is lost; the replacement node comes from the fleet.
//  - Migration with k standby nodes: if a standby is ready, detect_s +
//    migrate_s of downtime and no work lost (the state comes from the
//    leaver or a data-parallel replica); the used standby is replaced after
//    refill_min (a repaired or newly allocated node). With no standby ready
//    it falls back to checkpoint-restart (it checkpoints as often).
//  - A fault while the job is already down is handled after it is up.
// ETTR = (wall time - downtime - lost work) / wall time.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "pitstop/bounded_file.h"

namespace {

struct Interval {
  double start = 0, end = 0;  // days
};

struct Params {
  int job_nodes = 128;  // 1,024 GPUs at 8 per node
  int standby = 4;
  double detect_s = 30;
  double migrate_s = 20;   // TrainMover: < 20 s at 1,024 GPUs
  double restart_s = 960;  // ~16 min (torchft#329)
  double ckpt_min = 30;
  double refill_min = 60;
  uint64_t seed = 1;
};

struct Result {
  double ettr = 0;
  int faults = 0, migrations = 0, restarts = 0;
};

constexpr double kDay = 86400.0;

// Fault starts of the job's slots (days), in time order, one per outage.
std::vector<double> JobFaults(
    const std::map<std::string, std::vector<Interval>>& nodes, double horizon,
    const Params& p) {
  std::vector<std::string> ids;
  for (const auto& [id, iv] : nodes) ids.push_back(id);
  std::mt19937_64 rng(p.seed);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<double> out;
  for (int i = 0; i < p.job_nodes; ++i) {
    std::vector<Interval> iv = nodes.at(ids[i]);
    std::sort(iv.begin(), iv.end(), [](const Interval& a, const Interval& b) {
      return a.start < b.start;
    });
    double open_until = -1;
    for (const Interval& f : iv) {
      if (f.start < horizon && f.start >= open_until) out.push_back(f.start);
      open_until = std::max(open_until, f.end);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result Replay(const std::vector<double>& faults, double horizon,
              const Params& p, bool migrate) {
  Result r;
  std::vector<double> ready(migrate ? p.standby : 0, 0.0);  // per standby
  double up_at = 0, last_t = 0, progress_s = 0;
  const double ckpt_s = p.ckpt_min * 60;
  for (double t0 : faults) {
    ++r.faults;
    const double t = std::max(t0, up_at);
    progress_s += (t - last_t) * kDay;
    double down_s = p.detect_s;
    auto standby = std::find_if(ready.begin(), ready.end(),
                                [&](double at) { return at <= t; });
    if (standby != ready.end()) {
      down_s += p.migrate_s;
      *standby = t + p.refill_min / 1440;
      ++r.migrations;
    } else {
      down_s += p.restart_s;
      progress_s -= std::fmod(progress_s, ckpt_s);  // back to the checkpoint
      ++r.restarts;
    }
    up_at = t + down_s / kDay;
    last_t = up_at;
  }
  if (horizon > last_t) progress_s += (horizon - last_t) * kDay;
  r.ettr = progress_s / (horizon * kDay);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string trace =
      "../shared/data/fault-traces/infinitehbd_fault_trace.json";
  Params p;
  std::vector<int> pools = {0, 1, 2, 4};
  int seeds = 10;
  CLI::App app(
      "pitstop-ettr-replay: ETTR of a 1,024-GPU job replaying a real fault "
      "trace, standby migration with k standby nodes vs checkpoint-restart "
      "(docs/migration.md)");
  app.add_option("--trace", trace,
                 "fault trace JSON (fault_start/fault_end "
                 "events per node_id, times in days)")
      ->capture_default_str();
  app.add_option("--job-nodes", p.job_nodes, "nodes of the job (8 GPUs each)")
      ->capture_default_str();
  app.add_option("--pools", pools, "standby pool sizes k to compare")
      ->capture_default_str();
  app.add_option("--detect-s", p.detect_s, "detection time per fault (s)")
      ->capture_default_str();
  app.add_option("--migrate-s", p.migrate_s, "migration downtime (s)")
      ->capture_default_str();
  app.add_option("--restart-s", p.restart_s,
                 "restart from a checkpoint, without the lost work (s)")
      ->capture_default_str();
  app.add_option("--ckpt-min", p.ckpt_min, "checkpoint period (min)")
      ->capture_default_str();
  app.add_option("--refill-min", p.refill_min,
                 "until a used standby is replaced (min)")
      ->capture_default_str();
  app.add_option("--seeds", seeds, "node draws averaged")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  // A fault trace is kilobytes; 256 MiB bounds a wrong path.
  absl::StatusOr<std::string> text =
      pitstop::ReadRegularFile(trace, "--trace", uint64_t{256} << 20);
  if (!text.ok()) {
    std::fprintf(stderr, "pitstop-ettr-replay: %s\n",
                 std::string(text.status().message()).c_str());
    return 2;
  }
  nlohmann::json events;
  try {
    events = nlohmann::json::parse(*text);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pitstop-ettr-replay: %s: %s\n", trace.c_str(),
                 e.what());
    return 2;
  }
  std::map<std::string, std::vector<Interval>> nodes;
  std::map<std::string, std::vector<double>> open;
  double horizon = 0;
  size_t index = 0;
  for (const nlohmann::json& e : events) {
    if (!e.is_object() || !e.contains("node_id") || !e.contains("event_time") ||
        !e.contains("event_type")) {
      std::fprintf(stderr,
                   "pitstop-ettr-replay: %s: event %zu: needs node_id, "
                   "event_time, event_type\n",
                   trace.c_str(), index);
      return 2;
    }
    const std::string id = e["node_id"].get<std::string>();
    const double t = e["event_time"].get<double>();
    const std::string type = e["event_type"].get<std::string>();
    horizon = std::max(horizon, t);
    if (type == "fault_start") {
      open[id].push_back(t);
    } else if (type == "fault_end" && !open[id].empty()) {
      nodes[id].push_back({open[id].front(), t});
      open[id].erase(open[id].begin());
    }
    ++index;
  }
  for (auto& [id, starts] : open) {
    for (double s : starts) nodes[id].push_back({s, horizon});  // unrepaired
  }
  if (static_cast<int>(nodes.size()) < p.job_nodes) {
    std::fprintf(stderr, "pitstop-ettr-replay: %zu nodes in %s, need %d\n",
                 nodes.size(), trace.c_str(), p.job_nodes);
    return 2;
  }
  std::printf(
      "trace %s: %zu events, %zu nodes, %.0f days; job %d nodes (%d GPUs), "
      "detect %.0f s, migrate %.0f s, restart %.0f s, checkpoint every %.0f "
      "min, standby refill %.0f min, %d node draws\n",
      trace.c_str(), events.size(), nodes.size(), horizon, p.job_nodes,
      p.job_nodes * 8, p.detect_s, p.migrate_s, p.restart_s, p.ckpt_min,
      p.refill_min, seeds);
  std::printf("%-3s %8s %11s %9s %10s %10s %10s\n", "k", "faults/yr",
              "migrations", "restarts", "ETTR_migr", "ETTR_ckpt", "min_migr");
  for (int k : pools) {
    Params q = p;
    q.standby = k;
    double m_ettr = 0, c_ettr = 0, m_min = 1, faults = 0, migs = 0, rest = 0;
    for (int s = 0; s < seeds; ++s) {
      q.seed = 1 + s;
      const std::vector<double> f = JobFaults(nodes, horizon, q);
      const Result m = Replay(f, horizon, q, true);
      const Result c = Replay(f, horizon, q, false);
      m_ettr += m.ettr / seeds;
      c_ettr += c.ettr / seeds;
      m_min = std::min(m_min, m.ettr);
      faults += m.faults * 365.0 / horizon / seeds;
      migs += double(m.migrations) / seeds;
      rest += double(m.restarts) / seeds;
    }
    std::printf("%-3d %8.0f %11.1f %9.1f %10.4f %10.4f %10.4f\n", k, faults,
                migs, rest, m_ettr, c_ettr, m_min);
  }
  return 0;
}
