#include "src/c4p/bound.h"

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>

#include "absl/strings/str_cat.h"

namespace pitstop::c4p {

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
  // key (kind << 56 | id) -> (bytes, capacity of the links in Gbps).
  enum : uint64_t { kOut = 1, kIn, kTorUp, kTorDown, kPodUp, kPodDown };
  std::unordered_map<uint64_t, std::pair<double, double>> cuts;
  auto add = [&](uint64_t kind, int64_t id, double bytes, auto links_fn) {
    const uint64_t key =
        (kind << 56) | (static_cast<uint64_t>(id) & ((uint64_t{1} << 56) - 1));
    auto it = cuts.find(key);
    if (it == cuts.end()) {
      it = cuts.emplace(key, std::make_pair(0.0, gbps_sum(links_fn()))).first;
    }
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
  std::unordered_map<int, int> pod_of;
  std::vector<std::vector<int>> pod_up;
  {
    std::map<std::vector<int>, int> pod_ids;
    for (size_t n = 0; n < fabric.nodes().size(); ++n) {
      if (fabric.node(n).kind != NodeKind::kTor) continue;
      std::vector<int> above;
      for (int l : fabric.out_links(n)) {
        if (fabric.link(l).kind == LinkKind::kFabric) {
          above.push_back(fabric.link(l).dst);
        }
      }
      std::sort(above.begin(), above.end());
      auto [it, fresh] = pod_ids.emplace(above, int(pod_up.size()));
      pod_of[static_cast<int>(n)] = it->second;
      if (!fresh) continue;
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
      pod_up.push_back(std::move(up));
    }
  }
  auto fabric_links = [&](int tor, bool up) {
    std::vector<int> ls;
    for (int l : fabric.out_links(tor)) {
      if (fabric.link(l).kind == LinkKind::kFabric)
        ls.push_back(up ? l : l ^ 1);
    }
    return ls;
  };
  for (const Flow& f : flows) {
    if (!f.network) continue;
    const bool sd = nic_degraded(f.src_gpu), dd = nic_degraded(f.dst_gpu);
    add(kOut, sd ? -1 - fabric.node(f.src_gpu).host : f.src_gpu, f.bytes,
        [&] { return nic_links(f.src_gpu, true, sd); });
    add(kIn, dd ? -1 - fabric.node(f.dst_gpu).host : f.dst_gpu, f.bytes,
        [&] { return nic_links(f.dst_gpu, false, dd); });
    // ToR and pod cuts only hold for single-port NICs that stay put.
    const auto& su = fabric.nic_uplinks(f.src_gpu);
    const auto& du = fabric.nic_uplinks(f.dst_gpu);
    if (sd || dd || su.size() != 1 || du.size() != 1) continue;
    const int st = fabric.tor_of_uplink(su[0]),
              dt = fabric.tor_of_uplink(du[0]);
    if (st == dt) continue;
    add(kTorUp, st, f.bytes, [&] { return fabric_links(st, true); });
    add(kTorDown, dt, f.bytes, [&] { return fabric_links(dt, false); });
    const int sp = pod_of[st], dp = pod_of[dt];
    if (sp != dp && !pod_up[sp].empty() && !pod_up[dp].empty()) {
      add(kPodUp, sp, f.bytes, [&] { return pod_up[sp]; });
      add(kPodDown, dp, f.bytes, [&] {
        std::vector<int> pd;
        for (int l : pod_up[dp]) pd.push_back(l ^ 1);
        return pd;
      });
    }
  }
  double worst = 0;
  for (const auto& [key, c] : cuts) {
    const double g = c.second;
    const double t = g > 0 ? c.first * 8 / (g * 1e9) : 1e30;
    worst = std::max(worst, t);
  }
  return worst;
}

}  // namespace pitstop::c4p
