// Fabric readers and generators.
//
// - SimAI topology files (../shared/data/topology/, aliyun/SimAI): header
//   `<nodes> <gpus_per_server> <nvswitches> <switches> <links> <gpu_type>`,
//   a line of switch ids (NVSwitches first), one line per cable
//   `<src> <dst> <N>Gbps <N>ms <error_rate>`. Ids below
//   nodes - nvswitches - switches are GPUs; GPU i is on server
//   i / gpus_per_server. Switches linked to GPUs are ToRs, the next tier
//   spines (aggregation), the one above core.
// - Three-tier Clos CSV (Alibaba's cluster datasets): a header naming the
//   columns `ip,DSW,PSW,ASW` (any order), one row per host. Alibaba's names:
//   ASW is the access switch (ToR), PSW the pod switch group (aggregation),
//   DSW the core group. The file names each host's ToR and groups but not how
//   many switches a group has nor how fast anything is: those come from
//   ClosCsvOptions (flags of `pitstop plan`) and are listed in
//   Fabric::assumptions().
// - InfiniBand discovery output (ibnetdiscover.h).
// - Generators of rail-optimised or plain leaf/spine and three-tier fabrics
//   of any size ("gen:" specs, see ParseGeneratorSpec).
//
// Errors name the file and line (or the spec and key).
#ifndef PITSTOP_SRC_CONTROLLER_PLAN_FABRIC_IO_H_
#define PITSTOP_SRC_CONTROLLER_PLAN_FABRIC_IO_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/c4p/fabric.h"
#include "src/c4p/ibnetdiscover.h"

namespace pitstop::c4p {

struct SimAiLink {
  int src = 0;
  int dst = 0;
  double gbps = 0;
  double latency_ms = 0;
  double error_rate = 0;
  int line = 0;  // 1-based line in the file
};

struct SimAiFile {
  int total_nodes = 0;
  int gpus_per_server = 0;
  int nvswitches = 0;
  int switches = 0;
  int declared_links = 0;
  std::string gpu_type;
  int gpus = 0;  // total_nodes - nvswitches - switches
  std::vector<int> switch_ids;
  std::vector<SimAiLink> links;
};

// Parses and checks the text (ids in range, counts as declared).
absl::StatusOr<SimAiFile> ParseSimAi(const std::string& text,
                                     const std::string& source);
absl::StatusOr<Fabric> FabricFromSimAi(const SimAiFile& file,
                                       const std::string& source,
                                       const BuildProgress& progress = nullptr);

// The most GPUs (= NICs) a host may have: GB200 NVL72's NVLink domain.
// More is a typo, and ran for minutes before it was refused.
inline constexpr int kMaxGpusPerHost = 72;
// The most ports a switch has (51.2 Tb/s at 100 Gbps a port): the bound on
// uplink counts the CSV flags and gen: keys assume. Before, 1,000,000 ran
// for minutes and 2147483647 aborted on std::bad_alloc.
inline constexpr int kMaxSwitchPorts = 512;
// The most GPUs a generated fabric has: kMaxFabricGpus (fabric.h).
inline constexpr int kMaxGeneratedGpus = kMaxFabricGpus;
// The most core switches a three-tier CSV's flags may make
// (--aggs-per-pod x --cores-per-agg): 8x what a non-blocking fabric of
// kMaxFabricGpus GPUs needs with 64-port switches (131072 / 64 = 2048).
// Before, 512 x 512 ran for a minute and more without a word.
inline constexpr int kMaxCoreSwitches = 16384;

struct ClosCsvOptions {
  int gpus_per_host = 8;  // one NIC per GPU; 1..kMaxGpusPerHost
  double nic_gbps = 400;  // NIC <-> ToR
  int aggs_per_pod = 8;   // uplinks per ToR (one to each agg of its pod)
  double tor_uplink_gbps = 400;
  int cores_per_agg = 8;  // uplinks per aggregation switch
  double agg_uplink_gbps = 400;
  double nvlink_gbps = 3600;  // GPU <-> NVSwitch, per direction
};
absl::StatusOr<Fabric> ParseClosCsv(const std::string& text,
                                    const std::string& source,
                                    const ClosCsvOptions& options,
                                    const BuildProgress& progress = nullptr);

// Generated fabrics. Defaults are non-blocking (a ToR has as many uplinks as
// NIC ports below it, at the NIC speed).
struct GeneratorOptions {
  enum class Kind { kLeafSpine, kThreeTier };
  Kind kind = Kind::kLeafSpine;
  int gpus = 1024;
  int gpus_per_host = 8;  // = NICs per host (one per rail)
  bool rail_optimised = true;
  int hosts_per_tor = 16;  // hosts in one ToR's segment
  int planes = 1;          // NIC ports, each to its own plane of ToRs
  double nic_gbps = 400;
  double nvlink_gbps = 3600;
  // Uplinks per ToR (= spines per plane for leaf/spine, aggs per pod for
  // three-tier); 0 = as many as the ToR has downlinks (non-blocking).
  int tor_uplinks = 0;
  double uplink_gbps = 0;  // 0 = nic_gbps
  int tors_per_pod = 64;   // three-tier: ToRs under one set of aggs
  int agg_uplinks = 0;     // three-tier: cores per plane; 0 = non-blocking
};
// "gen:leafspine,gpus=1024,rail=1,hosts_per_tor=16,tor_uplinks=16,..."
// "gen:3tier,gpus=8192,..." Keys are GeneratorOptions' field names (rail for
// rail_optimised). InvalidArgument naming the key and its allowed range on
// a bad value (out of range, 0 for a count or speed, rail other than 0 or
// 1), an unknown key or a key given twice.
absl::StatusOr<GeneratorOptions> ParseGeneratorSpec(const std::string& spec);
// The spec's keys with GeneratorOptions' defaults, for help text (before,
// `pitstop plan --help` wrote its own and showed tors_per_pod=16 for 64).
std::string GeneratorSpecHelp();
absl::StatusOr<Fabric> GenerateFabric(const GeneratorOptions& options,
                                      const BuildProgress& progress = nullptr);

// `what` is a "gen:" spec, a .csv file (or one whose first line starts with
// "ip,"), ibnetdiscover output (ibnetdiscover.h) or a SimAI file; "-" or
// "/dev/stdin" reads one from standard input (a pipe too), named "<stdin>".
// `progress`: Fabric::Finalize's.
absl::StatusOr<Fabric> LoadFabric(const std::string& what,
                                  const ClosCsvOptions& csv_options,
                                  const IbOptions& ib_options = {},
                                  const BuildProgress& progress = nullptr);

}  // namespace pitstop::c4p

#endif  // PITSTOP_SRC_CONTROLLER_PLAN_FABRIC_IO_H_
