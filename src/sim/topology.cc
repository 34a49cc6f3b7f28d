#include "src/sim/topology.h"

#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace pitstop::sim {
namespace {

bool ParseWithSuffix(absl::string_view text, absl::string_view suffix,
                     double* out) {
  if (!absl::ConsumeSuffix(&text, suffix)) return false;
  return absl::SimpleAtod(text, out);
}

}  // namespace

absl::StatusOr<Topology> ParseTopology(const std::string& text,
                                       const std::string& source) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  auto bad = [&](size_t line, const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", line + 1, ": ", what));
  };
  if (lines.size() < 3) return bad(0, "too short for a topology file");
  std::vector<std::string> head =
      absl::StrSplit(lines[0], ' ', absl::SkipWhitespace());
  int total = 0, nvswitches = 0, switches = 0, links = 0;
  Topology t;
  if (head.size() < 5 || !absl::SimpleAtoi(head[0], &total) ||
      !absl::SimpleAtoi(head[1], &t.gpus_per_node) ||
      !absl::SimpleAtoi(head[2], &nvswitches) ||
      !absl::SimpleAtoi(head[3], &switches) ||
      !absl::SimpleAtoi(head[4], &links)) {
    return bad(0,
               "expected '<nodes> <gpus_per_server> <nvswitches> "
               "<switches> <links> <gpu_type>'");
  }
  t.gpus = total - nvswitches - switches;
  if (t.gpus_per_node <= 0 || t.gpus <= 0 || t.gpus % t.gpus_per_node != 0) {
    return bad(0, absl::StrCat(t.gpus, " GPUs do not fill servers of ",
                               t.gpus_per_node));
  }
  t.nodes = t.gpus / t.gpus_per_node;
  std::vector<std::string> ids =
      absl::StrSplit(lines[1], ' ', absl::SkipWhitespace());
  std::set<int> nvswitch_ids;
  for (int i = 0; i < nvswitches && i < static_cast<int>(ids.size()); ++i) {
    int id = 0;
    if (!absl::SimpleAtoi(ids[i], &id)) return bad(1, "bad switch id");
    nvswitch_ids.insert(id);
  }
  for (size_t i = 2; i < lines.size(); ++i) {
    std::vector<std::string> f =
        absl::StrSplit(lines[i], ' ', absl::SkipWhitespace());
    if (f.empty()) continue;
    int src = 0, dst = 0;
    double gbps = 0, ms = 0;
    if (f.size() < 4 || !absl::SimpleAtoi(f[0], &src) ||
        !absl::SimpleAtoi(f[1], &dst) ||
        !ParseWithSuffix(f[2], "Gbps", &gbps) ||
        !ParseWithSuffix(f[3], "ms", &ms)) {
      return bad(i, "expected '<src> <dst> <N>Gbps <N>ms <error_rate>'");
    }
    ++t.links;
    const bool gpu_end = src < t.gpus || dst < t.gpus;
    if (!gpu_end) continue;
    const int other = src < t.gpus ? dst : src;
    double& bw = nvswitch_ids.count(other) ? t.nvlink_gbps : t.nic_gbps;
    double& lat =
        nvswitch_ids.count(other) ? t.nvlink_latency_us : t.net_latency_us;
    if (bw == 0 || gbps < bw) bw = gbps;
    lat = std::max(lat, ms * 1000.0);
  }
  if (t.nic_gbps == 0) t.nic_gbps = t.nvlink_gbps;
  if (t.nvlink_gbps == 0) {
    return bad(0, "no GPU links found");
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
