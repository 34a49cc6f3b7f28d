#include "src/controller/plan/bound.h"

#include <algorithm>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"

namespace pitstop::plan {

double CutBound(const Fabric& fabric, const std::vector<Flow>& flows,
                double degraded_below) {
  auto gbps_sum = [&](const std::vector<int>& links) {
    double s = 0;
    for (int l : links) s += fabric.link(l).gbps;
    return s;
  };
  auto nic_degraded = [&](int gpu) {
    for (int l : fabric.nic_uplinks(gpu)) {
      for (int d : {l, l ^ 1}) {
        const FabricLink& fl = fabric.link(d);
        if (fl.gbps < fl.nominal_gbps * degraded_below) return true;
      }
    }
    return false;
  };
  // Groups of endpoints whose traffic has no way around a set of links:
  // key -> (bytes, links). "o:" out of, "i:" into.
  std::map<std::string, std::pair<double, std::vector<int>>> cuts;
  auto add = [&](const std::string& key, double bytes,
                 const std::vector<int>& links) {
    auto [it, fresh] = cuts.emplace(key, std::make_pair(0.0, links));
    it->second.first += bytes;
  };
  auto nic_links = [&](int gpu, bool out, bool whole_host) {
    std::vector<int> ls;
    std::vector<int> gpus = {gpu};
    if (whole_host) gpus = fabric.hosts()[fabric.node(gpu).host].gpus;
    for (int g : gpus) {
      for (int l : fabric.nic_uplinks(g)) ls.push_back(out ? l : l ^ 1);
    }
    return ls;
  };
  // Pods: ToRs grouped by the switches above them.
  std::map<int, std::string> pod_of;
  std::map<std::string, std::vector<int>> pod_up;
  for (size_t n = 0; n < fabric.nodes().size(); ++n) {
    if (fabric.node(n).kind != NodeKind::kTor) continue;
    std::vector<int> above;
    for (int l : fabric.out_links(n)) {
      if (fabric.link(l).kind == LinkKind::kFabric) {
        above.push_back(fabric.link(l).dst);
      }
    }
    std::sort(above.begin(), above.end());
    std::string key;
    for (int a : above) absl::StrAppend(&key, a, ",");
    pod_of[n] = key;
    if (!pod_up.count(key)) {
      std::vector<int> up;
      for (int a : above) {
        for (int l : fabric.out_links(a)) {
          const FabricLink& fl = fabric.link(l);
          if (fl.kind == LinkKind::kFabric &&
              fabric.node(fl.dst).kind != NodeKind::kTor) {
            up.push_back(l);
          }
        }
      }
      pod_up[key] = up;
    }
  }
  for (const Flow& f : flows) {
    if (!f.network) continue;
    const bool sd = nic_degraded(f.src_gpu), dd = nic_degraded(f.dst_gpu);
    add(absl::StrCat("o:", sd ? -1 - fabric.node(f.src_gpu).host : f.src_gpu),
        f.bytes, nic_links(f.src_gpu, true, sd));
    add(absl::StrCat("i:", dd ? -1 - fabric.node(f.dst_gpu).host : f.dst_gpu),
        f.bytes, nic_links(f.dst_gpu, false, dd));
    // ToR and pod cuts only hold for single-port NICs that stay put.
    const auto& su = fabric.nic_uplinks(f.src_gpu);
    const auto& du = fabric.nic_uplinks(f.dst_gpu);
    if (sd || dd || su.size() != 1 || du.size() != 1) continue;
    const int st = fabric.tor_of_uplink(su[0]),
              dt = fabric.tor_of_uplink(du[0]);
    if (st == dt) continue;
    std::vector<int> up, down;
    for (int l : fabric.out_links(st)) {
      if (fabric.link(l).kind == LinkKind::kFabric) up.push_back(l);
    }
    for (int l : fabric.out_links(dt)) {
      if (fabric.link(l).kind == LinkKind::kFabric) down.push_back(l ^ 1);
    }
    add(absl::StrCat("tu:", st), f.bytes, up);
    add(absl::StrCat("td:", dt), f.bytes, down);
    const std::string& sp = pod_of[st];
    const std::string& dp = pod_of[dt];
    if (sp != dp && !pod_up[sp].empty() && !pod_up[dp].empty()) {
      add("pu:" + sp, f.bytes, pod_up[sp]);
      std::vector<int> pd;
      for (int l : pod_up[dp]) pd.push_back(l ^ 1);
      add("pd:" + dp, f.bytes, pd);
    }
  }
  double worst = 0;
  for (const auto& [key, c] : cuts) {
    const double g = gbps_sum(c.second);
    const double t = g > 0 ? c.first * 8 / (g * 1e9) : 1e30;
    worst = std::max(worst, t);
  }
  return worst;
}

}  // namespace pitstop::plan
