// Fabric::Check: can the fabric carry a job, and what about it is unusual.
//
// Refused (InvalidArgument naming the element and the line that declared
// it): a link of zero bandwidth, a host without a network uplink or a GPU
// without a NIC while the host's others have one (the ring model sends each
// rail through its own GPU's NIC), and hosts that share no connected part of
// the fabric (a ToR without uplinks, tiers with no path between them).
// Refused too: a host or switch name that is not UTF-8 (they are written
// into JSON), holds a control character or is longer than kMaxNameBytes
// (a host) or kMaxNodeNameBytes (NameProblem), and two nodes of one name;
// text quoted in a warning is escaped. So is a fabric of more than
// kMaxFabricGpus GPUs (Finalize).
// Refused: a GPU that NVLink does not join to its host's others and that
// has no NIC (or whose NIC cannot reach theirs).
// Warned: a GPU without an NVLink to its host's NVSwitch (its traffic to
// the host's other GPUs is planned over the NICs), link speeds that differ
// within a tier, ToRs with less uplink than
// downlink capacity, hosts with different NIC counts.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "pitstop/utf8.h"
#include "src/c4p/fabric.h"

namespace pitstop::c4p {
namespace {

// Connected parts of the switch graph over fabric (switch-to-switch) links.
std::vector<int> SwitchComponents(const Fabric& f) {
  std::vector<int> comp(f.nodes().size(), -1);
  int next = 0;
  std::vector<int> stack;
  for (size_t n = 0; n < f.nodes().size(); ++n) {
    const NodeKind k = f.node(static_cast<int>(n)).kind;
    if (k == NodeKind::kGpu || k == NodeKind::kNvSwitch || comp[n] >= 0) {
      continue;
    }
    comp[n] = next;
    stack.push_back(static_cast<int>(n));
    while (!stack.empty()) {
      const int at = stack.back();
      stack.pop_back();
      for (int l : f.out_links(at)) {
        const FabricLink& fl = f.link(l);
        if (fl.kind != LinkKind::kFabric || comp[fl.dst] >= 0) continue;
        comp[fl.dst] = next;
        stack.push_back(fl.dst);
      }
    }
    ++next;
  }
  return comp;
}

bool HasFabricLink(const Fabric& f, int node) {
  for (int l : f.out_links(node)) {
    if (f.link(l).kind == LinkKind::kFabric) return true;
  }
  return false;
}

std::string Gbps(double v) { return absl::StrCat(v, " Gbps"); }

}  // namespace

std::string NameProblem(absl::string_view name, size_t max_bytes) {
  if (name.size() > max_bytes) {
    return absl::StrCat("is ", name.size(), " bytes long: a name is at most ",
                        max_bytes, " bytes");
  }
  if (!IsUtf8(name)) return "is not valid UTF-8";
  for (size_t i = 0; i < name.size(); ++i) {
    const auto u = static_cast<unsigned char>(name[i]);
    if (u < 0x20 || u == 0x7F) {
      return absl::StrFormat(
          "holds the control character 0x%02X: a name is printable text", u);
    }
    // C1 controls U+0080..U+009F (UTF-8 C2 80..C2 9F; U+009B is a terminal's
    // CSI): before, taken.
    const auto next =
        i + 1 < name.size() ? static_cast<unsigned char>(name[i + 1]) : 0;
    if (u == 0xC2 && next >= 0x80 && next <= 0x9F) {
      return absl::StrFormat(
          "holds the control character U+%04X: a name is printable text", next);
    }
  }
  return "";
}

std::string QuotedName(absl::string_view name) {
  constexpr size_t kShown = 64;
  return absl::StrCat("'", absl::CHexEscape(name.substr(0, kShown)),
                      name.size() > kShown ? "'..." : "'");
}

absl::Status Fabric::CheckText() {
  // Text quoted from the file (a node description in a warning, the path)
  // goes into JSON too: escaped where it is not UTF-8.
  if (!IsUtf8(description)) description = absl::CHexEscape(description);
  for (std::string& w : warnings_) {
    if (!IsUtf8(w)) w = absl::CHexEscape(w);
  }
  for (const FabricHost& h : hosts_) {
    const std::string why = NameProblem(h.name);
    if (why.empty()) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        Where(h.source_line), "host name ", QuotedName(h.name), " ", why));
  }
  for (const FabricNode& n : nodes_) {
    const std::string why = NameProblem(n.name, kMaxNodeNameBytes);
    if (why.empty()) continue;
    return absl::InvalidArgumentError(
        absl::StrCat(Where(n.source_line), NodeKindName(n.kind), " name ",
                     QuotedName(n.name), " ", why));
  }
  if (same_name_ >= 0) {
    const FabricNode& again = nodes_[same_name_];
    const FabricNode& first = nodes_[by_name_.at(again.name)];
    return absl::InvalidArgumentError(absl::StrCat(
        Where(again.source_line), "two elements are named '", again.name,
        "' (the ", NodeKindName(first.kind), " from line ", first.source_line,
        " and the ", NodeKindName(again.kind),
        " from this line): --degrade and the live planner could not tell "
        "them apart"));
  }
  // A GPU's network attachment is named "<host>/nic<local>" (FindNode,
  // LinkName): a switch of that name would hide it. Before, CSV row
  // `P0,G0,P0,nic0` made host P0's NIC and ToR `P0/nic0` share one name.
  for (size_t id = 0; id < nodes_.size(); ++id) {
    if (nodes_[id].kind != NodeKind::kGpu) continue;
    const std::string nic = NicName(static_cast<int>(id));
    auto it = by_name_.find(nic);
    if (it == by_name_.end()) continue;
    const FabricNode& other = nodes_[it->second];
    return absl::InvalidArgumentError(absl::StrCat(
        Where(other.source_line), "two elements are named '", nic,
        "' (the nic of host ", QuotedName(hosts_[nodes_[id].host].name),
        " from line ", hosts_[nodes_[id].host].source_line, " and the ",
        NodeKindName(other.kind), " from line ", other.source_line,
        "): --degrade and the live planner could not tell them apart"));
  }
  return absl::OkStatus();
}

