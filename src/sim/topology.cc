#include "src/sim/topology.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/c4p/fabric_io.h"

namespace pitstop::sim {

absl::StatusOr<Topology> ParseTopology(const std::string& text,
                                       const std::string& source) {
  // One reader of the format for the simulator and the planner.
  absl::StatusOr<c4p::SimAiFile> f = c4p::ParseSimAi(text, source);
  if (!f.ok()) return f.status();
  Topology t;
  t.gpus = f->gpus;
  t.gpus_per_node = f->gpus_per_server;
  t.nodes = t.gpus / t.gpus_per_node;
  t.links = static_cast<int>(f->links.size());
  std::set<int> nvswitch_ids(
      f->switch_ids.begin(),
      f->switch_ids.begin() +
          std::min<size_t>(f->nvswitches, f->switch_ids.size()));
  for (const c4p::SimAiLink& l : f->links) {
    const bool gpu_end = l.src < t.gpus || l.dst < t.gpus;
    if (!gpu_end) continue;
    const int other = l.src < t.gpus ? l.dst : l.src;
    const bool nvlink = nvswitch_ids.count(other) > 0;
    double& bw = nvlink ? t.nvlink_gbps : t.nic_gbps;
    double& lat = nvlink ? t.nvlink_latency_us : t.net_latency_us;
    if (bw == 0 || l.gbps < bw) bw = l.gbps;
    lat = std::max(lat, l.latency_ms * 1000.0);
  }
  if (t.nic_gbps == 0) t.nic_gbps = t.nvlink_gbps;
  if (t.nvlink_gbps == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":1: no GPU links found"));
  }
  // Host-side latencies of NCCL dominate the wire's; keep a floor.
  t.net_latency_us = std::max(t.net_latency_us, 2.0);
  t.nvlink_latency_us = std::max(t.nvlink_latency_us, 0.5);
  return t;
}

absl::StatusOr<Topology> LoadTopologyFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseTopology(ss.str(), path);
}

}  // namespace pitstop::sim
