#include "src/c4p/bound.h"

#include <algorithm>
#include <functional>
#include <map>
#include <queue>
#include <unordered_map>
#include <utility>

namespace pitstop::c4p {
namespace {

// A set of links that a group of flows cannot avoid: every flow of the
// group crosses exactly one of them.
struct Cut {
  std::vector<double> gbps;   // capacity of each link
  double bytes = 0;           // of the flows that must cross it
  std::vector<double> sizes;  // each flow's bytes (only when asked)
};

class CutCollector {
 public:
  CutCollector(const Fabric& fabric, double degraded_below, bool keep_sizes)
      : fabric_(fabric),
        degraded_below_(degraded_below),
        keep_sizes_(keep_sizes) {
    FindPods();
    nic_degraded_.assign(fabric_.nodes().size(), 0);
    host_degraded_.assign(fabric_.hosts().size(), 0);
    for (size_t h = 0; h < fabric_.hosts().size(); ++h) {
      for (int g : fabric_.hosts()[h].gpus) {
        nic_degraded_[g] = NicDegraded(g);
        host_degraded_[h] |= nic_degraded_[g];
      }
    }
  }

  void AddFlow(const Flow& f);
  std::vector<Cut> Take() {
    std::vector<Cut> out;
    out.reserve(cuts_.size());
    for (auto& [key, c] : cuts_) out.push_back(std::move(c));
    return out;
  }

 private:
  enum : uint64_t { kOut = 1, kIn, kTorUp, kTorDown, kPodUp, kPodDown };
  template <typename LinksFn>
  void Add(uint64_t kind, int64_t id, double bytes, LinksFn links_fn);
  bool NicDegraded(int gpu) const;
  std::vector<int> NicLinks(int gpu, bool out, bool whole_host) const;
  std::vector<int> TorLinks(int tor, bool up) const;
  void FindPods();

