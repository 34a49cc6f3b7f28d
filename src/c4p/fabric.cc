#include "src/c4p/fabric.h"

#include <algorithm>
#include <cstring>
#include <deque>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace pitstop::c4p {

const char* NodeKindName(NodeKind k) {
  switch (k) {
    case NodeKind::kGpu:
      return "gpu";
    case NodeKind::kNvSwitch:
      return "nvswitch";
    case NodeKind::kTor:
      return "tor";
    case NodeKind::kAgg:
      return "agg";
    case NodeKind::kCore:
      return "core";
  }
  return "?";
}

const char* LinkKindName(LinkKind k) {
  switch (k) {
    case LinkKind::kNvLink:
      return "nvlink";
    case LinkKind::kNic:
      return "nic";
    case LinkKind::kFabric:
      return "fabric";
  }
  return "?";
}

int Fabric::AddNode(FabricNode n) {
  const int id = static_cast<int>(nodes_.size());
  if (!by_name_.emplace(n.name, id).second && same_name_ < 0) same_name_ = id;
  nodes_.push_back(std::move(n));
  out_.emplace_back();
  nic_up_.emplace_back();
  return id;
}

int Fabric::AddHost(std::string name, int source_line) {
  hosts_.push_back(FabricHost{std::move(name), {}, -1, source_line});
  return static_cast<int>(hosts_.size()) - 1;
}

int Fabric::AddGpu(int host, int source_line) {
  FabricHost& h = hosts_[host];
  FabricNode n;
  n.kind = NodeKind::kGpu;
  n.host = host;
  n.source_line = source_line;
  n.local = static_cast<int>(h.gpus.size());
  n.name = absl::StrCat(h.name, "/gpu", n.local);
  const int id = AddNode(std::move(n));
  hosts_[host].gpus.push_back(id);
  ++gpu_count_;
  return id;
}

int Fabric::AddNvSwitch(int host, std::string name) {
  FabricNode n;
  n.kind = NodeKind::kNvSwitch;
  n.host = host;
  n.name = std::move(name);
  const int id = AddNode(std::move(n));
  if (hosts_[host].nvswitch < 0) hosts_[host].nvswitch = id;
  return id;
}

int Fabric::AddSwitch(NodeKind kind, std::string name, int source_line) {
  FabricNode n;
  n.kind = kind;
  n.name = std::move(name);
  n.source_line = source_line;
  return AddNode(std::move(n));
}

int Fabric::AddCable(int a, int b, LinkKind kind, double gbps,
                     int source_line) {
  const int id = static_cast<int>(links_.size());
  links_.push_back(FabricLink{a, b, kind, source_line, gbps, gbps, -1, -1});
  links_.push_back(FabricLink{b, a, kind, source_line, gbps, gbps, -1, -1});
  down_links_ += 2 * (gbps <= 0);
  out_[a].push_back(id);
  out_[b].push_back(id + 1);
  if (kind == LinkKind::kNic) {
    if (nodes_[a].kind == NodeKind::kGpu) nic_up_[a].push_back(id);
    if (nodes_[b].kind == NodeKind::kGpu) nic_up_[b].push_back(id + 1);
  }
  return id;
}

void Fabric::SetCablePorts(int link, int a_port, int b_port) {
  links_[link].src_port = a_port;
  links_[link].dst_port = b_port;
  links_[link ^ 1].src_port = b_port;
  links_[link ^ 1].dst_port = a_port;
}

