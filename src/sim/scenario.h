// Scenario: what `pitstop sim` runs. Cluster shape, job layout, step
// structure, timing model parameters and the fault schedule, read from YAML
// (docs/sim.md has the format; src/sim/scenarios/ the built-in ones).
//
//   ASSIGN_OR_RETURN(Scenario s, LoadScenarioFile("my.yaml"));
//   ASSIGN_OR_RETURN(Scenario d, BuiltinScenario("nic-degraded"));
//
// Units: times in seconds (`*_s`) or milliseconds (`*_ms`) as named,
// bandwidths in Gbit/s, latencies in microseconds, sizes in bytes (YAML may
// write "16MiB", "512KiB", "1GiB" or a plain integer).
#ifndef PITSTOP_SRC_SIM_SCENARIO_H_
#define PITSTOP_SRC_SIM_SCENARIO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pitstop::sim {

enum class FaultKind {
  kSlowGpu,      // compute x factor on one rank (straggler)
  kSlowNic,      // bandwidth / factor on one NIC of one node
  kFlappingNic,  // like kSlowNic, on for period_s, off for period_s, ...
  kSlowLink,     // bandwidth / factor between two nodes
  kNonCommHang,  // a rank stops before its next collective
  kCommHang,     // a connection between two nodes stops progressing
  kCrash,        // a rank's process dies without finalize
  kMismatch,     // a rank issues its next collective with another size
  // Deceptive normals: must not raise a fault.
  kCheckpointPause,   // every rank pauses pause_s at a step boundary
  kEvalPhase,         // different collectives for duration_s
  kDataLoaderJitter,  // random ranks, random short delays, each step
  kSlowCollective,    // one collective once, factor x slower, all ranks
};

// "slow_gpu", "slow_nic", ...; the YAML `kind` values.
const char* FaultKindName(FaultKind kind);
// True for the deceptive normals (no fault expected).
bool IsDeceptiveNormal(FaultKind kind);

struct FaultSpec {
  FaultKind kind = FaultKind::kSlowGpu;
  double at_s = 0;           // onset, seconds after the job started
  double duration_s = 0;     // 0 = until the end of the run
  int rank = -1;             // global rank (slow_gpu, non_comm_hang, crash)
  int node = -1;             // node index (NIC / link / comm hang)
  int nic = -1;              // NIC index on `node` (slow_nic, flapping_nic)
  int peer_node = -1;        // other end (slow_link, comm_hang)
  double factor = 1;         // slowdown multiplier (> 1)
  double period_s = 1;       // flapping_nic half-period
  double pause_s = 0;        // checkpoint_pause length
  double jitter_ms = 0;      // data_loader_jitter: max extra delay
  double probability = 0.2;  // data_loader_jitter: per rank and step
};

enum class Group { kTp, kPp, kDp, kWorld };
const char* GroupName(Group g);

struct PhaseSpec {
  bool compute = true;
  double compute_ms = 0;  // compute phase length (before jitter)
  // Collective phase.
  Group group = Group::kDp;
  std::string func = "AllReduce";  // NCCL's func string
  uint64_t bytes = 0;              // message size (AllReduce: the buffer)
};

struct Scenario {
  std::string name;
  std::string description;
  std::string source;  // file it came from, or "builtin:<name>"
  uint64_t seed = 1;
  double duration_s = 30;
  std::string job_id = "sim-job";

  // Cluster.
  int nodes = 2;
  int gpus_per_node = 4;
  int nics_per_node = 4;  // GPU g uses NIC g % nics_per_node (rails)
  double nvlink_gbps = 900;
  double nic_gbps = 200;
  double nvlink_latency_us = 1;
  double net_latency_us = 5;
  std::string topology_file;  // when set, shape + bandwidths come from it

  // Job. tp * pp * dp must equal nodes * gpus_per_node.
  int tp = 1, pp = 1, dp = 0;  // dp = 0: world / (tp * pp)
  int channels = 2;
  int steps_per_proxy_op = 4;
  double compute_jitter = 0.02;  // relative standard deviation
  std::vector<PhaseSpec> step;
  std::vector<PhaseSpec> eval_step;  // used during eval_phase faults

  std::vector<FaultSpec> faults;

  // `planning: {fabric: SPEC}`: the controller plans the job's flows live
  // on this fabric (its --fabric; docs/planning.md) and the run reports the
  // plan's epochs and the agents' tuner tables. Empty: planning off.
  std::string fabric;
  // `planning: {marks: [{at_s: 12, link: spine0, share: 0.25}]}`: an
  // operator marks a fabric link degraded at at_s (SetLinkHealth), as
  // `pitstopctl links --degrade` would.
  struct LinkMark {
    double at_s = 0;
    std::string link;
    double share = 0.25;
  };
  std::vector<LinkMark> link_marks;
  // `planning: {measure_nics: false}`: the controller's Cora NIC estimates
  // off (--planning-measure-nics false), so only verdicts and marks
  // re-plan.
  bool measure_nics = true;

  int world_size() const { return nodes * gpus_per_node; }
};

// Parses YAML text; `source` names the file in errors ("file:line:col: ...").
// InvalidArgument on any bad field; the layout is validated too.
absl::StatusOr<Scenario> ParseScenario(const std::string& yaml,
                                       const std::string& source);
absl::StatusOr<Scenario> LoadScenarioFile(const std::string& path);

// Built-in scenarios (src/sim/scenarios/*.yaml compiled in).
std::vector<std::string> BuiltinScenarioNames();
// NotFound listing the names if unknown.
absl::StatusOr<Scenario> BuiltinScenario(const std::string& name);
// The YAML text of a built-in scenario (empty if unknown).
std::string BuiltinScenarioText(const std::string& name);

// Checks the layout and faults (indices in range, factors > 1, ...).
absl::Status ValidateScenario(const Scenario& s);

// Runs `s` for `duration_s` (> 0) instead of its own duration. A scenario
// whose faults are all deceptive normals (the soak) repeats its schedule
// every original duration_s, so a one-hour soak sees the ten-minute one's
// checkpoints, evaluations and jitter six times; any other scenario keeps
// its faults as they are. Returns how many copies of the schedule it holds.
int ExtendScenario(Scenario* s, double duration_s);

// Writes `s` back as YAML (what rank processes read).
std::string ScenarioToYaml(const Scenario& s);

}  // namespace pitstop::sim

#endif  // PITSTOP_SRC_SIM_SCENARIO_H_
