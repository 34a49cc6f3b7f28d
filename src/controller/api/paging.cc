#include "src/controller/api/paging.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pitstop::controller {
namespace {

uint32_t PageSize(uint32_t requested) {
  return requested == 0 ? kDefaultPageSize : std::min(requested, kMaxPageSize);
}

// Bytes an item adds to the reply (tag, length, body).
size_t Footprint(const google::protobuf::Message& m) {
  return m.ByteSizeLong() + 8;
}

}  // namespace

void PageNodes(std::vector<v1::Node> nodes, const v1::ListNodesRequest& req,
               v1::ListNodesResponse* resp) {
  std::sort(
      nodes.begin(), nodes.end(),
      [](const v1::Node& a, const v1::Node& b) { return a.host() < b.host(); });
  const uint32_t size = PageSize(req.page_size());
  auto it = nodes.begin();
  if (!req.page_token().empty()) {
    it = std::upper_bound(nodes.begin(), nodes.end(), req.page_token(),
                          [](const std::string& token, const v1::Node& n) {
                            return token < n.host();
                          });
  }
  size_t bytes = 0;
  for (; it != nodes.end(); ++it) {
    const size_t b = Footprint(*it);
    // A node is at most ~400 KB (256 GPUs and NICs of 256-byte strings):
    // one always fits.
    if (resp->nodes_size() >= static_cast<int>(size) ||
        (resp->nodes_size() > 0 && bytes + b > kMaxPageBytes)) {
      break;
    }
    bytes += b;
    *resp->add_nodes() = std::move(*it);
  }
  if (it != nodes.end() && resp->nodes_size() > 0) {
    resp->set_next_page_token(resp->nodes(resp->nodes_size() - 1).host());
  }
}

void TrimMembers(v1::Communicator* c, size_t max_bytes) {
  if (c->ByteSizeLong() <= max_bytes) return;
  // Room for members_omitted itself (tag and a varint of up to 6 bytes).
  max_bytes -= std::min<size_t>(max_bytes, 8);
  const int n = c->members_size();
  // Members are alike in size: keep the share that fits, then shave.
  const size_t per = std::max<size_t>(1, (c->ByteSizeLong()) / std::max(1, n));
  int keep = static_cast<int>(std::min<size_t>(n, max_bytes / per));
  c->mutable_members()->DeleteSubrange(keep, n - keep);
  while (c->members_size() > 0 && c->ByteSizeLong() > max_bytes) {
    c->mutable_members()->RemoveLast();
  }
  c->set_members_omitted(c->members_omitted() +
                         static_cast<uint32_t>(n - c->members_size()));
}

absl::Status PageCommunicators(std::vector<v1::Communicator> comms,
                               const v1::ListCommunicatorsRequest& req,
                               v1::ListCommunicatorsResponse* resp) {
  uint64_t after = 0;
  const bool has_token = !req.page_token().empty();
  if (has_token && (req.page_token().size() != 16 ||
                    !absl::SimpleHexAtoi(req.page_token(), &after))) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_token: '", req.page_token(),
                     "' is not a next_page_token of ListCommunicators"));
  }
  std::sort(comms.begin(), comms.end(),
            [](const v1::Communicator& a, const v1::Communicator& b) {
              return a.comm_hash() < b.comm_hash();
            });
  const uint32_t size = PageSize(req.page_size());
  auto it = comms.begin();
  if (has_token) {
    it = std::upper_bound(comms.begin(), comms.end(), after,
                          [](uint64_t h, const v1::Communicator& c) {
                            return h < c.comm_hash();
                          });
  }
  size_t bytes = 0;
  for (; it != comms.end(); ++it) {
    // Room for the item's own tag and length in the reply.
    if (resp->communicators_size() == 0) TrimMembers(&*it, kMaxPageBytes - 16);
    const size_t b = Footprint(*it);
    if (resp->communicators_size() >= static_cast<int>(size) ||
        (resp->communicators_size() > 0 && bytes + b > kMaxPageBytes)) {
      break;
    }
    bytes += b;
    *resp->add_communicators() = std::move(*it);
  }
  if (it != comms.end() && resp->communicators_size() > 0) {
    resp->set_next_page_token(absl::StrFormat(
        "%016x",
        resp->communicators(resp->communicators_size() - 1).comm_hash()));
  }
  return absl::OkStatus();
}

}  // namespace pitstop::controller
