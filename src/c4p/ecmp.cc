#include "src/c4p/ecmp.h"

#include <algorithm>
#include <array>

#include "absl/strings/str_cat.h"

namespace pitstop::c4p {
namespace {

std::array<uint32_t, 256> MakeCrc32cTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0x82F63B78u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}

int TupleBytes(const FiveTuple& t, uint8_t* b) {
  int n = 0;
  for (int s = 24; s >= 0; s -= 8) b[n++] = static_cast<uint8_t>(t.src_ip >> s);
  for (int s = 24; s >= 0; s -= 8) b[n++] = static_cast<uint8_t>(t.dst_ip >> s);
  b[n++] = static_cast<uint8_t>(t.src_port >> 8);
  b[n++] = static_cast<uint8_t>(t.src_port);
  b[n++] = static_cast<uint8_t>(t.dst_port >> 8);
  b[n++] = static_cast<uint8_t>(t.dst_port);
  b[n++] = t.protocol;
  return n;
}

class Crc32Hash : public HashFunction {
 public:
  uint32_t Hash(const FiveTuple& t, uint32_t seed) const override {
    static const std::array<uint32_t, 256> table = MakeCrc32cTable();
    uint8_t b[16];
    const int n = TupleBytes(t, b);
    uint32_t c = ~seed;
    for (int i = 0; i < n; ++i) c = table[(c ^ b[i]) & 0xff] ^ (c >> 8);
    return ~c;
  }
  std::string name() const override { return "crc32"; }
};

class XorHash : public HashFunction {
 public:
  uint32_t Hash(const FiveTuple& t, uint32_t seed) const override {
    uint32_t x = t.src_ip ^ t.dst_ip ^
                 ((static_cast<uint32_t>(t.src_port) << 16) | t.dst_port) ^
                 t.protocol ^ seed;
    return (x ^ (x >> 16)) & 0xffff;
  }
  std::string name() const override { return "xor"; }
};

class MurmurHash : public HashFunction {
 public:
  uint32_t Hash(const FiveTuple& t, uint32_t seed) const override {
    uint64_t k = (static_cast<uint64_t>(t.src_ip) << 32) | t.dst_ip;
    k ^= Mix64((static_cast<uint64_t>(t.src_port) << 24) ^
               (static_cast<uint64_t>(t.dst_port) << 8) ^ t.protocol ^
               (static_cast<uint64_t>(seed) << 40));
    return static_cast<uint32_t>(Mix64(k) >> 32);
  }
  std::string name() const override { return "murmur"; }
};

// Whether `node` still reaches ToR index `td` over next hops that are up
// (capacity > 0): what a switch's routing keeps once a link is down (its
// own next hop gone, or a route the next switch withdrew). Stops at the
// first live path, so a few dead links cost a few steps per hop.
bool LiveToward(const Fabric& fab, int node, int td) {
  const int d = fab.Distance(node, td);
  if (d <= 0) return d == 0;
  for (int l : fab.out_links(node)) {
    const FabricLink& fl = fab.link(l);
    if (fl.kind != LinkKind::kFabric || fl.gbps <= 0) continue;
    if (fab.Distance(fl.dst, td) == d - 1 && LiveToward(fab, fl.dst, td)) {
      return true;
    }
  }
  return false;
}

}  // namespace

uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

absl::StatusOr<std::unique_ptr<HashFunction>> MakeHash(
    const std::string& name) {
  if (name == "crc32") return std::make_unique<Crc32Hash>();
  if (name == "xor") return std::make_unique<XorHash>();
  if (name == "murmur") return std::make_unique<MurmurHash>();
  return absl::InvalidArgumentError(
      absl::StrCat("unknown ECMP hash '", name, "' (crc32, xor, murmur)"));
}

uint32_t NicIp(int gpu_node, int port) {
  // 10.0.0.0/8 with the port in the low bits: distinct per NIC port.
  return 0x0A000000u | ((static_cast<uint32_t>(gpu_node) << 2) & 0x00FFFFFCu) |
         static_cast<uint32_t>(port & 3);
}

