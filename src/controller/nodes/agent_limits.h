// Limits on what an agent stream may send the controller, and the checks
// that enforce them (docs/reliability.md lists every one). Plain functions
// over protos: NodeService calls them, tests call them directly.
#ifndef PITSTOP_CONTROLLER_NODES_AGENT_LIMITS_H_
#define PITSTOP_CONTROLLER_NODES_AGENT_LIMITS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "pitstop/v1/agent.pb.h"

namespace pitstop::controller {

// A DNS name is at most 253 bytes; identifiers and versions are short.
inline constexpr size_t kMaxHostBytes = 253;
inline constexpr size_t kMaxIdBytes = 256;  // agent_id, NIC/GPU strings
inline constexpr int kMaxGpusPerNode = 256;
// NICs beyond this are dropped from the registration (counted; a node with
// hundreds of container veth interfaces still registers).
inline constexpr int kMaxNicsPerNode = 256;
// Cumulative counters above this are not believed (2^50: a process dropping
// ten million records a second needs more than three years to get there).
inline constexpr uint64_t kMaxCounter = uint64_t{1} << 50;
inline constexpr uint32_t kMaxConnectedRanks = 1 << 16;

// InvalidArgument naming the field ("registration.host: ...") for a host
// that is empty, longer than kMaxHostBytes or has bytes outside printable
// ASCII (or whitespace), over-long ids/strings, more than kMaxGpusPerNode
// GPUs. Drops NICs beyond kMaxNicsPerNode from `reg` and returns how many
// in *nics_dropped.
absl::Status CheckRegistration(v1::NodeRegistration* reg, int* nics_dropped);

// InvalidArgument naming the counter when one is above kMaxCounter
// (connected_ranks above kMaxConnectedRanks).
absl::Status CheckCounters(const v1::AgentCounters& counters);

// Whether a new registration of a host should replace the live one
// (`current`): the same agent (agent_id) reconnecting always does; of two
// different agents the one started later (boot_unix_ns, then agent_id)
// wins, whatever order their streams arrived in.
bool NewClaimWins(const v1::NodeRegistration& current,
                  const v1::NodeRegistration& claimant);

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_NODES_AGENT_LIMITS_H_