absl::Status Fabric::Check() {
  switch_comp_ = SwitchComponents(*this);
  if (absl::Status text = CheckText(); !text.ok()) return text;
  for (size_t l = 0; l < links_.size(); l += 2) {
    if (!(links_[l].nominal_gbps > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(links_[l].source_line), "link ",
                       LinkName(static_cast<int>(l)), " has a bandwidth of ",
                       links_[l].nominal_gbps, " Gbps: it can carry nothing"));
    }
    if (std::isinf(links_[l].nominal_gbps)) {
      // Every time on it would be 0: the plan and the bound would ignore it.
      return absl::InvalidArgumentError(absl::StrCat(
          Where(links_[l].source_line), "link ", LinkName(static_cast<int>(l)),
          " has a bandwidth of inf Gbps: a speed is a finite number"));
    }
    if (!IsLinkSpeed(links_[l].nominal_gbps)) {
      // Before, 1e-300Gbps was planned (a typo, or a unit mixed up).
      return absl::InvalidArgumentError(
          absl::StrCat(Where(links_[l].source_line), "link ",
                       LinkName(static_cast<int>(l)), " has a bandwidth of ",
                       links_[l].nominal_gbps, " Gbps: ", kLinkSpeedRule));
    }
  }
  if (absl::Status nv = CheckNvLinks(); !nv.ok()) return nv;
  if (hosts_.size() < 2) return absl::OkStatus();  // nothing crosses hosts
  // Hosts and GPUs without a NIC.
  std::set<size_t> nic_counts;
  for (const FabricHost& h : hosts_) {
    std::vector<std::string> without;
    for (int g : h.gpus) {
      if (nic_up_[g].empty()) without.push_back(nodes_[g].name);
    }
    if (!without.empty() && without.size() == h.gpus.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(h.source_line), "host ", h.name,
          " has no network uplink (none of its ", h.gpus.size(),
          " GPU(s) has a NIC linked to a switch): no other host can reach it"));
    }
    if (!without.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(h.source_line), "host ", h.name, ": ",
          absl::StrJoin(without, ", "), " ha", without.size() > 1 ? "ve" : "s",
          " no NIC while the host's other GPUs have one (the planner sends "
          "each rail through its own GPU's NIC)"));
    }
    nic_counts.insert(h.gpus.size());
  }
  absl::Status reach = CheckReach();
  if (!reach.ok()) return reach;
  if (nic_counts.size() > 1) {
    warnings_.push_back(absl::StrCat("hosts have between ", *nic_counts.begin(),
                                     " and ", *nic_counts.rbegin(),
                                     " NICs: rings enter each host at rail "
                                     "channel % its NIC count"));
  }
  WarnMixedSpeeds();
  WarnOversubscribed();
  return absl::OkStatus();
}