uint16_t EcmpRouter::SourcePort(const Flow& f) const {
  const uint64_t h = Mix64(seed_ * 0x100000001B3ull ^
                           (static_cast<uint64_t>(f.id) << 1) ^ 0x5157);
  return static_cast<uint16_t>(kFirstSourcePort + h % kSourcePorts);
}

uint32_t EcmpRouter::SwitchSeed(int node) const {
  return static_cast<uint32_t>(
      Mix64(seed_ ^ (static_cast<uint64_t>(node) * 0x9E3779B1ull)));
}

EcmpRouter::Ports EcmpRouter::PortsOf(const Flow& f) const {
  const Fabric& fab = *fabric_;
  const std::vector<int>& sports = fab.nic_uplinks(f.src_gpu);
  Ports p;
  for (int live : {1, 0}) {
    // With links down, a bond hashes over its ports that are up and still
    // reach the destination (in a plane that reaches one of its ports that
    // is up), a switch over the next hops that still lead there; where
    // nothing is left (a NIC whose only port is down) the route is the
    // unchanged one and the flow stalls there, as NCCL's would.
    if (live && !fab.has_down_links()) continue;
    p.live = live;
    p.src.clear();
    for (size_t i = 0; i < sports.size(); ++i) {
      const int sp = static_cast<int>(i);
      if (!live ||
          (fab.link(sports[i]).gbps > 0 && DestPort(f, sp, true) >= 0)) {
        p.src.push_back(sp);
      }
    }
    if (!p.src.empty()) return p;
  }
  return p;
}

int EcmpRouter::DestPort(const Flow& f, int sp, bool live) const {
  const Fabric& fab = *fabric_;
  const std::vector<int>& sports = fab.nic_uplinks(f.src_gpu);
  const std::vector<int>& dports = fab.nic_uplinks(f.dst_gpu);
  const int src_tor = fab.tor_of_uplink(sports[sp]);
  // The destination port on a ToR this plane reaches.
  for (size_t i = 0; i < dports.size(); ++i) {
    const int dp = static_cast<int>((sp + i) % dports.size());
    const int td = fab.tor_index(fab.tor_of_uplink(dports[dp]));
    if (fab.Distance(src_tor, td) < 0) continue;
    if (live &&
        (fab.link(dports[dp] ^ 1).gbps <= 0 || !LiveToward(fab, src_tor, td))) {
      continue;
    }
    return dp;
  }
  return -1;
}

void EcmpRouter::Group(int at, int td, bool live,
                       std::vector<int>* hops) const {
  const Fabric& fab = *fabric_;
  fab.NextHops(at, td, hops);
  if (!live) return;
  hops->erase(std::remove_if(hops->begin(), hops->end(),
                             [&](int l) {
                               return fab.link(l).gbps <= 0 ||
                                      !LiveToward(fab, fab.link(l).dst, td);
                             }),
              hops->end());
}

RoutedPath EcmpRouter::Route(const Flow& f, uint16_t src_port) const {
  RoutedPath p;
  p.src_port = src_port;
  const Fabric& fab = *fabric_;
  const std::vector<int>& sports = fab.nic_uplinks(f.src_gpu);
  const std::vector<int>& dports = fab.nic_uplinks(f.dst_gpu);
  if (sports.empty() || dports.empty()) return p;
  FiveTuple t;
  t.dst_ip = NicIp(f.dst_gpu, 0);
  t.src_ip = NicIp(f.src_gpu, 0);
  t.src_port = src_port;
  // A NIC with several ports (planes) hashes like a bond.
  Ports ports = PortsOf(f);
  int sp = ports.src[0];
  if (ports.src.size() > 1) {
    sp = ports.src[hash_->Hash(t, SwitchSeed(f.src_gpu)) % ports.src.size()];
  }
  int dp = DestPort(f, sp, ports.live);
  if (dp < 0 && ports.live) {
    ports.live = false;  // no live way from this port: unchanged, stalls
    dp = DestPort(f, sp, false);
  }
  if (dp < 0) return p;
  const int up = sports[sp];
  const int src_tor = fab.tor_of_uplink(up);
  t.src_ip = NicIp(f.src_gpu, sp);
  t.dst_ip = NicIp(f.dst_gpu, dp);
  const int dst_tor = fab.tor_of_uplink(dports[dp]);
  const int td = fab.tor_index(dst_tor);
  p.links.push_back(up);
  int at = src_tor;
  std::vector<int> hops;
  while (at != dst_tor) {
    Group(at, td, ports.live, &hops);
    if (hops.empty()) {
      p.links.clear();
      return p;
    }
    const int l = hops[hash_->Hash(t, SwitchSeed(at)) % hops.size()];
    p.links.push_back(l);
    at = fab.link(l).dst;
  }
  p.links.push_back(dports[dp] ^ 1);
  return p;
}

