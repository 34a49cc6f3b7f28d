// Pages of the Controller API's list replies (docs/reliability.md): every
// reply stays below kMaxPageBytes whatever the cluster's size, so it fits
// gRPC's default 4 MiB receive limit of any client. Plain functions over
// protos; ControllerService calls them, tests call them directly.
#ifndef PITSTOP_CONTROLLER_API_PAGING_H_
#define PITSTOP_CONTROLLER_API_PAGING_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "pitstop/v1/controller.pb.h"

namespace pitstop::controller {

inline constexpr uint32_t kDefaultPageSize = 1000;
inline constexpr uint32_t kMaxPageSize = 1000;
// Half the default limit: room for the message framing and the token.
inline constexpr size_t kMaxPageBytes = size_t{2} << 20;

// Sorts `nodes` by host and fills `resp` with the page after
// req.page_token (a host name). Never fails: a token past the end gives
// an empty last page.
void PageNodes(std::vector<v1::Node> nodes, const v1::ListNodesRequest& req,
               v1::ListNodesResponse* resp);

// Sorts by comm_hash and fills the page after req.page_token (the last
// comm_hash of the previous page, 16 hex digits). InvalidArgument naming
// page_token when it is not one. A communicator larger than kMaxPageBytes
// alone keeps the members that fit (members_omitted says how many not).
absl::Status PageCommunicators(std::vector<v1::Communicator> comms,
                               const v1::ListCommunicatorsRequest& req,
                               v1::ListCommunicatorsResponse* resp);

// Cuts c's members so that it encodes to at most `max_bytes`.
void TrimMembers(v1::Communicator* c, size_t max_bytes);

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_API_PAGING_H_
