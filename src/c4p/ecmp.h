// What ECMP does with a flow: every switch (and a NIC with several ports)
// hashes the RoCEv2 5-tuple (src IP, dst IP, UDP, source port, 4791) with
// its own seed and picks that entry of its ECMP group (the next hops one hop
// closer to the destination ToR). The UDP source port is per QP (the NIC
// derives it from the QP number), so each QP of a connection hashes on its
// own. Hash functions are pluggable; seeds make "what ECMP would do" a
// distribution rather than one draw. A link at capacity 0 is down: switches
// drop it from their groups (and routes that need it), a NIC bond its port;
// a link that is merely slow keeps its traffic (routing does not see it).
//
// Thread-compatible: Route() is const and may run on many threads.
#ifndef PITSTOP_SRC_CONTROLLER_PLAN_ECMP_H_
#define PITSTOP_SRC_CONTROLLER_PLAN_ECMP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/c4p/fabric.h"
#include "src/c4p/flows.h"

namespace pitstop::c4p {

inline constexpr uint16_t kRoceV2Port = 4791;
inline constexpr uint16_t kFirstSourcePort = 49152;  // RoCE source port range
inline constexpr int kSourcePorts = 16384;

struct FiveTuple {
  uint32_t src_ip = 0;
  uint32_t dst_ip = 0;
  uint16_t src_port = 0;
  uint16_t dst_port = kRoceV2Port;
  uint8_t protocol = 17;  // UDP
};

// A switch's ECMP hash of a 5-tuple under its seed.
class HashFunction {
 public:
  virtual ~HashFunction() = default;
  virtual uint32_t Hash(const FiveTuple& t, uint32_t seed) const = 0;
  virtual std::string name() const = 0;
};
// "crc32" (CRC-32C of the tuple bytes, seed as initial value: what most
// switch ASICs offer), "xor" (XOR-fold of the fields, a weak but common
// choice), "murmur" (a well-mixing 64-bit finaliser). InvalidArgument
// listing the names otherwise.
absl::StatusOr<std::unique_ptr<HashFunction>> MakeHash(const std::string& name);

uint64_t Mix64(uint64_t x);  // splitmix64 finaliser

// Addresses: a NIC port's IP stands for (GPU node, port index).
uint32_t NicIp(int gpu_node, int port);

// The fabric path of a network flow: directed link ids, NIC uplink first,
// ToR -> NIC downlink last. Empty when unreachable.
struct RoutedPath {
  std::vector<int> links;
  uint16_t src_port = 0;
};

class EcmpRouter {
 public:
  EcmpRouter(const Fabric* fabric, const HashFunction* hash, uint64_t seed)
      : fabric_(fabric), hash_(hash), seed_(seed) {}
  // The UDP source port this seed's NIC gives a QP (random per QP number).
  uint16_t SourcePort(const Flow& f) const;
  // The path ECMP gives `f` with the given source port.
  RoutedPath Route(const Flow& f, uint16_t src_port) const;
  RoutedPath Route(const Flow& f) const { return Route(f, SourcePort(f)); }
  uint32_t SwitchSeed(int node) const;
  // A source port (trying up to max_tries ports from kFirstSourcePort +
  // start) with which Route(f, port) gives exactly `links`; 0 when none
  // does. Checks switch by switch, so a miss costs about one hash. With a
  // linear hash (CRC) and the same function on every tier the tiers'
  // choices are correlated (hash polarisation) and some paths have no port.
  uint16_t FindPort(const Flow& f, const std::vector<int>& links,
                    uint64_t start, int max_tries = kSourcePorts) const;

 private:
  // The source NIC ports the bond hashes over (indices into its uplinks)
  // and whether routing keeps to links that are up (some link is down and
  // a port of this NIC is up).
  struct Ports {
    std::vector<int> src;
    bool live = false;
  };
  Ports PortsOf(const Flow& f) const;
  // The destination port a flow leaving source port `sp` takes; -1 when
  // none is reachable (with `live`, over links that are up).
  int DestPort(const Flow& f, int sp, bool live) const;
  // A switch's ECMP group toward ToR index `td` (with `live`, the next hops
  // that are up and still lead there).
  void Group(int at, int td, bool live, std::vector<int>* hops) const;

  const Fabric* fabric_;
  const HashFunction* hash_;
  uint64_t seed_;
};

// The NVLink path of a flow inside one host (GPU -> NVSwitch -> GPU); empty
// when the host has no NVSwitch.
std::vector<int> NvLinkPath(const Fabric& fabric, const Flow& f);

}  // namespace pitstop::c4p

#endif  // PITSTOP_SRC_CONTROLLER_PLAN_ECMP_H_