uint16_t EcmpRouter::FindPort(const Flow& f, const std::vector<int>& links,
                              uint64_t start, int max_tries) const {
  const Fabric& fab = *fabric_;
  const std::vector<int>& sports = fab.nic_uplinks(f.src_gpu);
  const std::vector<int>& dports = fab.nic_uplinks(f.dst_gpu);
  if (links.size() < 2 || sports.empty() || dports.empty()) return 0;
  const int sp = static_cast<int>(
      std::find(sports.begin(), sports.end(), links.front()) - sports.begin());
  if (sp == static_cast<int>(sports.size())) return 0;
  // The bond's choices and the destination port Route() would take.
  Ports ports = PortsOf(f);
  const auto in_bond = std::find(ports.src.begin(), ports.src.end(), sp);
  if (in_bond == ports.src.end()) return 0;  // a port that is down
  int dp = DestPort(f, sp, ports.live);
  if (dp < 0 && ports.live) {
    ports.live = false;
    dp = DestPort(f, sp, false);
  }
  if (dp < 0 || (dports[dp] ^ 1) != links.back()) return 0;
  const int td = fab.tor_index(fab.tor_of_uplink(dports[dp]));
  // Each switch's group and the planned member's index in it.
  struct Step {
    uint32_t seed;
    uint32_t size;
    uint32_t index;
  };
  std::vector<Step> steps;
  std::vector<int> hops;
  for (size_t k = 1; k + 1 < links.size(); ++k) {
    const int at = fab.link(links[k]).src;
    Group(at, td, ports.live, &hops);
    auto it = std::find(hops.begin(), hops.end(), links[k]);
    if (it == hops.end()) return 0;  // not a shortest path: ECMP never
    steps.push_back(Step{SwitchSeed(at), static_cast<uint32_t>(hops.size()),
                         static_cast<uint32_t>(it - hops.begin())});
  }
  const uint32_t nic_seed = SwitchSeed(f.src_gpu);
  const uint32_t bond_size = static_cast<uint32_t>(ports.src.size());
  const uint32_t bond_index =
      static_cast<uint32_t>(in_bond - ports.src.begin());
  for (int i = 0; i < max_tries; ++i) {
    const uint16_t port =
        static_cast<uint16_t>(kFirstSourcePort + (start + i) % kSourcePorts);
    FiveTuple t;
    t.src_ip = NicIp(f.src_gpu, 0);
    t.dst_ip = NicIp(f.dst_gpu, 0);
    t.src_port = port;
    if (bond_size > 1 && hash_->Hash(t, nic_seed) % bond_size != bond_index) {
      continue;
    }
    t.src_ip = NicIp(f.src_gpu, sp);
    t.dst_ip = NicIp(f.dst_gpu, dp);
    bool ok = true;
    for (const Step& s : steps) {
      if (hash_->Hash(t, s.seed) % s.size != s.index) {
        ok = false;
        break;
      }
    }
    if (ok) return port;
  }
  return 0;
}

std::vector<int> NvLinkPath(const Fabric& fabric, const Flow& f) {
  const int nvs = fabric.hosts()[fabric.node(f.src_gpu).host].nvswitch;
  std::vector<int> out;
  if (nvs < 0) return out;
  for (int l : fabric.out_links(f.src_gpu)) {
    if (fabric.link(l).dst == nvs) {
      out.push_back(l);
      break;
    }
  }
  for (int l : fabric.out_links(nvs)) {
    if (fabric.link(l).dst == f.dst_gpu) {
      out.push_back(l);
      break;
    }
  }
  if (out.size() != 2) out.clear();
  return out;
}

}  // namespace pitstop::c4p
