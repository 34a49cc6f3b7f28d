// Reader of rail-optimised fabric files (the format of
// ../shared/data/topology/, from aliyun/SimAI): a header
// `<nodes> <gpus_per_server> <nvswitches> <switches> <links> <gpu_type>`, a
// line of switch ids (NVSwitches first), then one line per link
// `<src> <dst> <bandwidth>Gbps <latency>ms <error_rate>`. Ids below
// nodes - nvswitches - switches are GPUs.
//
// The simulator takes from it the cluster shape and the two link classes:
// GPU <-> NVSwitch (NVLink) and GPU <-> ToR (the GPU's rail NIC).
#ifndef PITSTOP_SRC_SIM_TOPOLOGY_H_
#define PITSTOP_SRC_SIM_TOPOLOGY_H_

#include <string>

#include "absl/status/statusor.h"

namespace pitstop::sim {

struct Topology {
  int gpus = 0;
  int nodes = 0;  // servers = gpus / gpus_per_node
  int gpus_per_node = 0;
  double nvlink_gbps = 0;  // slowest GPU <-> NVSwitch link
  double nic_gbps = 0;     // slowest GPU <-> ToR link
  double nvlink_latency_us = 0;
  double net_latency_us = 0;
  int links = 0;
};

// Parses the text with the planner's reader (c4p::ParseSimAi, which also
// checks ids and the declared link count); errors name `source`:line.
absl::StatusOr<Topology> ParseTopology(const std::string& text,
                                       const std::string& source);
absl::StatusOr<Topology> LoadTopologyFile(const std::string& path);

}  // namespace pitstop::sim

#endif  // PITSTOP_SRC_SIM_TOPOLOGY_H_
