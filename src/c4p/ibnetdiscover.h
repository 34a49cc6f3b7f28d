// Reader of InfiniBand discovery output (`ibnetdiscover`, infiniband-diags):
// one block per node (`vendid=`, `devid=`, `sysimgguid=`, `switchguid=` or
// `caguid=` lines, then `Switch|Ca|Rt <ports> "<id>" # "<description>" ...`
// and one line per connected port:
//   [3](portguid)  "S-ec0d9a0300ec8240"[19](portguid)  # "desc" lid 21 4xEDR
// where the local port's GUID follows a CA's port number and the peer's
// follows an HCA peer). Every cable appears from both ends; the reader keeps
// it once and checks that both ends agree.
#ifndef PITSTOP_SRC_C4P_IBNETDISCOVER_H_
#define PITSTOP_SRC_C4P_IBNETDISCOVER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/c4p/fabric.h"

namespace pitstop::c4p {

struct IbPort {
  int port = 0;
  std::string peer;  // the peer node's id ("S-<guid>", "H-<guid>")
  int peer_port = 0;
  uint64_t guid = 0;  // the local port's GUID where the line gives it
  uint64_t peer_guid = 0;
  std::string rate;  // "4xEDR"
  double gbps = 0;   // data rate of width x speed
  int line = 0;
};

struct IbNode {
  char type = 0;   // 'S' switch, 'H' channel adapter (Ca), 'R' router
  std::string id;  // as ibnetdiscover names it: "S-<guid>", "H-<guid>"
  std::string description;
  uint64_t guid = 0;  // switchguid / caguid (else the id's)
  int ports = 0;      // as declared
  int line = 0;
  std::vector<IbPort> links;
};

struct IbFile {
  std::vector<IbNode> nodes;
  std::map<std::string, int> by_id;
};

// The data rate of an InfiniBand link ("4xEDR" = 4 lanes x 25 Gbps = 100;
// after line encoding: SDR 2, DDR 4, QDR 8, FDR10 10, FDR 13.64, EDR 25,
// HDR 50, NDR 100, XDR 200 Gbps per lane; widths 1x, 2x, 4x, 8x, 12x).
// 0 when `rate` is not one.
double IbRateGbps(const std::string& rate);

// Outputs of several subnets may be concatenated (ibnetdiscover run once per
// subnet, one per plane): a multi-port HCA appears once per subnet, with the
// ports cabled there, and its blocks merge; a port listed twice, or a switch
// listed twice, is refused naming both lines (the same subnet given twice).
// Parses the text: InvalidArgument naming source:line for a line that is
// neither a block line nor a port line, a port line outside a block, a port
// without width and speed, or a peer that has no block of its own.
absl::StatusOr<IbFile> ParseIbnetdiscover(const std::string& text,
                                          const std::string& source);

// GUID -> host for HCAs whose node description does not name their host:
// one `<guid> <host>` per line, or infiniband-diags' node-name-map
// `<guid> "<name>"` (the name in quotes may hold spaces; `#` comments; the
// GUID with or without 0x or 0X: a node GUID (caguid) or a port GUID; CRLF
// line ends and a UTF-8 byte
// order mark are read as a Windows editor writes them). InvalidArgument
// naming source:line, also for a GUID given two different hosts.
struct IbHostEntry {
  std::string host;
  std::string where;  // "source:line", for warnings
  int line = 0;
};
using IbHostMap = std::map<uint64_t, IbHostEntry>;
absl::StatusOr<IbHostMap> ParseIbHostMap(const std::string& text,
                                         const std::string& source);

struct IbOptions {
  std::string host_map;       // path of an IbHostMap file; "" = none
  double nvlink_gbps = 3600;  // GPU <-> NVSwitch on hosts with several HCAs
};

// The fabric: every HCA is one GPU's NIC (a host with k HCAs has k GPUs, one
// rail each), its connected ports the NIC's ports; hosts named by `hosts`,
// else by the first word of the HCA's node description ("node018 HCA-1" is
// host node018). Switches linked to an HCA are ToRs, the tier above spines,
// above that core; link capacity is the data rate of the trained width and
// speed. Routers are left out (warned).
absl::StatusOr<Fabric> FabricFromIbnetdiscover(
    const IbFile& file, const std::string& source, const IbHostMap& hosts,
    const IbOptions& options, const BuildProgress& progress = nullptr);

// Whether `text` looks like ibnetdiscover output (its first line that is not
// blank or a comment is a block line).
bool LooksLikeIbnetdiscover(const std::string& text);

}  // namespace pitstop::c4p

#endif  // PITSTOP_SRC_C4P_IBNETDISCOVER_H_
