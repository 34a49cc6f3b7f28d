// The planner's fabric from parsed ibnetdiscover output (ibnetdiscover.h).
#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "src/c4p/fabric_read_util.h"
#include "src/c4p/ibnetdiscover.h"

namespace pitstop::c4p {
namespace {

// One cable, kept once: the two ends ordered (node index, port).
struct IbCable {
  int a = 0, a_port = 0, b = 0, b_port = 0;
  double gbps = 0;
  std::string rate;
  int line = 0;
  int listed = 1;  // ends whose block lists it (2 in a whole output)
};

using End = std::pair<int, int>;  // node index, port

// A SHARP aggregation node: the reduction engine inside a Switch-IB 2 or
// Quantum switch, listed as a Ca on an internal port of its switch with this
// description. It is neither a host nor a GPU's NIC.
bool IsAggregationNode(const IbNode& n) {
  return n.type == 'H' &&
         n.description.find("Aggregation Node") != std::string::npos;
}

// An HCA of a host: a Ca that is not an aggregation node.
bool IsHostHca(const IbNode& n) {
  return n.type == 'H' && !IsAggregationNode(n);
}

// ibnetdiscover lists each cable in the blocks of both its ends; one
// listed from one end only (its peer's block lost the port: an edited or
// partial output) is read as listed, and said naming the line (before,
// silently).
void WarnOneEnded(const IbFile& f, const std::string& source,
                  const std::vector<IbCable>& cables,
                  std::vector<std::string>* warn) {
  std::vector<std::string> named;
  int first_line = 0;
  size_t n = 0;
  for (const IbCable& c : cables) {
    if (c.listed > 1) continue;
    if (n++ == 0) first_line = c.line;
    if (named.size() == 3) continue;
    named.push_back(absl::StrCat(f.nodes[c.a].id, "[", c.a_port, "]-",
                                 f.nodes[c.b].id, "[", c.b_port, "] (line ",
                                 c.line, ")"));
  }
  if (n == 0) return;
  warn->push_back(absl::StrCat(
      source, ":", first_line, ": ", n, n > 1 ? " cables are" : " cable is",
      " listed from one end only (the other end's block does not list the "
      "port): ",
      absl::StrJoin(named, ", "), n > named.size() ? ", ..." : "",
      "; planned as listed"));
}

// Each cable once; both ends must name each other. Speeds that differ
// between the two ends keep the lower (warned).
absl::StatusOr<std::vector<IbCable>> Cables(const IbFile& f,
                                            const std::string& source,
                                            std::vector<std::string>* warn) {
  std::map<End, std::pair<End, int>> peer_of;  // end -> (peer end, line)
  std::map<std::pair<End, End>, IbCable> cables;
  for (size_t n = 0; n < f.nodes.size(); ++n) {
    for (const IbPort& p : f.nodes[n].links) {
      const End here{static_cast<int>(n), p.port};
      const End there{f.by_id.at(p.peer), p.peer_port};
      if (here == there) return LineError(source, p.line, "a port to itself");
      for (auto [x, y] : {std::pair{here, there}, std::pair{there, here}}) {
        auto [it, fresh] = peer_of.emplace(x, std::pair{y, p.line});
        if (!fresh && it->second.first != y) {
          return LineError(source, p.line,
                           absl::StrCat(f.nodes[x.first].id, "[", x.second,
                                        "] is cabled to ", f.nodes[y.first].id,
                                        "[", y.second, "] here but to ",
                                        f.nodes[it->second.first.first].id, "[",
                                        it->second.first.second, "] on line ",
                                        it->second.second));
        }
      }
      const auto key = std::minmax(here, there);
      auto [c, fresh] = cables.emplace(
          key, IbCable{key.first.first, key.first.second, key.second.first,
                       key.second.second, p.gbps, p.rate, p.line});
      if (!fresh) ++c->second.listed;
      if (!fresh && c->second.gbps != p.gbps) {
        warn->push_back(absl::StrCat(
            source, ":", p.line, ": the two ends of ", f.nodes[n].id, "[",
            p.port, "] report ", c->second.rate, " (line ", c->second.line,
            ") and ", p.rate, ": planned at the lower"));
        if (p.gbps < c->second.gbps) {
          c->second.gbps = p.gbps;
          c->second.rate = p.rate;
        }
      }
    }
  }
  std::vector<IbCable> out;
  out.reserve(cables.size());
  for (auto& [k, c] : cables) out.push_back(c);
  std::sort(out.begin(), out.end(),
            [](const IbCable& x, const IbCable& y) { return x.line < y.line; });
  WarnOneEnded(f, source, out, warn);
  return out;
}

// Warns about the map's GUIDs that are no HCA's node or port GUID (a typo
// leaves that HCA named by its description).
void WarnUnusedGuids(const IbFile& f, const IbHostMap& map,
                     std::vector<std::string>* warn) {
  std::set<uint64_t> known;
  for (const IbNode& node : f.nodes) {
    if (!IsHostHca(node)) continue;
    known.insert(node.guid);
    for (const IbPort& p : node.links) known.insert(p.guid);
  }
  for (const auto& [guid, e] : map) {
    if (known.count(guid)) continue;
    warn->push_back(absl::StrCat(e.where, ": GUID 0x", absl::Hex(guid),
                                 " (host ", e.host,
                                 ") is no HCA's node or port GUID: ignored"));
  }
}

// Host of each HCA (node index -> host name).
std::map<int, std::string> HostNames(const IbFile& f, const IbHostMap& map,
                                     std::vector<std::string>* warn) {
  WarnUnusedGuids(f, map, warn);
  std::map<int, std::string> out;
  std::map<std::string, std::vector<int>> by_desc;
  for (size_t n = 0; n < f.nodes.size(); ++n) {
    const IbNode& node = f.nodes[n];
    if (!IsHostHca(node)) continue;
    std::vector<uint64_t> guids = {node.guid};
    for (const IbPort& p : node.links) guids.push_back(p.guid);
    for (uint64_t g : guids) {
      auto it = map.find(g);
      if (it != map.end()) {
        out[static_cast<int>(n)] = it->second.host;
        break;
      }
    }
    if (!out.count(static_cast<int>(n))) {
      by_desc[node.description].push_back(static_cast<int>(n));
    }
  }
  for (const auto& [desc, ns] : by_desc) {
    std::vector<std::string> w = absl::StrSplit(desc, ' ', absl::SkipEmpty());
    // Several HCAs with one same description (or none): the description
    // names no host ("MT4123 ConnectX6 ..." before the driver set it).
    const bool named = !w.empty() && ns.size() == 1;
    for (int n : ns) out[n] = named ? w[0] : f.nodes[n].id;
    if (!named) {
      warn->push_back(
          absl::StrCat(ns.size(), " HCA(s) with the description \"", desc,
                       "\" are named by their id (", f.nodes[ns[0]].id,
                       ", ...): give a GUID-to-host map to name their hosts"));
    }
  }
  return out;
}

// Tier of each switch: 1 next to an HCA, then BFS upwards; 0 unreached.
std::vector<int> SwitchTiers(const IbFile& f,
                             const std::vector<IbCable>& cables) {
  std::vector<int> tier(f.nodes.size(), 0);
  std::vector<std::vector<int>> adj(f.nodes.size());
  std::deque<int> q;
  for (const IbCable& c : cables) {
    adj[c.a].push_back(c.b);
    adj[c.b].push_back(c.a);
    for (auto [x, y] : {std::pair{c.a, c.b}, std::pair{c.b, c.a}}) {
      if (IsHostHca(f.nodes[x]) && f.nodes[y].type == 'S' && tier[y] == 0) {
        tier[y] = 1;
        q.push_back(y);
      }
    }
  }
  while (!q.empty()) {
    const int s = q.front();
    q.pop_front();
    for (int n : adj[s]) {
      if (f.nodes[n].type != 'S' || tier[n] != 0) continue;
      tier[n] = tier[s] + 1;
      q.push_back(n);
    }
  }
  return tier;
}

// Switches by node index, named by their description when it is unique and
// by their id otherwise.
std::map<int, int> AddSwitches(const IbFile& f, const std::vector<int>& tier,
                               Fabric* fab) {
  std::map<std::string, int> desc_count;
  for (const IbNode& n : f.nodes) ++desc_count[n.description];
  std::map<int, int> out;
  for (size_t n = 0; n < f.nodes.size(); ++n) {
    if (f.nodes[n].type != 'S' || tier[n] == 0) continue;
    const IbNode& s = f.nodes[n];
    const bool by_desc = !s.description.empty() &&
                         desc_count[s.description] == 1 &&
                         s.description.find(' ') == std::string::npos;
    const NodeKind kind = tier[n] == 1   ? NodeKind::kTor
                          : tier[n] == 2 ? NodeKind::kAgg
                                         : NodeKind::kCore;
    out[static_cast<int>(n)] =
        fab->AddSwitch(kind, by_desc ? s.description : s.id, s.line);
  }
  return out;
}

// Hosts in name order, each HCA one GPU (HCAs of a host in description
// order); an NVSwitch where a host has several. Returns HCA -> GPU node.
std::map<int, int> AddHosts(const IbFile& f,
                            const std::map<int, std::string>& host_of,
                            const IbOptions& o, Fabric* fab) {
  std::map<std::string, std::vector<int>> hcas;
  for (const auto& [n, h] : host_of) hcas[h].push_back(n);
  std::map<int, int> gpu_of;
  for (auto& [name, ns] : hcas) {
    std::sort(ns.begin(), ns.end(), [&](int x, int y) {
      return std::tie(f.nodes[x].description, f.nodes[x].id) <
             std::tie(f.nodes[y].description, f.nodes[y].id);
    });
    const int h = fab->AddHost(name, f.nodes[ns[0]].line);
    const int nvs = ns.size() > 1
                        ? fab->AddNvSwitch(h, absl::StrCat(name, "/nvswitch"))
                        : -1;
    for (int n : ns) {
      gpu_of[n] = fab->AddGpu(h);
      if (nvs >= 0) {
        fab->AddCable(gpu_of[n], nvs, LinkKind::kNvLink, o.nvlink_gbps,
                      f.nodes[n].line);
      }
    }
  }
  return gpu_of;
}

// Adds the cables between the nodes kept (`node_of`); returns how many.
// Cables of aggregation nodes, routers and switches no HCA reaches are
// left out; `*unreached` counts those of the last two.
absl::StatusOr<int> AddCables(const IbFile& f,
                              const std::vector<IbCable>& cables,
                              const std::map<int, int>& node_of,
                              const std::string& source, Fabric* fab,
                              int* unreached) {
  int added = 0;
  for (const IbCable& c : cables) {
    if (IsAggregationNode(f.nodes[c.a]) || IsAggregationNode(f.nodes[c.b])) {
      continue;  // warned by WarnLeftOut
    }
    auto a = node_of.find(c.a), b = node_of.find(c.b);
    if (a == node_of.end() || b == node_of.end()) {
      ++*unreached;  // a router, or a switch no HCA reaches
      continue;
    }
    const bool nic = f.nodes[c.a].type == 'H' || f.nodes[c.b].type == 'H';
    if (f.nodes[c.a].type == 'H' && f.nodes[c.b].type == 'H') {
      return LineError(source, c.line,
                       "two HCAs cabled back to back (no switch between "
                       "them): not a fabric the planner routes");
    }
    const int id =
        fab->AddCable(a->second, b->second,
                      nic ? LinkKind::kNic : LinkKind::kFabric, c.gbps, c.line);
    fab->SetCablePorts(id, c.a_port, c.b_port);
    ++added;
  }
  return added;
}

// Warns about the switches no HCA reaches (a Switch block without ports,
// switches cabled only to each other), naming the first few with their
// lines; returns how many switches are kept. Before, they were counted
// among the fabric's switches without a word.
int WarnUnreachedSwitches(const IbFile& f, const std::vector<int>& tier,
                          const std::string& source, Fabric* fab) {
  constexpr int kNamed = 5;
  int kept = 0, left = 0, first_line = 0;
  std::string named;
  for (size_t n = 0; n < f.nodes.size(); ++n) {
    const IbNode& s = f.nodes[n];
    if (s.type != 'S') continue;
    if (tier[n] > 0) {
      ++kept;
      continue;
    }
    if (left++ == 0) first_line = s.line;
    if (left <= kNamed) {
      absl::StrAppend(&named, left > 1 ? ", " : "", s.id,
                      s.description.empty() ? "" : " \"", s.description,
                      s.description.empty() ? "" : "\"", " (line ", s.line,
                      ")");
    }
  }
  if (left > 0) {
    fab->warnings().push_back(absl::StrCat(
        source, ":", first_line, ": ", left,
        " switch(es) no HCA reaches left out (no ports, or cabled only to "
        "switches no HCA reaches): ",
        named,
        left > kNamed ? absl::StrCat(" and ", left - kNamed, " more") : ""));
  }
  return kept;
}

// Warns about the nodes the fabric leaves out: aggregation nodes, and the
// cables of routers and of switches no HCA reaches.
void WarnLeftOut(const IbFile& f, const std::string& source, int unreached,
                 Fabric* fab) {
  int routers = 0, aggregation_nodes = 0, first_line = 0;
  for (const IbNode& n : f.nodes) {
    routers += n.type == 'R';
    if (IsAggregationNode(n) && aggregation_nodes++ == 0) first_line = n.line;
  }
  if (aggregation_nodes > 0) {
    fab->warnings().push_back(absl::StrCat(
        source, ":", first_line, ": ", aggregation_nodes,
        " SHARP aggregation node(s) left out (Ca \"Mellanox Technologies "
        "Aggregation Node\": the reduction engine inside a switch, not a "
        "host)"));
  }
  if (unreached > 0) {
    fab->warnings().push_back(
        absl::StrCat(source, ": ", unreached, " cable(s) of ", routers,
                     " router(s) or of switches no HCA reaches left out"));
  }
}

}  // namespace

absl::StatusOr<Fabric> FabricFromIbnetdiscover(const IbFile& f,
                                               const std::string& source,
                                               const IbHostMap& map,
                                               const IbOptions& o,
                                               const BuildProgress& progress) {
  if (!IsLinkSpeed(o.nvlink_gbps)) {
    // Named as `pitstop plan` takes it (before, 1e-300 was planned).
    return absl::InvalidArgumentError(
        absl::StrCat("--nvlink-gbps ", o.nvlink_gbps, ": ", kLinkSpeedRule));
  }
  Fabric fab;
  fab.source = source;
  absl::StatusOr<std::vector<IbCable>> cables =
      Cables(f, source, &fab.warnings());
  if (!cables.ok()) return cables.status();
  const std::vector<int> tier = SwitchTiers(f, *cables);
  const std::map<int, int> gpu_of =
      AddHosts(f, HostNames(f, map, &fab.warnings()), o, &fab);
  std::map<int, int> node_of = AddSwitches(f, tier, &fab);
  node_of.insert(gpu_of.begin(), gpu_of.end());
  int unreached = 0;
  absl::StatusOr<int> added =
      AddCables(f, *cables, node_of, source, &fab, &unreached);
  if (!added.ok()) return added.status();
  WarnLeftOut(f, source, unreached, &fab);
  const int switches = WarnUnreachedSwitches(f, tier, source, &fab);
  fab.description = absl::StrCat(
      "ibnetdiscover ", source, ": ", fab.hosts().size(), " hosts, ",
      gpu_of.size(), " HCAs, ", switches, " switches, ", *added, " cables");
  fab.assumptions().push_back(
      "each HCA serves one GPU (a host with k HCAs is k GPUs, one rail each; "
      "ibnetdiscover does not list GPUs)");
  fab.assumptions().push_back(
      "link capacity is the data rate of its trained width and speed "
      "(4xEDR 100 Gbps, 4xDDR 16, 4xHDR 200, 4xNDR 400)");
  absl::Status s = fab.Finalize(progress);
  if (!s.ok()) return s;
  return fab;
}

}  // namespace pitstop::c4p