absl::Status Fabric::Finalize(const BuildProgress& progress) {
  if (gpu_count_ > kMaxFabricGpus) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(0), gpu_count_, " GPUs: the planner takes at most ",
        kMaxFabricGpus, " (2^17; more takes minutes and gigabytes to plan)"));
  }
  tor_index_.assign(nodes_.size(), -1);
  tors_.clear();
  for (size_t g = 0; g < nodes_.size(); ++g) {
    for (int l : nic_up_[g]) {
      const int t = links_[l].dst;
      if (tor_index_[t] < 0) {
        tor_index_[t] = static_cast<int>(tors_.size());
        tors_.push_back(t);
      }
    }
  }
  // The table is ToRs x nodes (2.6 GB at 131,072 GPUs): said before it is
  // filled.
  if (progress)
    progress("routing table, ToRs", 0, static_cast<int>(tors_.size()));
  dist_.assign(tors_.size() * nodes_.size(), -1);
  std::deque<int> q;
  for (size_t t = 0; t < tors_.size(); ++t) {
    int16_t* d = &dist_[t * nodes_.size()];
    d[tors_[t]] = 0;
    q.push_back(tors_[t]);
    while (!q.empty()) {
      const int n = q.front();
      q.pop_front();
      for (int l : out_[n]) {
        // Routing goes over switch-to-switch links only: never through a
        // host (no NVLink transit) and never into a NIC.
        if (links_[l].kind != LinkKind::kFabric) continue;
        const int m = links_[l].dst;
        if (d[m] >= 0) continue;
        d[m] = static_cast<int16_t>(d[n] + 1);
        q.push_back(m);
      }
    }
    if (progress) {
      progress("routing table, ToRs", static_cast<int>(t) + 1,
               static_cast<int>(tors_.size()));
    }
  }
  return Check();
}

std::vector<int> Fabric::GpusInOrder() const {
  std::vector<int> out;
  out.reserve(gpu_count_);
  for (const FabricHost& h : hosts_) {
    out.insert(out.end(), h.gpus.begin(), h.gpus.end());
  }
  return out;
}

void Fabric::NextHops(int node, int tor_idx, std::vector<int>* out) const {
  out->clear();
  const int here = Distance(node, tor_idx);
  if (here <= 0) return;
  for (int l : out_[node]) {
    if (links_[l].kind != LinkKind::kFabric) continue;
    if (Distance(links_[l].dst, tor_idx) == here - 1) out->push_back(l);
  }
}

bool Fabric::NvLinked(int gpu_a, int gpu_b) const {
  const int host = nodes_[gpu_a].host;
  if (host != nodes_[gpu_b].host) return false;
  const int nvs = hosts_[host].nvswitch;
  if (nvs < 0) return false;
  auto cabled = [&](int gpu) {
    for (int l : out_[gpu]) {
      if (links_[l].dst == nvs) return true;
    }
    return false;
  };
  return cabled(gpu_a) && cabled(gpu_b);
}

int Fabric::Downlink(int tor, int gpu) const {
  for (int l : nic_up_[gpu]) {
    if (links_[l].dst == tor) return l ^ 1;  // the reverse direction
  }
  return -1;
}

std::string Fabric::LinkName(int link) const {
  const FabricLink& l = links_[link];
  auto end = [&](int n, int port) {
    const FabricNode& f = nodes_[n];
    if (l.kind == LinkKind::kNic && f.kind == NodeKind::kGpu) {
      return absl::StrCat(hosts_[f.host].name, "/nic", f.local,
                          port >= 0 ? absl::StrCat("[", port, "]") : "");
    }
    return port >= 0 ? absl::StrCat(f.name, "[", port, "]") : f.name;
  };
  return absl::StrCat(end(l.src, l.src_port), "->", end(l.dst, l.dst_port));
}

std::string Fabric::NicName(int gpu) const {
  if (gpu < 0 || static_cast<size_t>(gpu) >= nodes_.size() ||
      nodes_[gpu].kind != NodeKind::kGpu) {
    return absl::StrCat("nic?", gpu);
  }
  const FabricNode& n = nodes_[gpu];
  return absl::StrCat(hosts_[n.host].name, "/nic", n.local);
}

std::string Fabric::Where(int line) const {
  const std::string& src = source.empty() ? description : source;
  if (line > 0)
    return absl::StrCat(src.empty() ? "fabric" : src, ":", line, ": ");
  return absl::StrCat(src.empty() ? "fabric" : src, ": ");
}