absl::Status Fabric::CheckNicsReach(int gpu_a, int gpu_b) const {
  if (switch_comp_.empty() || nic_up_[gpu_a].empty() ||
      nic_up_[gpu_b].empty()) {
    return absl::OkStatus();
  }
  for (int la : nic_up_[gpu_a]) {
    for (int lb : nic_up_[gpu_b]) {
      if (switch_comp_[links_[la].dst] == switch_comp_[links_[lb].dst]) {
        return absl::OkStatus();
      }
    }
  }
  return NoPath(gpu_a, gpu_b);
}

absl::Status Fabric::CheckNvLinks() {
  for (const FabricHost& h : hosts_) {
    // GPUs NVLink does not join to the host's others go over their NICs.
    std::vector<int> cut_off;
    for (int g : h.gpus) {
      for (int o : h.gpus) {
        if (o == g || NvLinked(g, o)) continue;
        if (nic_up_[g].empty() || nic_up_[o].empty()) {
          const int lone = nic_up_[g].empty() ? g : o;
          return absl::InvalidArgumentError(absl::StrCat(
              Where(nodes_[lone].source_line), nodes_[lone].name,
              " has no NIC and NVLink does not join ", nodes_[g].name, " to ",
              nodes_[o].name, ": ", nodes_[lone].name,
              " cannot reach the host's other GPUs"));
        }
        if (absl::Status r = CheckNicsReach(g, o); !r.ok()) return r;
        if (h.nvswitch >= 0 && (cut_off.empty() || cut_off.back() != g)) {
          cut_off.push_back(g);
        }
      }
    }
    // Only GPUs that lack the NVSwitch the others have: a host without one
    // is an assumption the reader states.
    std::vector<std::string> names;
    for (int g : cut_off) {
      if (!NvLinked(g, g)) names.push_back(nodes_[g].name);
    }
    if (names.empty()) continue;
    const int first = *std::find_if(cut_off.begin(), cut_off.end(),
                                    [&](int g) { return !NvLinked(g, g); });
    warnings_.push_back(absl::StrCat(
        Where(nodes_[first].source_line), absl::StrJoin(names, ", "),
        names.size() > 1 ? " have" : " has", " no NVLink to ",
        nodes_[h.nvswitch].name, ", the NVSwitch of ", h.name,
        "'s other GPUs: traffic between ", names.size() > 1 ? "them" : "it",
        " and the host's other GPUs is planned over the NICs and counted in "
        "the bound (a degraded host; a missing line in the file reads the "
        "same)"));
  }
  return absl::OkStatus();
}

