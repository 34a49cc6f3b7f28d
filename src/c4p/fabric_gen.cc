// Generators of leaf/spine and three-tier fabrics (fabric_io.h).
#include <map>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "src/c4p/fabric_io.h"

namespace pitstop::c4p {

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
  std::map<std::string, int*> ints = {{"gpus", &o.gpus},
                                      {"gpus_per_host", &o.gpus_per_host},
                                      {"hosts_per_tor", &o.hosts_per_tor},
                                      {"planes", &o.planes},
                                      {"tor_uplinks", &o.tor_uplinks},
                                      {"tors_per_pod", &o.tors_per_pod},
                                      {"agg_uplinks", &o.agg_uplinks}};
  std::map<std::string, double*> reals = {{"nic_gbps", &o.nic_gbps},
                                          {"nvlink_gbps", &o.nvlink_gbps},
                                          {"uplink_gbps", &o.uplink_gbps}};
  for (size_t i = 1; i < parts.size(); ++i) {
    std::vector<std::string> kv = absl::StrSplit(parts[i], '=');
    const std::string key = kv[0];
    bool ok = kv.size() == 2;
    if (ok && key == "rail") {
      int v = 0;
      ok = absl::SimpleAtoi(kv[1], &v);
      o.rail_optimised = v != 0;
    } else if (ok && ints.count(key)) {
      ok = absl::SimpleAtoi(kv[1], ints[key]) && *ints[key] >= 0;
    } else if (ok && reals.count(key)) {
      ok = absl::SimpleAtod(kv[1], reals[key]) && *reals[key] >= 0;
    } else {
      ok = false;
    }
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", spec, "': bad '", parts[i],
          "' (keys: gpus, gpus_per_host, rail, hosts_per_tor, planes, "
          "nic_gbps, nvlink_gbps, tor_uplinks, uplink_gbps, tors_per_pod, "
          "agg_uplinks)"));
    }
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

absl::StatusOr<Fabric> GenerateFabric(const GeneratorOptions& o) {
  if (o.gpus <= 0 || o.gpus_per_host <= 0 || o.gpus % o.gpus_per_host != 0 ||
      o.hosts_per_tor <= 0 || o.planes <= 0 || o.nic_gbps <= 0 ||
      o.tors_per_pod <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "generator: ", o.gpus, " GPUs must be a positive multiple of ",
        o.gpus_per_host,
        " GPUs per host; hosts_per_tor, planes, nic_gbps, tors_per_pod > 0"));
  }
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
  absl::Status s = fab.Finalize();
  if (!s.ok()) return s;
  return fab;
}

}  // namespace pitstop::c4p