int Fabric::FindNode(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it != by_name_.end()) return it->second;
  // "host3/nic2" names GPU 2's network attachment.
  const size_t slash = name.rfind("/nic");
  if (slash != std::string::npos) {
    auto g = by_name_.find(
        absl::StrCat(name.substr(0, slash), "/gpu", name.substr(slash + 4)));
    if (g != by_name_.end()) return g->second;
  }
  return -1;
}

namespace {

// "name" or "name[port]" (a port as LinkName writes it).
struct LinkEnd {
  int node = -1;
  int port = -1;  // -1: any
};

}  // namespace

absl::StatusOr<std::vector<int>> Fabric::FindLinks(
    const std::string& spec) const {
  auto end_of = [&](const std::string& s) {
    LinkEnd e{FindNode(s), -1};
    if (e.node >= 0 || s.empty() || s.back() != ']') return e;
    const size_t open = s.rfind('[');
    int port = -1;
    if (open == std::string::npos || open == 0 ||
        !absl::SimpleAtoi(s.substr(open + 1, s.size() - open - 2), &port)) {
      return e;
    }
    return LinkEnd{FindNode(s.substr(0, open)), port};
  };
  std::vector<int> out;
  auto between = [&](const std::string& a, const std::string& b,
                     bool both) -> absl::Status {
    const LinkEnd ea = end_of(a), eb = end_of(b);
    for (int l : out_[ea.node]) {
      const FabricLink& fl = links_[l];
      if (fl.dst != eb.node || (ea.port >= 0 && fl.src_port != ea.port) ||
          (eb.port >= 0 && fl.dst_port != eb.port)) {
        continue;
      }
      out.push_back(l);
      if (both) out.push_back(l ^ 1);
    }
    if (out.empty()) {
      return absl::NotFoundError(absl::StrCat("link '", spec, "': ", a, " and ",
                                              b,
                                              " are not connected by a cable"));
    }
    return absl::OkStatus();
  };
  // Names may hold '-' themselves ("ASW-0"): split where both sides name
  // nodes.
  for (const char* sep : {"<->", "->", "-"}) {
    const std::string sv(sep);
    for (size_t pos = spec.find(sv); pos != std::string::npos;
         pos = spec.find(sv, pos + 1)) {
      if (pos == 0) continue;
      const std::string a = spec.substr(0, pos);
      const std::string b = spec.substr(pos + sv.size());
      if (end_of(a).node < 0 || end_of(b).node < 0) continue;
      absl::Status s = between(a, b, sv != "->");
      if (!s.ok()) return s;
      return out;
    }
    if (sv == "->" && spec.find(sv) != std::string::npos) break;
  }
  const LinkEnd whole = end_of(spec);
  if (whole.node < 0) {
    for (const char* sep : {"<->", "->", "-"}) {
      const size_t pos = spec.find(sep);
      if (pos == std::string::npos || pos == 0) continue;
      // Report the first side that names nothing.
      const std::string a = spec.substr(0, pos);
      const std::string b = spec.substr(pos + strlen(sep));
      return absl::NotFoundError(absl::StrCat("link '", spec,
                                              "': no node named '",
                                              end_of(a).node < 0 ? a : b, "'"));
    }
    return absl::NotFoundError(absl::StrCat(
        "'", spec,
        "' names no link, NIC or switch (links are 'A->B' or 'A-B', NICs "
        "'hostN/nicK')"));
  }
  const bool nic = nodes_[whole.node].kind == NodeKind::kGpu;
  for (int l : out_[whole.node]) {
    if (nic && links_[l].kind != LinkKind::kNic) continue;
    if (whole.port >= 0 && links_[l].src_port != whole.port) continue;
    out.push_back(l);
    out.push_back(l ^ 1);
  }
  if (out.empty()) {
    return absl::NotFoundError(absl::StrCat("'", spec, "' has no links"));
  }
  return out;
}

void Fabric::ResetCapacities() {
  down_links_ = 0;
  for (FabricLink& l : links_) {
    l.gbps = l.nominal_gbps;
    down_links_ += l.gbps <= 0;
  }
}

}  // namespace pitstop::c4p
