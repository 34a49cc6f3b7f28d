#include "src/c4p/flows.h"

#include <algorithm>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"

namespace pitstop::c4p {

absl::StatusOr<std::vector<int>> PlaceJob(const Fabric& fabric, int ranks,
                                          Placement placement, uint64_t seed) {
  if (ranks <= 0 || ranks > fabric.gpu_count()) {
    return absl::InvalidArgumentError(absl::StrCat(
        ranks, " ranks do not fit a fabric of ", fabric.gpu_count(), " GPUs"));
  }
  std::vector<int> order(fabric.hosts().size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  if (placement == Placement::kScattered) {
    std::mt19937_64 rng(seed);
    std::shuffle(order.begin(), order.end(), rng);
  }
  std::vector<int> out;
  for (int h : order) {
    for (int g : fabric.hosts()[h].gpus) {
      if (static_cast<int>(out.size()) == ranks) return out;
      out.push_back(g);
    }
  }
  return out;
}

namespace {

void AddConnection(const Fabric& fabric, int src_rank, int dst_rank,
                   int src_gpu, int dst_gpu, int channel, double bytes, int qps,
                   std::vector<Flow>* flows, int* conn) {
  // What does not go over NVLink goes over the NICs: across hosts, and
  // between GPUs of one host that NVLink does not join. The planner, ECMP,
  // the simulator and the bound all read this one flag.
  const bool network = !fabric.NvLinked(src_gpu, dst_gpu);
  const int q = network ? std::max(1, qps) : 1;
  for (int i = 0; i < q; ++i) {
    Flow f;
    f.id = static_cast<int>(flows->size());
    f.conn = *conn;
    f.qp = i;
    f.channel = channel;
    f.src_rank = src_rank;
    f.dst_rank = dst_rank;
    f.src_gpu = src_gpu;
    f.dst_gpu = dst_gpu;
    f.bytes = bytes / q;
    f.network = network;
    flows->push_back(f);
  }
  ++*conn;
}

// The most GPUs (= NICs = rails) a host of the job has: channel c runs on
// rail c % this. Hosts may differ (an ibnetdiscover host with two HCAs among
// hosts with one); before, the first host's count was taken, and with a
// one-HCA host first every channel of a two-HCA host used its nic0.
int MaxGpusPerHost(const Fabric& fabric, const std::vector<int>& hosts) {
  size_t most = 1;
  for (int h : hosts) most = std::max(most, fabric.hosts()[h].gpus.size());
  return static_cast<int>(most);
}

}  // namespace

std::vector<Flow> BuildRingFlows(const Fabric& fabric,
                                 const std::vector<int>& rank_gpu,
                                 const RingSpec& spec, int* channels_used) {
  const int n = static_cast<int>(rank_gpu.size());
  // Hosts in order of first appearance; their ranks in rank order.
  std::vector<int> host_order;
  std::map<int, std::vector<int>> local;  // host -> ranks
  for (int r = 0; r < n; ++r) {
    const int h = fabric.node(rank_gpu[r]).host;
    if (!local.count(h)) host_order.push_back(h);
    local[h].push_back(r);
  }
  const int per_host = MaxGpusPerHost(fabric, host_order);
  const int channels =
      spec.channels > 0 ? spec.channels
                        : std::min(kNcclMaxChannels, 2 * std::max(1, per_host));
  if (channels_used) *channels_used = channels;
  std::vector<Flow> flows;
  if (n < 2) return flows;
  const double bytes =
      2.0 * (n - 1) / n * spec.bytes / static_cast<double>(channels);
  int conn = 0;
  const int hosts = static_cast<int>(host_order.size());
  for (int c = 0; c < channels; ++c) {
    const int rail = c % std::max(1, per_host);
    // Entry position of each host for this channel.
    std::vector<int> entry(hosts);
    for (int i = 0; i < hosts; ++i) {
      const std::vector<int>& rs = local[host_order[i]];
      int pos = c % static_cast<int>(rs.size());
      for (size_t k = 0; k < rs.size(); ++k) {
        if (fabric.node(rank_gpu[rs[k]]).local == rail)
          pos = static_cast<int>(k);
      }
      entry[i] = pos;
    }
    for (int i = 0; i < hosts; ++i) {
      const std::vector<int>& rs = local[host_order[i]];
      const int m = static_cast<int>(rs.size());
      // NVLink chain inside the host: entry, entry+1, ..., entry-1 (a full
      // cycle when the ring never leaves the host).
      const int hops = hosts == 1 ? m : m - 1;
      for (int k = 0; k < hops; ++k) {
        const int a = rs[(entry[i] + k) % m], b = rs[(entry[i] + k + 1) % m];
        AddConnection(fabric, a, b, rank_gpu[a], rank_gpu[b], c, bytes,
                      spec.qps_per_connection, &flows, &conn);
      }
      if (hosts == 1) continue;
      // Network hop: this host's rail NIC to the next host's.
      const std::vector<int>& next = local[host_order[(i + 1) % hosts]];
      const int a = rs[entry[i]];
      const int b = next[entry[(i + 1) % hosts]];
      const int exit_rank = rs[(entry[i] + m - 1) % m];
      AddConnection(fabric, exit_rank, b, rank_gpu[a], rank_gpu[b], c, bytes,
                    spec.qps_per_connection, &flows, &conn);
    }
  }
  return flows;
}

std::vector<Flow> BuildTreeFlows(const Fabric& fabric,
                                 const std::vector<int>& rank_gpu,
                                 const RingSpec& spec, int* channels_used) {
  const int n = static_cast<int>(rank_gpu.size());
  std::vector<int> host_order;
  std::map<int, std::vector<int>> local;
  for (int r = 0; r < n; ++r) {
    const int h = fabric.node(rank_gpu[r]).host;
    if (!local.count(h)) host_order.push_back(h);
    local[h].push_back(r);
  }
  const int per_host = MaxGpusPerHost(fabric, host_order);
  const int channels =
      spec.channels > 0 ? spec.channels
                        : std::min(kNcclMaxChannels, 2 * std::max(1, per_host));
  if (channels_used) *channels_used = channels;
  std::vector<Flow> flows;
  if (n < 2) return flows;
  const double bytes = spec.bytes / static_cast<double>(channels);
  const int hosts = static_cast<int>(host_order.size());
  int conn = 0;
  auto both = [&](int a, int b, int c) {
    AddConnection(fabric, a, b, rank_gpu[a], rank_gpu[b], c, bytes,
                  spec.qps_per_connection, &flows, &conn);
    AddConnection(fabric, b, a, rank_gpu[b], rank_gpu[a], c, bytes,
                  spec.qps_per_connection, &flows, &conn);
  };
  for (int c = 0; c < channels; ++c) {
    const int rail = c % std::max(1, per_host);
    // The rank that represents each host in the tree: its rail GPU.
    std::vector<int> head(hosts);
    for (int i = 0; i < hosts; ++i) {
      const std::vector<int>& rs = local[host_order[i]];
      const int m = static_cast<int>(rs.size());
      int pos = c % m;
      for (int k = 0; k < m; ++k) {
        if (fabric.node(rank_gpu[rs[k]]).local == rail) pos = k;
      }
      head[i] = rs[pos];
      for (int k = 0; k + 1 < m; ++k) {  // the chain inside the host
        both(rs[(pos + k) % m], rs[(pos + k + 1) % m], c);
      }
    }
    const bool mirrored = c % 2 == 1;
    for (int i = 1; i < hosts; ++i) {
      const int child = mirrored ? hosts - 1 - i : i;
      const int parent = mirrored ? hosts - 1 - (i - 1) / 2 : (i - 1) / 2;
      both(head[parent], head[child], c);
    }
  }
  return flows;
}

absl::StatusOr<std::vector<Flow>> FlowsFromConnections(
    const Fabric& fabric, const std::vector<int>& rank_gpu,
    const std::vector<LiveConnection>& connections, int qps_per_connection) {
  std::vector<Flow> flows;
  int conn = 0;
  const int n = static_cast<int>(rank_gpu.size());
  for (const LiveConnection& c : connections) {
    if (c.src_rank < 0 || c.src_rank >= n || c.dst_rank < 0 ||
        c.dst_rank >= n || rank_gpu[c.src_rank] < 0 ||
        rank_gpu[c.dst_rank] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "connection ", c.src_rank, " -> ", c.dst_rank, " channel ", c.channel,
          ": rank not placed on the fabric"));
    }
    const int src = rank_gpu[c.src_rank], dst = rank_gpu[c.dst_rank];
    if (!fabric.NvLinked(src, dst)) {
      // No path for the planner to find (it left the NICs unset).
      absl::Status s = fabric.CheckNicsReach(src, dst);
      if (!s.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("connection ", c.src_rank, " -> ", c.dst_rank,
                         " channel ", c.channel, ": ", s.message()));
      }
    }
    AddConnection(fabric, c.src_rank, c.dst_rank, src, dst, c.channel, c.bytes,
                  qps_per_connection, &flows, &conn);
  }
  return flows;
}

}  // namespace pitstop::c4p
