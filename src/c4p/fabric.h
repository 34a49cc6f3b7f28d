// The fabric the planner routes over: hosts, GPUs (each GPU's network
// attachment is its NIC, with one port per plane), NVSwitches, ToR/leaf,
// aggregation/spine and core switches, and directed links with capacities.
//
// Every physical cable is two directed links (ids 2k and 2k+1, one per
// direction) so a full-duplex link carries each direction's load on its own.
// Routing is what ECMP routing tables give a Clos: from a switch toward a
// destination ToR, the next hops are the neighbours one hop closer (shortest
// paths, which in a Clos are the valley-free up-down paths).
//
// Thread-compatible: build it on one thread, then any number of threads may
// read it; SetCapacity() needs exclusive access.
#ifndef PITSTOP_SRC_CONTROLLER_PLAN_FABRIC_H_
#define PITSTOP_SRC_CONTROLLER_PLAN_FABRIC_H_

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pitstop::c4p {

enum class NodeKind { kGpu, kNvSwitch, kTor, kAgg, kCore };
enum class LinkKind { kNvLink, kNic, kFabric };

// The slowest link a fabric may have: 1 Mb/s. Slower is a typo: before,
// `--tor-uplink-gbps 1e-300` was planned (a bound of 2e+300 s, printed as
// a 300-digit number).
inline constexpr double kMinLinkGbps = 0.001;
// The fastest: 100 Tb/s, over 10x any link built (a 1.6 Tb/s NIC port,
// NVLink 5's 14.4 Tb/s per GPU). Faster is a typo or a unit mixed up:
// before, 1e300Gbps made every time 0 and the report "-nan"/"inf".
inline constexpr double kMaxLinkGbps = 100000;
// What errors say a link speed is.
inline constexpr char kLinkSpeedRule[] =
    "a link speed is a finite number of Gbps, at least 0.001 (1 Mb/s) and "
    "at most 100000 (100 Tb/s)";
// Whether `gbps` is a link speed (kMinLinkGbps..kMaxLinkGbps).
inline bool IsLinkSpeed(double gbps) {
  return gbps >= kMinLinkGbps && gbps <= kMaxLinkGbps;
}

// The most GPUs a fabric may have (2^17), whatever its format: planning
// more takes minutes and gigabytes (the routing table is ToRs x nodes).
// Before, a CSV of 160,000 GPUs ran a minute and more at 1.5 GB, silently.
inline constexpr int kMaxFabricGpus = 131072;

// The longest host name, in bytes (a DNS name has at most 253; an
// InfiniBand node description 64), and the longest switch or GPU name as
// built ("<DSW>/<PSW>/<ASW>" of a CSV, "<host>/nvswitch": up to three of
// the file's names). Before, a 1 MB name was read.
inline constexpr size_t kMaxNameBytes = 256;
inline constexpr size_t kMaxNodeNameBytes = 1024;
// Why `name` cannot name a host or switch ("" when it can): longer than
// `max_bytes`, not UTF-8 (names are written into JSON), or holding a
// control character (before, printed raw to the terminal).
std::string NameProblem(absl::string_view name,
                        size_t max_bytes = kMaxNameBytes);
// `name` for an error: in quotes, escaped, its first 64 bytes.
std::string QuotedName(absl::string_view name);

// Called as a fabric is built: `done` of `total` steps of `step`
// ("routing table, ToRs", "generating hosts").
using BuildProgress =
    std::function<void(const char* step, int done, int total)>;

const char* NodeKindName(NodeKind k);
const char* LinkKindName(LinkKind k);

struct FabricNode {
  std::string name;  // "host3/gpu2", "tor18", "agg4", "core9"
  NodeKind kind = NodeKind::kGpu;
  int host = -1;        // GPUs and NVSwitches
  int local = -1;       // GPU index inside its host (= its NIC's rail)
  int source_line = 0;  // line of the file that declared it (0: none)
};

struct FabricLink {
  int src = -1;
  int dst = -1;
  LinkKind kind = LinkKind::kFabric;
  int source_line = 0;      // line of the file that declared it (0: none)
  double nominal_gbps = 0;  // as built / read from the file
  double gbps = 0;          // effective (degraded or Cora-measured)
  // Port numbers on each end where the file names them (InfiniBand
  // discovery); -1 otherwise. A named port makes LinkName "A[3]->B[19]", so
  // parallel cables between two switches have names of their own.
  int src_port = -1;
  int dst_port = -1;
};
// The planner reads links in its innermost loop: no padding beyond the
// 40 bytes the link had before ports were added.
static_assert(sizeof(FabricLink) == 40);

struct FabricHost {
  std::string name;
  std::vector<int> gpus;  // node ids, by local index
  int nvswitch = -1;      // node id, -1 when the host has none
  int source_line = 0;    // line of the file that declared it (0: none)
};

class Fabric {
 public:
  Fabric() = default;

  // --- building ------------------------------------------------------------
  int AddHost(std::string name, int source_line = 0);
  // Named "<host>/gpu<local>"; `source_line`: the first line naming it.
  int AddGpu(int host, int source_line = 0);
  int AddNvSwitch(int host, std::string name);
  int AddSwitch(NodeKind kind, std::string name, int source_line = 0);
  // One cable: returns the id of the src->dst direction (dst->src is id+1).
  int AddCable(int a, int b, LinkKind kind, double gbps, int source_line = 0);
  // Ports of the cable `link` (the id AddCable returned) on its a and b end.
  void SetCablePorts(int link, int a_port, int b_port);
  // Computes tiers and per-ToR routing, then checks that the fabric can
  // carry a job (fabric_check.cc): InvalidArgument naming the element and
  // the line of `source` that declared it for a host without a network
  // uplink (when there are several hosts), hosts that share no connected
  // part of the fabric (a tier with no path) or a link of zero bandwidth.
  // Refuses, first, more GPUs than kMaxFabricGpus (naming `source`).
  // `progress`, when given, is called as the routing table is computed
  // (done of total ToRs): seconds at 100,000 GPUs.
  // What is merely unusual (mixed link speeds within a tier, oversubscribed
  // ToRs, hosts with different NIC counts) is added to warnings().
  absl::Status Finalize(const BuildProgress& progress = nullptr);

  // --- reading -------------------------------------------------------------
  const std::vector<FabricNode>& nodes() const { return nodes_; }
  const std::vector<FabricLink>& links() const { return links_; }
  const std::vector<FabricHost>& hosts() const { return hosts_; }
  const FabricNode& node(int id) const { return nodes_[id]; }
  const FabricLink& link(int id) const { return links_[id]; }
  int gpu_count() const { return gpu_count_; }
  // GPUs in host order (host 0's local 0..n, host 1's, ...).
  std::vector<int> GpusInOrder() const;

  // Directed links leaving a node.
  const std::vector<int>& out_links(int node) const { return out_[node]; }
  // Network uplinks of a GPU's NIC (one per plane), NIC -> ToR.
  const std::vector<int>& nic_uplinks(int gpu) const { return nic_up_[gpu]; }
  // The ToR a NIC port (uplink id) lands on.
  int tor_of_uplink(int link) const { return links_[link].dst; }
  int tor_count() const { return static_cast<int>(tors_.size()); }
  // Index of a ToR among all ToRs (-1 when `node` is not a ToR).
  int tor_index(int node) const { return tor_index_[node]; }
  // Hops from a switch to the ToR with index t; -1 when unreachable.
  int Distance(int node, int tor_idx) const {
    return dist_[static_cast<size_t>(tor_idx) * nodes_.size() + node];
  }
  // Fabric links from `node` one hop closer to ToR index t (ECMP next hops),
  // in link-id order (what a switch's ECMP group holds).
  void NextHops(int node, int tor_idx, std::vector<int>* out) const;
  // Whether GPUs a and b of one host reach each other over NVLink (both
  // cabled to the host's NVSwitch). When not (a GPU cut off from its
  // NVSwitch, a host without one), their traffic goes over their NICs.
  bool NvLinked(int gpu_a, int gpu_b) const;
  // The link ToR -> GPU's NIC port on that ToR, -1 when none.
  int Downlink(int tor, int gpu) const;

  // Human name of a link ("host3/nic2->tor18"); NIC ends are named nicK.
  std::string LinkName(int link) const;
  // Name of GPU `gpu`'s network attachment ("host3/nic2"), as --degrade,
  // LinkName and the live planner name it; "nic?<id>" for an id that is
  // not a GPU's (never indexes out of range).
  std::string NicName(int gpu) const;
  // Whether the NICs of GPUs a and b share a connected part of the switch
  // fabric (after Finalize; OK before it and for GPUs without a NIC, which
  // Finalize refuses). Finalize checks NICs of one rail; a job whose ring
  // crosses rails (hosts of different GPU counts in the job) needs this per
  // connection. InvalidArgument naming the switch without an uplink (and
  // its line) or the two switches without a path, and the two NICs.
  absl::Status CheckNicsReach(int gpu_a, int gpu_b) const;
  // Links named by `spec`: "A->B" (one direction), "A-B" or "A<->B" (both),
  // a NIC "host3/nic2" (all its network links, both ways) or a switch name
  // (all its links). Node names may be the file's numeric ids for SimAI
  // files. NotFound naming the spec when nothing matches.
  absl::StatusOr<std::vector<int>> FindLinks(const std::string& spec) const;
  int FindNode(const std::string& name) const;  // -1 when unknown

  // Effective capacity (planner and simulator use it; nominal is kept).
  void SetCapacity(int link, double gbps) {
    down_links_ += (gbps <= 0) - (links_[link].gbps <= 0);
    links_[link].gbps = gbps;
  }
  void ResetCapacities();
  // Whether some link is at 0 (down): ECMP then routes around it, as
  // switches drop a dead next hop from their groups and a bond its port.
  bool has_down_links() const { return down_links_ > 0; }

  // What a file left open and the reader assumed (printed by the CLI).
  std::vector<std::string>& assumptions() { return assumptions_; }
  const std::vector<std::string>& assumptions() const { return assumptions_; }
  // What the reader left out or found unusual but usable (printed by the CLI
  // as warnings, logged by the live planner).
  std::vector<std::string>& warnings() { return warnings_; }
  const std::vector<std::string>& warnings() const { return warnings_; }
  std::string description;  // one line: "SimAI file X: 2 hosts x 8 GPUs ..."
  std::string source;       // the file (or spec) read; errors name it

 private:
  int AddNode(FabricNode n);
  // fabric_check.cc
  absl::Status Check();
  absl::Status CheckReach() const;
  // Names and quoted text are written into JSON (plans, -o json): a name
  // that is not UTF-8 is refused, other text escaped. Two nodes of one name
  // are refused (--degrade and the live planner find nodes by name).
  absl::Status CheckText();
  absl::Status NoPath(int gpu_a, int gpu_b) const;
  absl::Status CheckNvLinks();
  void WarnMixedSpeeds();
  void WarnOversubscribed();
  // "source:line: " (or "source: " without a line).
  std::string Where(int line) const;

  std::vector<FabricNode> nodes_;
  std::vector<FabricLink> links_;
  std::vector<FabricHost> hosts_;
  std::vector<std::vector<int>> out_;
  std::vector<std::vector<int>> nic_up_;  // by node id (empty for switches)
  std::vector<int> tor_index_;
  std::vector<int> tors_;
  std::vector<int16_t> dist_;  // [tor index][node]
  std::unordered_map<std::string, int> by_name_;
  std::vector<std::string> assumptions_;
  std::vector<std::string> warnings_;
  std::vector<int> switch_comp_;  // by node id: connected part, -1: none
  int gpu_count_ = 0;
  int down_links_ = 0;  // links at gbps <= 0
  int same_name_ = -1;  // the first node named as an earlier one; -1: none
};

}  // namespace pitstop::c4p

#endif  // PITSTOP_SRC_CONTROLLER_PLAN_FABRIC_H_
