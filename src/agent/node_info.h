// What the agent registers about its node: NICs from sysfs
// (<root>/class/infiniband/<dev>/ports/<n>/{state,rate} and
// <root>/class/net/<if>/{operstate,speed}) and GPUs from
// /proc/driver/nvidia/gpus/<bus>/information when present. Missing files
// mean "unknown", never an error.
#ifndef PITSTOP_AGENT_NODE_INFO_H_
#define PITSTOP_AGENT_NODE_INFO_H_

#include <string>
#include <vector>

#include "pitstop/v1/agent.pb.h"

namespace pitstop::agent {

// NICs under `sysfs_root` (normally "/sys"), sorted by name; "lo" skipped.
std::vector<v1::NicInfo> ReadNics(const std::string& sysfs_root);

// GPUs listed by the NVIDIA driver under `procfs_root` (normally "/proc").
std::vector<v1::GpuInfo> ReadGpus(const std::string& procfs_root);

// gethostname(), or "unknown".
std::string LocalHostName();

}  // namespace pitstop::agent

#endif  // PITSTOP_AGENT_NODE_INFO_H_
