// NodeService: the Controller API's node queries and drains.
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pitstop/logging.h"
#include "src/controller/ha/leadership.h"
#include "src/controller/nodes/node_service.h"
#include "src/controller/store/fault_store.h"

namespace pitstop::controller {
namespace {

absl::Status Required(const std::string& value, absl::string_view field) {
  if (value.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": required"));
  }
  return absl::OkStatus();
}

}  // namespace

v1::Node NodeService::ToNode(const std::string& host, const Entry* e) const {
  v1::Node n;
  n.set_host(host);
  auto d = drains_.find(host);
  const uint64_t now = NowUnixNs();
  const uint64_t grace = absl::ToInt64Nanoseconds(options_.node_grace);
  if (e != nullptr) {
    *n.mutable_registration() = e->registration;
    n.set_agent_connected(e->session != 0 && !e->opening);
    n.set_last_seen_unix_ns(e->last_seen_unix_ns);
    n.set_connected_ranks(e->connected_ranks);
    n.set_plugin_dropped(e->plugin_dropped);
    n.set_undelivered(e->undelivered);
    const RecordLossLedger::Totals r = e->records.totals();
    n.set_records_sent_by_ranks(r.sent);
    n.set_records_received(r.received);
    n.set_records_lost_in_agent(r.lost_in_agent);
  }
  const CommandLedger::Counts c = commands_.HostCounts(host);
  n.set_commands_sent(c.sent);
  n.set_commands_acked(c.acked);
  n.set_commands_resent(c.resent);
  n.set_commands_dropped(c.dropped);
  n.set_commands_unacked(static_cast<uint32_t>(c.pending));
  if (d != drains_.end()) {
    n.set_state(v1::NODE_STATE_DRAINED);
    n.set_drain_reason(d->second);
  } else if (e != nullptr && ((e->session != 0 && !e->opening) ||
                              now - e->last_seen_unix_ns <= grace)) {
    n.set_state(v1::NODE_STATE_READY);
  } else {
    n.set_state(v1::NODE_STATE_UNREACHABLE);
  }
  return n;
}

std::vector<v1::Node> NodeService::Nodes() {
  ServiceLock lock(&mu_);
  std::vector<v1::Node> out;
  for (const auto& [h, e] : nodes_) out.push_back(ToNode(h, &e));
  for (const auto& [h, r] : drains_) {
    if (!nodes_.count(h)) out.push_back(ToNode(h, nullptr));
  }
  return out;
}

absl::StatusOr<v1::Node> NodeService::Node(const std::string& host) {
  if (absl::Status s = Required(host, "host"); !s.ok()) return s;
  ServiceLock lock(&mu_);
  auto it = nodes_.find(host);
  if (it == nodes_.end() && !drains_.count(host)) {
    return absl::NotFoundError(absl::StrCat("node ", host, " not found"));
  }
  return ToNode(host, it == nodes_.end() ? nullptr : &it->second);
}

std::pair<uint32_t, uint32_t> NodeService::ReadyAndTotal() {
  ServiceLock lock(&mu_);
  std::set<std::string> hosts;
  for (const auto& [h, e] : nodes_) hosts.insert(h);
  for (const auto& [h, r] : drains_) hosts.insert(h);
  uint32_t ready = 0;
  for (const std::string& h : hosts) {
    auto it = nodes_.find(h);
    ready += ToNode(h, it == nodes_.end() ? nullptr : &it->second).state() ==
             v1::NODE_STATE_READY;
  }
  return {ready, static_cast<uint32_t>(hosts.size())};
}

std::vector<NodeFacts> NodeService::ListFacts(bool standby_only) {
  ServiceLock lock(&mu_);
  std::vector<NodeFacts> out;
  for (const auto& [host, e] : nodes_) {
    if (standby_only && !e.registration.standby()) continue;
    NodeFacts& f = out.emplace_back();
    f.host = host;
    f.standby = e.registration.standby();
    f.gpus = e.registration.gpus_size();
    f.migration_data_plane = e.registration.migration_data_plane();
    f.last_seen_unix_ns = e.last_seen_unix_ns;
    f.connected_ranks = e.connected_ranks;
    f.connected = e.session != 0 && !e.opening;
  }
  return out;
}

absl::StatusOr<v1::Node> NodeService::Drain(const std::string& host,
                                            const std::string& reason) {
  if (absl::Status s = Required(host, "host"); !s.ok()) return s;
  if (absl::Status s = Required(reason, "reason"); !s.ok()) return s;
  return ChangeDrain(host, &reason);
}

absl::StatusOr<v1::Node> NodeService::Uncordon(const std::string& host) {
  if (absl::Status s = Required(host, "host"); !s.ok()) return s;
  return ChangeDrain(host, nullptr);
}

absl::StatusOr<v1::Node> NodeService::ChangeDrain(const std::string& host,
                                                  const std::string* reason) {
  if (absl::Status s = CheckLeader(options_.leadership); !s.ok()) return s;
  // Checked, stored (without mu_: agent streams are not held by the disk
  // sync or the etcd round trip), then applied; write_mu_ keeps the order.
  ServiceLock writes(&write_mu_);
  {
    ServiceLock lock(&mu_);
    if (!nodes_.count(host) && !drains_.count(host)) {
      return absl::NotFoundError(absl::StrCat("node ", host, " not found"));
    }
  }
  if (absl::Status s = reason != nullptr
                           ? options_.store->SetDrain(host, *reason)
                           : options_.store->ClearDrain(host);
      !s.ok()) {
    return s;
  }
  ServiceLock lock(&mu_);
  if (reason != nullptr) {
    drains_[host] = *reason;
  } else {
    drains_.erase(host);
  }
  auto it = nodes_.find(host);
  return ToNode(host, it == nodes_.end() ? nullptr : &it->second);
}

void NodeService::DrainMigrated(const std::string& host,
                                const std::string& why) {
  ServiceLock writes(&write_mu_);
  if (absl::Status s = options_.store->SetDrain(host, why); !s.ok()) {
    Logger("controller")->error("draining {}: {}", host, s.ToString());
    return;
  }
  ServiceLock lock(&mu_);
  drains_[host] = why;
}

}  // namespace pitstop::controller
