// The long-lived flows of a communicator's collectives.
//
// Offline (BuildRingFlows): NCCL's ring all-reduce over a placement. Per
// channel c the ring visits hosts in rank order; inside a host it enters at
// the GPU of rail c % gpus_per_host (NCCL's rail-aligned rings: the channel
// receives and sends on the same rail's NIC, forwarding over NVLink, PXN; a
// host without that rail enters at its GPU c % its GPUs, and gpus_per_host
// is the most any host of the job has) and walks the host's other GPUs over
// NVLink. Every connection moves
// 2(n-1)/n x bytes / channels per all-reduce; a connection with q QPs is q
// flows of 1/q each (each QP has its own UDP source port, so its own ECMP
// hash).
//
// Live (FlowsFromConnections): the send side of the connections the agent
// joined (ConnectionSummary: peer, channel, bytes per collective).
#ifndef PITSTOP_SRC_CONTROLLER_PLAN_FLOWS_H_
#define PITSTOP_SRC_CONTROLLER_PLAN_FLOWS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/c4p/fabric.h"

namespace pitstop::c4p {

struct Flow {
  int id = 0;
  int conn = 0;  // connection (channel, sender -> receiver); QPs share it
  int qp = 0;
  int channel = 0;
  int src_rank = 0;
  int dst_rank = 0;
  int src_gpu = 0;  // node ids; for network flows the NICs' GPUs
  int dst_gpu = 0;
  double bytes = 0;
  // Goes over the NICs: crosses hosts, or joins two GPUs of a host that
  // NVLink does not (Fabric::NvLinked). Else NVLink inside one host.
  bool network = false;
};

enum class Placement { kPacked, kScattered };
// The first `ranks` GPUs: packed = hosts in fabric order; scattered = hosts
// in a seeded random order (how a busy scheduler hands them out). Whole
// hosts first, the last one partly. InvalidArgument when there are fewer
// GPUs than ranks.
absl::StatusOr<std::vector<int>> PlaceJob(const Fabric& fabric, int ranks,
                                          Placement placement, uint64_t seed);

// NCCL's limit on channels per communicator (MAXCHANNELS in recent NCCL).
inline constexpr int kNcclMaxChannels = 64;

struct RingSpec {
  // 0: two per NIC (NCCL's usual on 8-NIC hosts), at most kNcclMaxChannels.
  int channels = 0;
  int qps_per_connection = 1;
  double bytes = 1 << 30;  // all-reduce size
};
std::vector<Flow> BuildRingFlows(const Fabric& fabric,
                                 const std::vector<int>& rank_gpu,
                                 const RingSpec& spec, int* channels_used);

// NCCL's tree all-reduce: per channel a chain through each host's GPUs
// (from the channel's rail GPU) and a binary tree over the hosts; channels
// alternate between two trees (the second over the hosts in reverse order,
// so a host that is a leaf in one is inner in the other: NCCL's double
// binary tree, heap-shaped here). Every tree edge and chain hop carries
// bytes / channels each way (reduce up, broadcast down).
std::vector<Flow> BuildTreeFlows(const Fabric& fabric,
                                 const std::vector<int>& rank_gpu,
                                 const RingSpec& spec, int* channels_used);

struct LiveConnection {
  int src_rank = 0;
  int dst_rank = 0;
  int channel = 0;
  double bytes = 0;  // per collective
};
// rank_gpu[rank] = GPU node id. InvalidArgument naming the connection when a
// rank is outside the map.
absl::StatusOr<std::vector<Flow>> FlowsFromConnections(
    const Fabric& fabric, const std::vector<int>& rank_gpu,
    const std::vector<LiveConnection>& connections, int qps_per_connection);

}  // namespace pitstop::c4p

#endif  // PITSTOP_SRC_CONTROLLER_PLAN_FLOWS_H_
