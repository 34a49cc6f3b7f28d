#include "src/c4p/flow_sim.h"

#include <algorithm>
#include <limits>
#include <queue>
#include <unordered_map>

namespace pitstop::c4p {

SimResult SimulateMaxMin(const std::vector<SimFlow>& flows,
                         const std::vector<double>& capacity_gbps,
                         SimMode mode) {
  SimResult out;
  // Compact the links the flows use; link -> flows (CSR).
  std::unordered_map<int, int> index;
  std::vector<double> cap;
  std::vector<std::vector<int>> on_link;
  std::vector<std::vector<int>> path(flows.size());
  int channels = 0;
  for (size_t f = 0; f < flows.size(); ++f) {
    channels = std::max(channels, flows[f].channel + 1);
    if (!flows[f].links || flows[f].bytes <= 0) continue;
    for (int l : *flows[f].links) {
      auto [it, fresh] = index.emplace(l, static_cast<int>(cap.size()));
      if (fresh) {
        cap.push_back(capacity_gbps[l] * 1e9 / 8);  // bytes per second
        on_link.emplace_back();
      }
      path[f].push_back(it->second);
      on_link[it->second].push_back(static_cast<int>(f));
    }
  }
  out.channel_done_s.assign(channels, 0);
  std::vector<double> remaining(flows.size(), 0), rate(flows.size(), 0);
  std::vector<char> active(flows.size(), 0);
  size_t live = 0;
  for (size_t f = 0; f < flows.size(); ++f) {
    if (!path[f].empty()) {
      remaining[f] = flows[f].bytes;
      active[f] = 1;
      ++live;
    }
  }
  const size_t nl = cap.size();
  std::vector<double> rem(nl);
  std::vector<int> count(nl);
  std::vector<uint32_t> version(nl);
  std::vector<char> frozen(flows.size());
  double now = 0;
  using Entry = std::pair<double, std::pair<int, uint32_t>>;
  while (live > 0) {
    // Progressive filling over the active flows.
    std::fill(count.begin(), count.end(), 0);
    for (size_t f = 0; f < flows.size(); ++f) {
      if (!active[f]) continue;
      frozen[f] = 0;
      rate[f] = 0;
      for (int l : path[f]) ++count[l];
    }
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
    for (size_t l = 0; l < nl; ++l) {
      rem[l] = cap[l];
      ++version[l];
      if (count[l] > 0) heap.push({rem[l] / count[l], {int(l), version[l]}});
    }
    while (!heap.empty()) {
      const auto [share, key] = heap.top();
      heap.pop();
      const int l = key.first;
      if (key.second != version[l] || count[l] == 0) continue;
      const double r = std::max(0.0, share);
      for (int f : on_link[l]) {
        if (!active[f] || frozen[f]) continue;
        frozen[f] = 1;
        rate[f] = r;
        for (int m : path[f]) {
          rem[m] -= r;
          --count[m];
          ++version[m];
          if (m != l && count[m] > 0) {
            heap.push({std::max(0.0, rem[m]) / count[m], {m, version[m]}});
          }
        }
      }
    }
    if (mode == SimMode::kSteady) {
      for (size_t f = 0; f < flows.size(); ++f) {
        if (!active[f]) continue;
        if (rate[f] <= 0) {
          out.stuck = true;
          out.completion_s = std::numeric_limits<double>::infinity();
          return out;
        }
        const double t = flows[f].bytes / rate[f];
        double& ch = out.channel_done_s[flows[f].channel];
        ch = std::max(ch, t);
        out.completion_s = std::max(out.completion_s, t);
      }
      return out;
    }
    // Advance to the next finish.
    double dt = std::numeric_limits<double>::infinity();
    for (size_t f = 0; f < flows.size(); ++f) {
      if (active[f] && rate[f] > 0) dt = std::min(dt, remaining[f] / rate[f]);
    }
    if (!(dt < std::numeric_limits<double>::infinity())) {
      out.stuck = true;
      out.completion_s = std::numeric_limits<double>::infinity();
      return out;
    }
    now += dt;
    for (size_t f = 0; f < flows.size(); ++f) {
      if (!active[f]) continue;
      remaining[f] -= rate[f] * dt;
      if (remaining[f] <= flows[f].bytes * 1e-9) {
        active[f] = 0;
        --live;
        double& ch = out.channel_done_s[flows[f].channel];
        ch = std::max(ch, now);
        out.completion_s = std::max(out.completion_s, now);
      }
    }
  }
  return out;
}

}  // namespace pitstop::c4p
