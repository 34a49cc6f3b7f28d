// `pitstop plan`: C4P flow planning on a fabric, measured against ECMP and
// the lower bound (docs/planning.md).
//
//   pitstop plan --topology ../shared/data/topology/Rail_Opti_...txt
//   pitstop plan --topology gen:leafspine,gpus=1024 --placement scattered
//   pitstop plan --topology hosts.csv --aggs-per-pod 8 --ranks 512
//   pitstop plan --topology fabric.topo (ibnetdiscover output)
//   pitstop plan --topology gen:3tier,gpus=8192 --degrade tor0.0-pod0/agg3=0.25
//
// Exit codes: 0 evaluated, 2 usage or input error.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <new>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "src/c4p/evaluate.h"
#include "src/c4p/fabric_io.h"
#include "src/c4p/progress.h"
#include "src/c4p/qps_auto.h"
#include "tools/pitstop/commands.h"
#include "tools/pitstop/plan_out.h"
#include "tools/pitstop/plan_report.h"

namespace pitstop::tool {
namespace {

struct PlanArgs {
  std::string topology;
  int ranks = 0;
  std::vector<std::string> degrade;
  double degrade_busiest = 0;
  std::string output = "table";
  std::string placement = "packed";
  std::string placement_seed = "1";
  int channels = 0;
  std::string qps = "auto";
  std::string bytes = "1G";
  int seeds = 100;
  std::string hash = "crc32";
  bool no_pin = false;
  std::string plan_out;
  bool plan_out_given = false;  // --plan-out '' is given, and refused
  bool force = false;
  std::string sim = "steady";
  std::string algo = "ring";
  c4p::ClosCsvOptions csv;
  c4p::IbOptions ib;
  // The three-tier CSV's flags given on the command line ("--aggs-per-pod").
  std::vector<std::string> csv_flags_given;
};

// CSV flags given with a fabric of another format change nothing: said
// (before, silently ignored). --nvlink-gbps applies to ibnetdiscover too.
void WarnUnusedCsvFlags(const PlanArgs& a, c4p::Fabric* fabric) {
  const bool csv = absl::StartsWith(fabric->description, "three-tier CSV");
  const bool ib = absl::StartsWith(fabric->description, "ibnetdiscover");
  std::vector<std::string> unused;
  for (const std::string& flag : a.csv_flags_given) {
    if (!csv && !(ib && flag == "--nvlink-gbps")) unused.push_back(flag);
  }
  if (unused.empty()) return;
  fabric->warnings().push_back(absl::StrCat(
      absl::StrJoin(unused, ", "),
      " ignored: ", unused.size() > 1 ? "they describe" : "it describes",
      " a three-tier CSV, and ", a.topology, " is not one"));
}

// The largest --bytes: 1 TiB, more than any GPU's memory (288 GB on a
// B300), where an all-reduce's buffer lives. Before, 1e300 was taken and
// printed times of 1e+290 s.
constexpr double kMaxAllReduceBytes = double(uint64_t{1} << 40);

// --bytes: a whole number of bytes, 1..kMaxAllReduceBytes, with an
// optional K, M, G or T suffix (1.5G is whole). Empty when `s` is one, else why
// not (before, 0.5 was taken as half a byte).
std::string ParseBytes(const std::string& s, double* out) {
  double mult = 1;
  std::string num = s;
  const char last = s.empty() ? '\0' : s.back();
  if (last == 'K' || last == 'k') mult = 1 << 10;
  if (last == 'M' || last == 'm') mult = 1 << 20;
  if (last == 'G' || last == 'g') mult = 1 << 30;
  if (last == 'T' || last == 't') mult = double(uint64_t{1} << 40);
  if (mult != 1) num.pop_back();
  double v = 0;
  if (!absl::SimpleAtod(num, &v) || !std::isfinite(v)) {
    return "is not a size (e.g. 256M, 1G)";
  }
  const double bytes = v * mult;
  if (!(bytes >= 1) || bytes != std::floor(bytes)) {
    return absl::StrCat("is ", bytes,
                        " bytes: a size is a whole number of bytes, 1 or "
                        "more (e.g. 256M, 1G)");
  }
  if (bytes > kMaxAllReduceBytes) {
    return absl::StrCat("is ", bytes, " bytes: at most ",
                        static_cast<uint64_t>(kMaxAllReduceBytes),
                        " (1T = 2^40: more than any GPU's memory, where an "
                        "all-reduce's buffer lives)");
  }
  *out = bytes;
  return "";
}

// --placement-seed: 0..2^64-1. False, having said why on stderr: before,
// -1 became 2^64-1 (an unsigned flag), then 2^64 and more were clamped.
bool ParseSeed(const std::string& s, uint64_t* out) {
  if (absl::StartsWith(s, "-")) {
    std::cerr << "pitstop plan: --placement-seed " << s
              << ": a seed is 0 or more\n";
    return false;
  }
  if (!absl::SimpleAtoi(s, out)) {
    std::cerr << "pitstop plan: --placement-seed " << s
              << ": a seed is a whole number, 0.." << UINT64_MAX
              << " (2^64 - 1)\n";
    return false;
  }
  return true;
}

// The evaluation's options from the flags; false (having said why on
// stderr) for a value no run means.
bool ParseEvalOptions(const PlanArgs& a, c4p::EvalOptions* o) {
  o->ranks = a.ranks;
  if (a.placement == "packed") {
    o->placement = c4p::Placement::kPacked;
  } else if (a.placement == "scattered") {
    o->placement = c4p::Placement::kScattered;
  } else {
    std::cerr << "pitstop plan: --placement is packed or scattered\n";
    return false;
  }
  if (!ParseSeed(a.placement_seed, &o->placement_seed)) return false;
  o->ring.channels = a.channels;
  o->tree = a.algo == "tree";
  if (a.qps != "auto") {
    int q = 0;
    if (!absl::SimpleAtoi(a.qps, &q) || q < 1 || q > 64) {
      std::cerr << "pitstop plan: --qps '" << a.qps
                << "' is not auto or a QP count 1..64\n";
      return false;
    }
    o->ring.qps_per_connection = q;
  }
  if (const std::string bad = ParseBytes(a.bytes, &o->ring.bytes);
      !bad.empty()) {
    std::cerr << "pitstop plan: --bytes '" << a.bytes << "' " << bad << "\n";
    return false;
  }
  o->seeds = a.seeds;
  o->hash = a.hash;
  o->pin_ports = !a.no_pin;
  o->degrade_busiest = a.degrade_busiest;
  o->sim_mode =
      a.sim == "events" ? c4p::SimMode::kEvents : c4p::SimMode::kSteady;
  for (const std::string& d : a.degrade) {
    const size_t eq = d.rfind('=');
    double frac = 0;
    if (eq == std::string::npos || !absl::SimpleAtod(d.substr(eq + 1), &frac)) {
      std::cerr << "pitstop plan: --degrade '" << d
                << "' is not LINK=FRACTION (e.g. tor3-spine1=0.25)\n";
      return false;
    }
    o->degrade.emplace_back(d.substr(0, eq), frac);
  }
  return true;
}

// The evaluation's progress (planning, pinning, ECMP seeds) on `progress`.
void ReportProgress(c4p::ProgressLine* progress, c4p::EvalOptions* o) {
  o->on_ecmp_seed = [progress](const c4p::EcmpProgress& p) {
    progress->Update(absl::StrCat("pitstop plan: ECMP seeds, ", p.stage, ", ",
                                  p.qps, p.qps > 1 ? " QPs" : " QP"),
                     p.done, p.seeds);
  };
  o->on_plan_step = [progress](const char* step, int done, int total) {
    progress->Update(absl::StrCat("pitstop plan: planning, ", step), done,
                     total);
  };
}

// The QP choice `--qps q` makes.
c4p::QpsChoice FixedQps(int q) {
  c4p::QpsChoice c;
  c.qps = q;
  c.why = absl::StrCat(q, " QP", q > 1 ? "s" : "", " per connection (--qps)");
  if (q > 1) c.launch = absl::StrCat("NCCL_IB_QPS_PER_CONNECTION=", q);
  return c;
}

int RunPlanChecked(const PlanArgs& a) {
  c4p::EvalOptions o;
  if (!ParseEvalOptions(a, &o)) return 2;
  if (a.plan_out_given) {
    if (absl::Status s =
            CheckPlanOut(a.plan_out, {a.topology, a.ib.host_map}, a.force);
        !s.ok()) {
      std::cerr << "pitstop plan: " << s.message() << "\n";
      return 2;
    }
  }
  const bool qps_auto = a.qps == "auto";
  // On stderr, so that `-o json` keeps stdout JSON; silent for 2 s.
  c4p::ProgressLine progress(Clock::Real(), &std::cerr);
  ReportProgress(&progress, &o);
  // --nvlink-gbps is also the NVLink of hosts with several HCAs.
  c4p::IbOptions ib = a.ib;
  ib.nvlink_gbps = a.csv.nvlink_gbps;
  absl::StatusOr<c4p::Fabric> fabric = c4p::LoadFabric(
      a.topology, a.csv, ib,
      [&progress](const char* step, int done, int total) {
        progress.Update(absl::StrCat("pitstop plan: fabric, ", step), done,
                        total);
      });
  if (!fabric.ok()) {
    std::cerr << "pitstop plan: " << fabric.status().message() << "\n";
    return 2;
  }
  WarnUnusedCsvFlags(a, &*fabric);
  c4p::QpsChoice qps;
  absl::StatusOr<c4p::EvalReport> r =
      qps_auto ? c4p::EvaluateAutoQps(&*fabric, o, &qps)
               : c4p::Evaluate(&*fabric, o);
  if (!qps_auto) qps = FixedQps(o.ring.qps_per_connection);
  if (!r.ok()) {
    std::cerr << "pitstop plan: " << r.status().message() << "\n";
    return 2;
  }
  if (a.plan_out_given) {
    absl::Status s = WritePlan(*fabric, *r, a.plan_out);
    if (!s.ok()) {
      std::cerr << "pitstop plan: " << s.message() << "\n";
      return 2;
    }
  }
  if (a.output == "json") {
    nlohmann::json j = ReportJson(*r);
    j["qps"] = QpsJson(qps);
    std::cout << j.dump(2) << "\n";
  } else {
    PrintTable(*r, qps);
  }
  // Before, a failed write (`> /dev/full`, a closed pipe) exited 0.
  errno = 0;
  if (!std::cout.flush() || std::fflush(stdout) != 0) {
    std::cerr << "pitstop plan: cannot write the output: "
              << (errno != 0 ? std::strerror(errno) : "stream error") << "\n";
    return 1;
  }
  return 0;
}

// The flags and keys bound what a fabric may hold; a fabric that still
// does not fit in memory is said, not an abort (before: exit 134).
int RunPlan(const PlanArgs& a) {
  try {
    return RunPlanChecked(a);
  } catch (const std::bad_alloc&) {
    std::cerr << "pitstop plan: out of memory building or evaluating "
              << a.topology
              << ": the fabric or job is too large for this machine (fewer "
                 "GPUs, --ranks, --seeds)\n";
    return 2;
  }
}

// The options of what a fabric file leaves open (three-tier CSV,
// ibnetdiscover); returns the CSV's group (WarnUnusedCsvFlags).
CLI::Option_group* AddFabricOptions(CLI::App* cmd, PlanArgs* args) {
  auto* csv =
      cmd->add_option_group("three-tier CSV", "what the CSV leaves open");
  csv->add_option(
         "--gpus-per-host", args->csv.gpus_per_host,
         absl::StrCat("GPUs (and NICs) per host, 1..", c4p::kMaxGpusPerHost))
      ->capture_default_str();
  csv->add_option("--nic-gbps", args->csv.nic_gbps, "NIC speed")
      ->capture_default_str();
  csv->add_option("--aggs-per-pod", args->csv.aggs_per_pod,
                  absl::StrCat("aggregation switches per PSW group = uplinks "
                               "per ToR, 1..",
                               c4p::kMaxSwitchPorts))
      ->capture_default_str();
  csv->add_option("--tor-uplink-gbps", args->csv.tor_uplink_gbps,
                  "ToR -> aggregation link speed")
      ->capture_default_str();
  csv->add_option(
         "--cores-per-agg", args->csv.cores_per_agg,
         absl::StrCat("uplinks per aggregation switch (cores per "
                      "core plane), 1..",
                      c4p::kMaxSwitchPorts, "; x --aggs-per-pod at most ",
                      c4p::kMaxCoreSwitches, " core switches"))
      ->capture_default_str();
  csv->add_option("--agg-uplink-gbps", args->csv.agg_uplink_gbps,
                  "aggregation -> core link speed")
      ->capture_default_str();
  csv->add_option("--nvlink-gbps", args->csv.nvlink_gbps,
                  "GPU <-> NVSwitch speed (also of ibnetdiscover hosts "
                  "with several HCAs)")
      ->capture_default_str();
  auto* ib = cmd->add_option_group("ibnetdiscover",
                                   "what InfiniBand discovery leaves open");
  ib->add_option("--ib-host-map", args->ib.host_map,
                 "file of '<guid> <host>' lines naming the host of HCAs "
                 "whose node description does not (default: the first word "
                 "of the description)");
  return csv;
}

// The options of the job and how it is evaluated.
void AddJobOptions(CLI::App* cmd, PlanArgs* args) {
  cmd->add_option("--ranks", args->ranks,
                  "GPUs in the job, 2 or more (0, the default: every GPU "
                  "of the fabric)");
  cmd->add_option("--degrade", args->degrade,
                  "LINK=FRACTION: the link keeps this share of its "
                  "capacity, in [0, 1] (0: the link is down); "
                  "LINK is 'A->B' (one direction), 'A-B' (both), a NIC "
                  "'hostN/nicK' or a switch; repeatable");
  cmd->add_option("--degrade-busiest", args->degrade_busiest,
                  "degrade the plan's busiest switch-to-switch link (both "
                  "directions) to this share in [0, 1] (benchmarks; 0: "
                  "off)")
      ->capture_default_str();
  cmd->add_option("--placement", args->placement,
                  "packed (hosts in fabric order) or scattered (hosts in a "
                  "seeded random order, as a busy scheduler hands them out)")
      ->capture_default_str();
  cmd->add_option("--placement-seed", args->placement_seed,
                  "seed of the scattered placement (0..2^64-1)")
      ->capture_default_str();
  cmd->add_option("--algo", args->algo,
                  "ring (default) or tree: NCCL's all-reduce algorithm")
      ->check(CLI::IsMember({"ring", "tree"}))
      ->capture_default_str();
  cmd->add_option("--channels", args->channels,
                  "NCCL channels, 1..64 (default: two per NIC of a host)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--qps", args->qps,
                  "QPs per connection (NCCL_IB_QPS_PER_CONNECTION), or auto "
                  "(default): 1, unless a re-plan around the degraded links "
                  "recovers < 90% of the healthy bound and 2, 4 or 8 QPs "
                  "lift it (the smallest that reaches 90%, else the best); "
                  "the output names the launch setting")
      ->capture_default_str();
  cmd->add_option("--bytes", args->bytes,
                  "all-reduce size, 1 byte to 1T (e.g. 256M, 1G; K, M, G, T "
                  "are powers of 1024)")
      ->capture_default_str();
  cmd->add_option(
         "--seeds", args->seeds,
         absl::StrCat("ECMP hash seeds to draw, 1..", c4p::kMaxEcmpSeeds,
                      " (>= 100 for a distribution)"))
      ->capture_default_str();
  cmd->add_option("--hash", args->hash, "switch hash: crc32, xor or murmur")
      ->capture_default_str();
  cmd->add_option("--sim", args->sim,
                  "steady (max-min rates hold to the end: ring pipelines, "
                  "default) or events (re-allocate at every finish; slow on "
                  "large fabrics)")
      ->check(CLI::IsMember({"steady", "events"}))
      ->capture_default_str();
}

}  // namespace

void AddPlanCommand(CLI::App* app, int* exit_code) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = app->add_subcommand(
      "plan",
      "Plan the paths of a data-parallel ring all-reduce on a fabric and "
      "compare ECMP (a distribution over hash seeds), the plan and the lower "
      "bound, healthy and with degraded links (docs/planning.md). A run "
      "past 2 s says how far it is on stderr (building the fabric, "
      "planning, pinning, ECMP seeds). "
      "Exit code: 0 evaluated, 2 usage or input error (a fabric or job "
      "that cannot run).");
  cmd->add_option("--topology", args->topology,
                  "SimAI topology file, three-tier CSV (a header naming "
                  "ip,DSW,PSW,ASW), ibnetdiscover output (infiniband-diags; "
                  "see --ib-host-map), '-' for one on standard input, or "
                  "a generated fabric: " +
                      c4p::GeneratorSpecHelp())
      ->required();
  AddJobOptions(cmd, args.get());
  cmd->add_option("-o,--output", args->output, "table or json")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  cmd->add_flag("--no-pin", args->no_pin,
                "do not search UDP source ports that reproduce the plan");
  CLI::Option* plan_out = cmd->add_option(
      "--plan-out", args->plan_out,
      "write the plan (per QP: NIC, UDP source port, path) as JSON to this "
      "file, through a temporary file renamed over it; an existing file is "
      "replaced only when it is empty or an earlier plan (else --force)");
  cmd->add_flag("--force", args->force,
                "let --plan-out replace an existing file that is not an "
                "earlier plan, or a symbolic link (the link, not its target)");
  CLI::Option_group* csv = AddFabricOptions(cmd, args.get());
  cmd->callback([args, exit_code, csv, plan_out] {
    args->plan_out_given = plan_out->count() > 0;
    for (const CLI::Option* o : csv->get_options()) {
      if (o->count() > 0) args->csv_flags_given.push_back(o->get_name());
    }
    *exit_code = RunPlan(*args);
  });
}

}  // namespace pitstop::tool