  const Fabric& fabric_;
  const double degraded_below_;
  const bool keep_sizes_;
  // key (kind << 56 | id) -> cut.
  std::unordered_map<uint64_t, Cut> cuts_;
  std::vector<char> nic_degraded_;   // by node id (GPUs)
  std::vector<char> host_degraded_;  // any NIC of the host
  // Pods: ToRs grouped by the switches above them.
  std::unordered_map<int, int> pod_of_;
  std::vector<std::vector<int>> pod_up_;
};

template <typename LinksFn>
void CutCollector::Add(uint64_t kind, int64_t id, double bytes,
                       LinksFn links_fn) {
  const uint64_t key =
      (kind << 56) | (static_cast<uint64_t>(id) & ((uint64_t{1} << 56) - 1));
  auto it = cuts_.find(key);
  if (it == cuts_.end()) {
    Cut c;
    for (int l : links_fn()) c.gbps.push_back(fabric_.link(l).gbps);
    it = cuts_.emplace(key, std::move(c)).first;
  }
  it->second.bytes += bytes;
  if (keep_sizes_) it->second.sizes.push_back(bytes);
}

bool CutCollector::NicDegraded(int gpu) const {
  for (int l : fabric_.nic_uplinks(gpu)) {
    for (int d : {l, l ^ 1}) {
      const FabricLink& fl = fabric_.link(d);
      if (fl.gbps < fl.nominal_gbps * degraded_below_) return true;
    }
  }
  return false;
}

std::vector<int> CutCollector::NicLinks(int gpu, bool out,
                                        bool whole_host) const {
  std::vector<int> ls;
  std::vector<int> gpus = {gpu};
  if (whole_host) gpus = fabric_.hosts()[fabric_.node(gpu).host].gpus;
  for (int g : gpus) {
    for (int l : fabric_.nic_uplinks(g)) ls.push_back(out ? l : l ^ 1);
  }
  return ls;
}

std::vector<int> CutCollector::TorLinks(int tor, bool up) const {
  std::vector<int> ls;
  for (int l : fabric_.out_links(tor)) {
    if (fabric_.link(l).kind == LinkKind::kFabric) ls.push_back(up ? l : l ^ 1);
  }
  return ls;
}

void CutCollector::FindPods() {
  std::map<std::vector<int>, int> pod_ids;
  for (size_t n = 0; n < fabric_.nodes().size(); ++n) {
    if (fabric_.node(n).kind != NodeKind::kTor) continue;
    std::vector<int> above;
    for (int l : fabric_.out_links(n)) {
      if (fabric_.link(l).kind == LinkKind::kFabric) {
        above.push_back(fabric_.link(l).dst);
      }
    }
    std::sort(above.begin(), above.end());
    auto [it, fresh] = pod_ids.emplace(above, int(pod_up_.size()));
    pod_of_[static_cast<int>(n)] = it->second;
    if (!fresh) continue;
    std::vector<int> up;
    for (int a : above) {
      for (int l : fabric_.out_links(a)) {
        const FabricLink& fl = fabric_.link(l);
        if (fl.kind == LinkKind::kFabric &&
            fabric_.node(fl.dst).kind != NodeKind::kTor) {
          up.push_back(l);
        }
      }
    }
    pod_up_.push_back(std::move(up));
  }
}

void CutCollector::AddFlow(const Flow& f) {
  if (!f.network) return;
  const bool sd = nic_degraded_[f.src_gpu], dd = nic_degraded_[f.dst_gpu];
  // A flow of a healthy NIC stays on it; a degraded NIC's flows may move to
  // any NIC of the host. Every flow of a host with a degraded NIC crosses
  // the host's NIC links, so the host's cut holds all of them, not only
  // the degraded NIC's.
  if (!sd) {
    Add(kOut, f.src_gpu, f.bytes, [&] { return NicLinks(f.src_gpu, true, 0); });
  }
  if (!dd) {
    Add(kIn, f.dst_gpu, f.bytes, [&] { return NicLinks(f.dst_gpu, false, 0); });
  }
  const int sh = fabric_.node(f.src_gpu).host,
            dh = fabric_.node(f.dst_gpu).host;
  if (host_degraded_[sh]) {
    Add(kOut, -1 - sh, f.bytes, [&] { return NicLinks(f.src_gpu, true, 1); });
  }
  if (host_degraded_[dh]) {
    Add(kIn, -1 - dh, f.bytes, [&] { return NicLinks(f.dst_gpu, false, 1); });
  }
  // ToR and pod cuts only hold for single-port NICs that stay put.
  const auto& su = fabric_.nic_uplinks(f.src_gpu);
  const auto& du = fabric_.nic_uplinks(f.dst_gpu);
  if (sd || dd || su.size() != 1 || du.size() != 1) return;
  const int st = fabric_.tor_of_uplink(su[0]),
            dt = fabric_.tor_of_uplink(du[0]);
  if (st == dt) return;
  Add(kTorUp, st, f.bytes, [&] { return TorLinks(st, true); });
  Add(kTorDown, dt, f.bytes, [&] { return TorLinks(dt, false); });
  const int sp = pod_of_[st], dp = pod_of_[dt];
  if (sp != dp && !pod_up_[sp].empty() && !pod_up_[dp].empty()) {
    Add(kPodUp, sp, f.bytes, [&] { return pod_up_[sp]; });
    Add(kPodDown, dp, f.bytes, [&] {
      std::vector<int> pd;
      for (int l : pod_up_[dp]) pd.push_back(l ^ 1);
      return pd;
    });
  }
}

std::vector<Cut> Collect(const Fabric& fabric, const std::vector<Flow>& flows,
                         double degraded_below, bool keep_sizes) {
  CutCollector collector(fabric, degraded_below, keep_sizes);
  for (const Flow& f : flows) collector.AddFlow(f);
  return collector.Take();
}

// Seconds the cut needs with its bytes spread perfectly.
double FluidTime(const Cut& c) {
  double g = 0;
  for (double x : c.gbps) g += x;
  return g > 0 ? c.bytes * 8 / (g * 1e9) : 1e30;
}

// Seconds the busiest link of the cut needs at least when `j` whole flows
// of at least `bytes` each cross it, one link each: the j-th flow placed
// where it finishes first (equal flows: exact; larger ones: only slower).
double WholeTime(const std::vector<double>& gbps, int j, double bytes) {
  using Slot = std::pair<double, int>;  // (time with one more flow, link)
  std::priority_queue<Slot, std::vector<Slot>, std::greater<Slot>> next;
  std::vector<int> count(gbps.size(), 0);
  for (size_t i = 0; i < gbps.size(); ++i) {
    if (gbps[i] > 0) next.emplace(bytes * 8 / (gbps[i] * 1e9), int(i));
  }
  if (next.empty()) return 1e30;
  double t = 0;
  for (int k = 0; k < j; ++k) {
    const auto [time, i] = next.top();
    next.pop();
    t = time;
    ++count[i];
    next.emplace((count[i] + 1) * bytes * 8 / (gbps[i] * 1e9), i);
  }
  return t;
}

// The whole-flow bound of one cut: for the j largest flows (each at least
// the j-th's size) at the last index of each distinct size.
double WholeCutTime(Cut* c) {
  std::vector<double>& s = c->sizes;
  std::sort(s.begin(), s.end(), std::greater<double>());
  double worst = 0;
  // Few distinct sizes in practice (equal QPs); bound the work otherwise.
  const size_t stride = std::max<size_t>(1, s.size() / 32);
  for (size_t j = 1; j <= s.size(); ++j) {
    const bool last_of_size = j == s.size() || s[j] < s[j - 1] * (1 - 1e-12);
    if (!last_of_size || (j % stride != 0 && j != s.size())) continue;
    worst = std::max(worst, WholeTime(c->gbps, static_cast<int>(j), s[j - 1]));
  }
  return worst;
}

}  // namespace

double CutBound(const Fabric& fabric, const std::vector<Flow>& flows,
                double degraded_below) {
  double worst = 0;
  for (const Cut& c : Collect(fabric, flows, degraded_below, false)) {
    worst = std::max(worst, FluidTime(c));
  }
  return worst;
}

double WholeFlowBound(const Fabric& fabric, const std::vector<Flow>& flows,
                      double degraded_below) {
  double worst = 0;
  for (Cut& c : Collect(fabric, flows, degraded_below, true)) {
    worst = std::max({worst, FluidTime(c), WholeCutTime(&c)});
  }
  return worst;
}

}  // namespace pitstop::c4p
