#include "src/controller/planning/flow_inputs.h"

#include <cctype>

#include "absl/strings/str_cat.h"

namespace pitstop::controller {

FabricHostIndex::FabricHostIndex(const c4p::Fabric& fabric)
    : hosts_(static_cast<int>(fabric.hosts().size())) {
  for (int h = 0; h < hosts_; ++h) by_name_[fabric.hosts()[h].name] = h;
}

int FabricHostIndex::Find(const std::string& host) const {
  auto it = by_name_.find(host);
  if (it != by_name_.end()) return it->second;
  size_t i = host.size();
  while (i > 0 && std::isdigit(static_cast<unsigned char>(host[i - 1]))) --i;
  if (i == host.size() || host.size() - i > 6) return -1;
  // "node7" -> "host7": a cluster's hosts in the generated fabric's order.
  it = by_name_.find(absl::StrCat("host", host.substr(i)));
  if (it != by_name_.end()) return it->second;
  // A fabric read from a file whose hosts have other names (hashed ids,
  // "node018"): "node7" is the fabric's host 7, in the reader's order.
  const int n = std::stoi(host.substr(i));
  return n < hosts_ ? n : -1;
}

namespace {

// What one rank sends per collective, as a multiple of the op's bytes
// (the bus factor of nccl-tests' busbw).
double BusFactor(v1::CollFunc func, int n_ranks) {
  if (n_ranks <= 1) return 0;
  const double n = n_ranks;
  switch (func) {
    case v1::COLL_FUNC_ALL_REDUCE:
      return 2 * (n - 1) / n;
    case v1::COLL_FUNC_ALL_GATHER:
    case v1::COLL_FUNC_REDUCE_SCATTER:
    case v1::COLL_FUNC_ALL_TO_ALL:
      return (n - 1) / n;
    default:
      return 1;
  }
}

}  // namespace

std::vector<double> ConnectionBytes(const v1::CollectiveSummary& s,
                                    int n_ranks) {
  std::vector<double> out(s.connections_size(), 0);
  double steps = 0;
  int sends = 0;
  for (const v1::ConnectionSummary& c : s.connections()) {
    if (!c.is_send()) continue;
    steps += c.steps();
    ++sends;
  }
  if (sends == 0) return out;
  const double total =
      static_cast<double>(s.bytes()) *
      BusFactor(s.func(), s.kind() == v1::OP_KIND_P2P ? 2 : n_ranks);
  for (int i = 0; i < s.connections_size(); ++i) {
    const v1::ConnectionSummary& c = s.connections(i);
    if (!c.is_send()) continue;
    if (c.bytes() > 0) {
      out[i] = static_cast<double>(c.bytes());
    } else {
      out[i] = steps > 0 ? total * c.steps() / steps : total / sends;
    }
  }
  return out;
}

}  // namespace pitstop::controller
