// Generators of leaf/spine and three-tier fabrics (fabric_io.h).
#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "src/c4p/fabric_io.h"
#include "src/c4p/fabric_read_util.h"

namespace pitstop::c4p {

namespace {

// A count key of the spec: its field and allowed range, and why the range.
struct CountKey {
  int* field;
  int min;
  int max;
  const char* why;
};

// Before, gpus=1000000000 or tor_uplinks=1000000 ran for minutes building
// cables, without a word.
std::map<std::string, CountKey> CountKeys(GeneratorOptions* o) {
  return {
      {"gpus",
       {&o->gpus, 1, kMaxGeneratedGpus,
        "2^17; a larger fabric takes minutes and gigabytes to plan"}},
      {"gpus_per_host",
       {&o->gpus_per_host, 1, kMaxGpusPerHost,
        "one NIC each; GB200 NVL72's NVLink domain"}},
      {"rail", {nullptr, 0, 1, "1: rail-optimised, 0: not"}},
      {"hosts_per_tor",
       {&o->hosts_per_tor, 1, kMaxSwitchPorts, "a ToR's ports"}},
      {"planes", {&o->planes, 1, 16, "NIC ports per GPU, one per plane"}},
      {"tor_uplinks",
       {&o->tor_uplinks, 1, kMaxSwitchPorts,
        "a ToR's ports; leave the key out for non-blocking"}},
      {"tors_per_pod",
       {&o->tors_per_pod, 1, kMaxSwitchPorts, "an aggregation switch's ports"}},
      {"agg_uplinks",
       {&o->agg_uplinks, 1, kMaxSwitchPorts,
        "an aggregation switch's ports; leave the key out for non-blocking"}},
  };
}

absl::Status BadKey(const std::string& spec, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("'", spec, "': ", what));
}

// One key=value of the spec into `o`.
absl::Status ParseKey(const std::string& spec, const std::string& part,
                      GeneratorOptions* o) {
  const std::vector<std::string> kv = absl::StrSplit(part, '=');
  std::map<std::string, CountKey> counts = CountKeys(o);
  const std::map<std::string, std::pair<double*, const char*>> reals = {
      {"nic_gbps", {&o->nic_gbps, ""}},
      {"nvlink_gbps", {&o->nvlink_gbps, ""}},
      {"uplink_gbps", {&o->uplink_gbps, "; leave the key out for nic_gbps"}}};
  if (kv.size() != 2 || (!counts.count(kv[0]) && !reals.count(kv[0]))) {
    return BadKey(
        spec, absl::StrCat(
                  "bad '", part,
                  "' (key=value; keys: gpus, gpus_per_host, rail, "
                  "hosts_per_tor, planes, nic_gbps, nvlink_gbps, tor_uplinks, "
                  "uplink_gbps, tors_per_pod, agg_uplinks)"));
  }
  const std::string& key = kv[0];
  if (auto r = reals.find(key); r != reals.end()) {
    double v = 0;
    if (!absl::SimpleAtod(kv[1], &v) || !IsLinkSpeed(v)) {
      return BadKey(spec, absl::StrCat(key, "=", kv[1], ": ", kLinkSpeedRule,
                                       r->second.second));
    }
    *r->second.first = v;
    return absl::OkStatus();
  }
  const CountKey& c = counts.at(key);
  int v = 0;
  if (!absl::SimpleAtoi(kv[1], &v) || v < c.min || v > c.max) {
    return BadKey(spec, absl::StrCat(key, "=", kv[1], ": allowed ", c.min, "..",
                                     c.max, " (", c.why, ")"));
  }
  if (c.field == nullptr) {
    o->rail_optimised = v == 1;
  } else {
    *c.field = v;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GeneratorOptions> ParseGeneratorSpec(const std::string& spec) {
  GeneratorOptions o;
  std::vector<std::string> parts = absl::StrSplit(spec.substr(4), ',');
  if (parts.empty() || parts[0].empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", spec, "': expected gen:leafspine,... or gen:3tier,..."));
  }
  if (parts[0] == "leafspine" || parts[0] == "2tier") {
    o.kind = GeneratorOptions::Kind::kLeafSpine;
  } else if (parts[0] == "3tier" || parts[0] == "threetier") {
    o.kind = GeneratorOptions::Kind::kThreeTier;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("'", spec, "': unknown fabric kind '", parts[0],
                     "' (leafspine or 3tier)"));
  }
  std::set<std::string> seen;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string key = parts[i].substr(0, parts[i].find('='));
    if (!seen.insert(key).second) {
      // Before, the last one silently won.
      return BadKey(spec, absl::StrCat(key, " is given twice"));
    }
    if (absl::Status s = ParseKey(spec, parts[i], &o); !s.ok()) return s;
    if (o.kind == GeneratorOptions::Kind::kLeafSpine &&
        (key == "tors_per_pod" || key == "agg_uplinks")) {
      // Before, ignored: a leaf/spine fabric has no pods.
      return BadKey(spec, absl::StrCat(key,
                                       " is a gen:3tier key (a "
                                       "leaf/spine fabric has no pods "
                                       "or aggregation switches)"));
    }
  }
  if (o.gpus % o.gpus_per_host != 0) {
    return BadKey(spec, absl::StrCat("gpus=", o.gpus,
                                     " is not a multiple of gpus_per_host=",
                                     o.gpus_per_host));
  }
  return o;
}

std::string GeneratorSpecHelp() {
  const GeneratorOptions d;
  return absl::StrCat(
      "gen:leafspine[,gpus=", d.gpus, ",gpus_per_host=", d.gpus_per_host,
      ",rail=", d.rail_optimised ? 1 : 0, ",hosts_per_tor=", d.hosts_per_tor,
      ",planes=", d.planes, ",nic_gbps=", d.nic_gbps,
      ",nvlink_gbps=", d.nvlink_gbps,
      ",tor_uplinks=N,uplink_gbps=G] or gen:3tier[,the same keys,"
      "tors_per_pod=",
      d.tors_per_pod,
      ",agg_uplinks=N] (tor_uplinks and agg_uplinks: non-blocking unless "
      "given; uplink_gbps: nic_gbps unless given)");
}

namespace {

// InvalidArgument naming the first field outside its spec key's range (0
// stands for the default where the options say so).
absl::Status CheckGeneratorOptions(const GeneratorOptions& given) {
  GeneratorOptions o = given;
  for (const auto& [key, c] : CountKeys(&o)) {
    if (c.field == nullptr) continue;
    const int v = *c.field;
    if (v == 0 && (key == "tor_uplinks" || key == "agg_uplinks")) continue;
    if (v < c.min || v > c.max) {
      return absl::InvalidArgumentError(absl::StrCat("generator: ", key, "=", v,
                                                     ": allowed ", c.min, "..",
                                                     c.max, " (", c.why, ")"));
    }
  }
  for (const auto& [key, v] :
       {std::pair<const char*, double>{"nic_gbps", o.nic_gbps},
        {"nvlink_gbps", o.nvlink_gbps},
        {"uplink_gbps", o.uplink_gbps}}) {
    if (IsLinkSpeed(v) || (v == 0 && key[0] == 'u')) continue;
    return absl::InvalidArgumentError(
        absl::StrCat("generator: ", key, "=", v, ": ", kLinkSpeedRule));
  }
  if (o.gpus % o.gpus_per_host != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("generator: gpus=", o.gpus,
                     " is not a multiple of gpus_per_host=", o.gpus_per_host));
  }
  return absl::OkStatus();
}

// Each key in range can still multiply into a fabric no run can hold
// (CheckBuildSize).
absl::Status CheckGeneratedSize(const GeneratorOptions& o, int64_t tors,
                                int64_t up, int64_t pods, int64_t agg_up,
                                bool three) {
  const int64_t planes = o.planes;
  const int64_t hosts = o.gpus / o.gpus_per_host;
  const int64_t switches =
      planes * (tors + (three ? pods * up + up * agg_up : up));
  const int64_t nodes = o.gpus + hosts + switches;
  const int64_t cables =
      int64_t{o.gpus} * (1 + planes) +
      planes * (tors * up + (three ? pods * up * agg_up : 0));
  return CheckBuildSize(
      absl::StrCat("generator: ", o.gpus, " GPUs in ", planes * tors,
                   " ToRs of ", o.hosts_per_tor, " hosts with ", up,
                   " uplinks"),
      cables, planes * tors * nodes,
      "fewer gpus, tor_uplinks, agg_uplinks or planes, more hosts_per_tor or "
      "tors_per_pod");
}

}  // namespace