absl::Status Fabric::CheckReach() const {
  const std::vector<int>& comp = switch_comp_;
  // Per rail (a ring's inter-host hop goes from a rail's NIC to the next
  // host's same-rail NIC): each NIC's set of connected parts its ports land
  // in; NICs with the same set are checked once.
  std::map<int, std::map<std::vector<int>, int>> by_rail;
  for (const FabricHost& h : hosts_) {
    for (int g : h.gpus) {
      std::vector<int> parts;
      for (int l : nic_up_[g]) parts.push_back(comp[links_[l].dst]);
      std::sort(parts.begin(), parts.end());
      parts.erase(std::unique(parts.begin(), parts.end()), parts.end());
      by_rail[nodes_[g].local].emplace(std::move(parts), g);
    }
  }
  for (const auto& [rail, sets] : by_rail) {
    if (sets.size() > 4096) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(0), sets.size(), " disconnected groups of rail-", rail,
          " NICs: the fabric's switches are not linked into one network"));
    }
    for (auto a = sets.begin(); a != sets.end(); ++a) {
      for (auto b = std::next(a); b != sets.end(); ++b) {
        std::vector<int> common;
        std::set_intersection(a->first.begin(), a->first.end(),
                              b->first.begin(), b->first.end(),
                              std::back_inserter(common));
        if (common.empty()) return NoPath(a->second, b->second);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Fabric::NoPath(int gpu_a, int gpu_b) const {
  auto nic = [&](int g) {
    return absl::StrCat(hosts_[nodes_[g].host].name, "/nic", nodes_[g].local);
  };
  const int ta = links_[nic_up_[gpu_a][0]].dst;
  const int tb = links_[nic_up_[gpu_b][0]].dst;
  // Name the switch without uplinks if either side has one.
  for (auto [t, here, there] :
       {std::tuple{tb, gpu_b, gpu_a}, std::tuple{ta, gpu_a, gpu_b}}) {
    if (!HasFabricLink(*this, t)) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(nodes_[t].source_line), "switch ", nodes_[t].name,
                       " has no uplink: ", nic(here), " below it cannot reach ",
                       nic(there)));
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      Where(nodes_[tb].source_line), "no path between switch ", nodes_[ta].name,
      " (", nic(gpu_a), ", line ", nodes_[ta].source_line, ") and switch ",
      nodes_[tb].name, " (", nic(gpu_b),
      "): the tiers above them are not connected"));
}

void Fabric::WarnMixedSpeeds() {
  // Links grouped by tier (the kinds of their two ends, and the link kind).
  using Tier = std::pair<int, std::pair<int, int>>;
  std::map<Tier, std::map<double, std::vector<int>>> by_tier;
  for (size_t l = 0; l < links_.size(); l += 2) {
    const FabricLink& fl = links_[l];
    const int a = static_cast<int>(nodes_[fl.src].kind);
    const int b = static_cast<int>(nodes_[fl.dst].kind);
    by_tier[{static_cast<int>(fl.kind), {std::min(a, b), std::max(a, b)}}]
           [fl.nominal_gbps]
               .push_back(static_cast<int>(l));
  }
  for (const auto& [tier, speeds] : by_tier) {
    if (speeds.size() < 2) continue;
    auto mode = speeds.begin();
    size_t total = 0;
    for (auto it = speeds.begin(); it != speeds.end(); ++it) {
      total += it->second.size();
      if (it->second.size() > mode->second.size()) mode = it;
    }
    std::vector<std::string> odd;
    size_t n_odd = 0;
    for (const auto& [gbps, ls] : speeds) {
      if (gbps == mode->first) continue;
      n_odd += ls.size();
      for (int l : ls) {
        if (odd.size() < 4) {
          odd.push_back(absl::StrCat(
              LinkName(l),
              links_[l].source_line > 0
                  ? absl::StrCat(" (line ", links_[l].source_line, ")")
                  : "",
              " at ", Gbps(gbps)));
        }
      }
    }
    warnings_.push_back(absl::StrCat(
        n_odd, " of ", total, " ",
        NodeKindName(static_cast<NodeKind>(tier.second.first)), "-",
        NodeKindName(static_cast<NodeKind>(tier.second.second)),
        " links do not run at the tier's ", Gbps(mode->first), ": ",
        absl::StrJoin(odd, ", "), n_odd > odd.size() ? ", ..." : "",
        " (planned at their own speed)"));
  }
}

void Fabric::WarnOversubscribed() {
  int over = 0;
  double worst = 1;
  int worst_tor = -1;
  for (int t : tors_) {
    double up = 0, down = 0;
    for (int l : out_[t]) {
      (links_[l].kind == LinkKind::kFabric ? up : down) +=
          links_[l].nominal_gbps;
    }
    if (up <= 0 || up >= down * 0.999) continue;
    ++over;
    if (down / up > worst) {
      worst = down / up;
      worst_tor = t;
    }
  }
  if (over == 0) return;
  warnings_.push_back(absl::StrCat(
      over, " of ", tors_.size(),
      " ToRs have less uplink than downlink capacity (up to ",
      absl::StrFormat("%.2f", worst), ":1 at ", nodes_[worst_tor].name,
      "): traffic leaving them is limited there"));
}

}  // namespace pitstop::c4p