absl::StatusOr<Fabric> GenerateFabric(const GeneratorOptions& o,
                                      const BuildProgress& progress) {
  if (absl::Status s = CheckGeneratorOptions(o); !s.ok()) return s;
  const bool three = o.kind == GeneratorOptions::Kind::kThreeTier;
  const int hosts = o.gpus / o.gpus_per_host;
  const int segments = (hosts + o.hosts_per_tor - 1) / o.hosts_per_tor;
  const int tors_per_segment = o.rail_optimised ? o.gpus_per_host : 1;
  const int down =
      o.rail_optimised ? o.hosts_per_tor : o.hosts_per_tor * o.gpus_per_host;
  const int up = o.tor_uplinks > 0 ? o.tor_uplinks : down;
  const double up_gbps = o.uplink_gbps > 0 ? o.uplink_gbps : o.nic_gbps;
  const int tors = segments * tors_per_segment;  // per plane
  const int pods = three ? (tors + o.tors_per_pod - 1) / o.tors_per_pod : 1;
  const int agg_up = o.agg_uplinks > 0 ? o.agg_uplinks : o.tors_per_pod;
  if (absl::Status s = CheckGeneratedSize(o, tors, up, pods, agg_up, three);
      !s.ok()) {
    return s;
  }

  Fabric fab;
  // tor_node[plane][segment * tors_per_segment + rail]
  std::vector<std::vector<int>> tor_node(o.planes);
  for (int p = 0; p < o.planes; ++p) {
    // The plane last ("spine3p1", "tor0.2p1"): before, "spinep" + plane +
    // index made plane 1's spine 10 and plane 11's spine 0 one name.
    const std::string ps = o.planes > 1 ? absl::StrCat("p", p) : "";
    std::vector<int> cores;  // three-tier: [agg index * agg_up + j]
    if (three) {
      for (int k = 0; k < up; ++k) {
        for (int j = 0; j < agg_up; ++j) {
          cores.push_back(fab.AddSwitch(NodeKind::kCore,
                                        absl::StrCat("core", k, ".", j, ps)));
        }
      }
    }
    std::vector<int> spines;
    if (!three) {
      for (int k = 0; k < up; ++k) {
        spines.push_back(
            fab.AddSwitch(NodeKind::kAgg, absl::StrCat("spine", k, ps)));
      }
    }
    std::vector<std::vector<int>> pod_aggs(pods);
    if (three) {
      for (int pod = 0; pod < pods; ++pod) {
        for (int k = 0; k < up; ++k) {
          const int agg = fab.AddSwitch(
              NodeKind::kAgg, absl::StrCat("pod", pod, ps, "/agg", k));
          pod_aggs[pod].push_back(agg);
          for (int j = 0; j < agg_up; ++j) {
            fab.AddCable(agg, cores[k * agg_up + j], LinkKind::kFabric,
                         up_gbps);
          }
        }
      }
    }
    for (int t = 0; t < tors; ++t) {
      const int seg = t / tors_per_segment, rail = t % tors_per_segment;
      const std::string name = o.rail_optimised
                                   ? absl::StrCat("tor", seg, ".", rail, ps)
                                   : absl::StrCat("tor", seg, ps);
      const int tor = fab.AddSwitch(NodeKind::kTor, name);
      tor_node[p].push_back(tor);
      const std::vector<int>& above =
          three ? pod_aggs[t / o.tors_per_pod] : spines;
      for (int s : above) fab.AddCable(tor, s, LinkKind::kFabric, up_gbps);
    }
  }
  for (int h = 0; h < hosts; ++h) {
    if (progress) progress("generating hosts", h, hosts);
    const int host = fab.AddHost(absl::StrCat("host", h));
    const int nvs = fab.AddNvSwitch(host, absl::StrCat("host", h, "/nvswitch"));
    const int seg = h / o.hosts_per_tor;
    for (int g = 0; g < o.gpus_per_host; ++g) {
      const int gpu = fab.AddGpu(host);
      fab.AddCable(gpu, nvs, LinkKind::kNvLink, o.nvlink_gbps);
      for (int p = 0; p < o.planes; ++p) {
        const int t = seg * tors_per_segment + (o.rail_optimised ? g : 0);
        fab.AddCable(gpu, tor_node[p][t], LinkKind::kNic, o.nic_gbps);
      }
    }
  }
  fab.description = absl::StrCat(
      three ? "three-tier Clos" : "leaf/spine",
      o.rail_optimised ? ", rail-optimised" : "", ": ", hosts, " hosts x ",
      o.gpus_per_host, " GPUs (", o.nic_gbps, " Gbps NICs",
      o.planes > 1 ? absl::StrCat(", ", o.planes, " planes") : "", "), ",
      tors * o.planes, " ToRs of ", o.hosts_per_tor, " hosts with ", up, " x ",
      up_gbps, " Gbps uplinks",
      three ? absl::StrCat(", ", pods, " pods, ", up * agg_up * o.planes,
                           " cores")
            : absl::StrCat(", ", up * o.planes, " spines"));
  absl::Status s = fab.Finalize(progress);
  if (!s.ok()) return s;
  return fab;
}

}  // namespace pitstop::c4p
