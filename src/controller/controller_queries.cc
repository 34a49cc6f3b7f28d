// ControllerCore: the Controller API queries and operator actions.
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "src/controller/controller_core.h"

namespace pitstop::controller {
namespace {

absl::Status Required(const std::string& value, absl::string_view field) {
  if (value.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": required"));
  }
  return absl::OkStatus();
}

}  // namespace

v1::Node ControllerCore::ToNode(const std::string& host,
                                const NodeEntry* e) const {
  v1::Node n;
  n.set_host(host);
  auto d = drains_.find(host);
  const uint64_t now = NowUnixNs();
  const uint64_t grace = absl::ToInt64Nanoseconds(options_.node_grace);
  if (e != nullptr) {
    *n.mutable_registration() = e->registration;
    n.set_agent_connected(e->session != 0);
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
  } else if (e != nullptr &&
             (e->session != 0 || now - e->last_seen_unix_ns <= grace)) {
    n.set_state(v1::NODE_STATE_READY);
  } else {
    n.set_state(v1::NODE_STATE_UNREACHABLE);
  }
  return n;
}

v1::ControllerStatus ControllerCore::Status() {
  const uint32_t open_faults = store_->OpenCount();  // before the lock
  CoreLock lock(this);
  v1::ControllerStatus s;
  s.set_version(options_.version);
  s.set_start_unix_ns(start_unix_ns_);
  std::set<std::string> hosts;
  for (const auto& [h, e] : nodes_) hosts.insert(h);
  for (const auto& [h, r] : drains_) hosts.insert(h);
  uint32_t ready = 0;
  for (const std::string& h : hosts) {
    auto it = nodes_.find(h);
    ready += ToNode(h, it == nodes_.end() ? nullptr : &it->second).state() ==
             v1::NODE_STATE_READY;
  }
  s.set_nodes_ready(ready);
  s.set_nodes_total(hosts.size());
  s.set_jobs(engine_->Jobs().size());
  const EngineStats st = engine_->stats();
  s.set_communicators(st.communicators);
  s.set_collectives_joined(st.collectives_joined);
  s.set_open_faults(open_faults);
  s.set_last_detection_cycle_ms(last_cycle_ms_);
  s.set_database_path(store_->path());
  if (options_.leadership != nullptr) {
    options_.leadership->FillStatus(&s);
  } else {
    s.set_role(v1::CONTROLLER_ROLE_SINGLE);
  }
  return s;
}

std::vector<v1::Node> ControllerCore::Nodes() {
  CoreLock lock(this);
  std::vector<v1::Node> out;
  for (const auto& [h, e] : nodes_) out.push_back(ToNode(h, &e));
  for (const auto& [h, r] : drains_) {
    if (!nodes_.count(h)) out.push_back(ToNode(h, nullptr));
  }
  return out;
}

absl::StatusOr<v1::Node> ControllerCore::Node(const std::string& host) {
  if (absl::Status s = Required(host, "host"); !s.ok()) return s;
  CoreLock lock(this);
  auto it = nodes_.find(host);
  if (it == nodes_.end() && !drains_.count(host)) {
    return absl::NotFoundError(absl::StrCat("node ", host, " not found"));
  }
  return ToNode(host, it == nodes_.end() ? nullptr : &it->second);
}

std::vector<v1::Job> ControllerCore::Jobs() {
  // The store is read before the lock (a disk read in SQLite, a round trip
  // in etcd must not hold agent batches up): open faults per job.
  std::map<std::string, uint32_t> open_per_job;
  if (absl::StatusOr<std::vector<v1::Fault>> open = store_->List("", false, 0);
      open.ok()) {
    for (const v1::Fault& f : *open) ++open_per_job[f.job_id()];
  }
  CoreLock lock(this);
  std::vector<v1::Job> jobs = engine_->Jobs();
  for (v1::Job& j : jobs) {
    auto n = open_per_job.find(j.job_id());
    j.set_open_faults(n == open_per_job.end() ? 0 : n->second);
  }
  AddLoraJobs(&jobs);
  AddSyncJobs(&jobs);
  return jobs;
}

absl::StatusOr<v1::Job> ControllerCore::Job(const std::string& job_id) {
  if (absl::Status s = Required(job_id, "job_id"); !s.ok()) return s;
  for (v1::Job& j : Jobs()) {
    if (j.job_id() == job_id) return j;
  }
  return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
}

std::vector<v1::Communicator> ControllerCore::Communicators(
    const std::string& job_id) {
  CoreLock lock(this);
  std::vector<v1::Communicator> out;
  for (v1::Communicator& c : engine_->Communicators()) {
    if (job_id.empty() || c.job_id() == job_id) out.push_back(std::move(c));
  }
  return out;
}

absl::StatusOr<v1::Communicator> ControllerCore::Communicator(
    uint64_t comm_hash) {
  if (comm_hash == 0) {
    return absl::InvalidArgumentError("comm_hash: required (non-zero)");
  }
  CoreLock lock(this);
  v1::Communicator c;
  if (engine_->GetCommunicator(comm_hash, &c)) return c;
  return absl::NotFoundError(
      absl::StrCat("communicator ", absl::Hex(comm_hash), " not found"));
}

absl::StatusOr<std::vector<v1::Fault>> ControllerCore::Faults(
    const std::string& job_id, bool include_resolved, uint32_t limit) {
  return store_->List(job_id, include_resolved, limit);
}

absl::StatusOr<v1::Fault> ControllerCore::Fault(const std::string& fault_id) {
  if (absl::Status s = Required(fault_id, "fault_id"); !s.ok()) return s;
  return store_->Get(fault_id);
}

absl::StatusOr<v1::Fault> ControllerCore::MoveFault(const std::string& fault_id,
                                                    const std::string& who,
                                                    const std::string& note,
                                                    bool resolve) {
  if (absl::Status s = Required(fault_id, "fault_id"); !s.ok()) return s;
  if (absl::Status s = Required(who, "who"); !s.ok()) return s;
  if (absl::Status s = CheckLeader(); !s.ok()) return s;
  MutexLock writes(&write_mu_);
  absl::StatusOr<v1::Fault> before, f;
  (void)Durable([&] {
    before = store_->Get(fault_id);
    f = resolve ? store_->Resolve(fault_id, who, note, NowUnixNs())
                : store_->Acknowledge(fault_id, who, note, NowUnixNs());
    return absl::OkStatus();
  });
  if (f.ok() && before.ok() && before->state() != f->state()) {
    CoreLock lock(this);
    if (resolve) engine_->ForgetFault(fault_id);
    Notify(resolve ? v1::WatchFaultsResponse::CHANGE_RESOLVED
                   : v1::WatchFaultsResponse::CHANGE_UPDATED,
           *f);
  }
  return f;
}

absl::StatusOr<v1::Fault> ControllerCore::Acknowledge(
    const std::string& fault_id, const std::string& who,
    const std::string& note) {
  return MoveFault(fault_id, who, note, /*resolve=*/false);
}

absl::StatusOr<v1::Fault> ControllerCore::Resolve(const std::string& fault_id,
                                                  const std::string& who,
                                                  const std::string& note) {
  return MoveFault(fault_id, who, note, /*resolve=*/true);
}

absl::StatusOr<v1::Node> ControllerCore::Drain(const std::string& host,
                                               const std::string& reason) {
  if (absl::Status s = Required(host, "host"); !s.ok()) return s;
  if (absl::Status s = Required(reason, "reason"); !s.ok()) return s;
  return ChangeDrain(host, &reason);
}

absl::StatusOr<v1::Node> ControllerCore::Uncordon(const std::string& host) {
  if (absl::Status s = Required(host, "host"); !s.ok()) return s;
  return ChangeDrain(host, nullptr);
}

absl::StatusOr<v1::Node> ControllerCore::ChangeDrain(
    const std::string& host, const std::string* reason) {
  if (absl::Status s = CheckLeader(); !s.ok()) return s;
  MutexLock writes(&write_mu_);
  {
    CoreLock lock(this);
    if (!nodes_.count(host) && !drains_.count(host)) {
      return absl::NotFoundError(absl::StrCat("node ", host, " not found"));
    }
  }
  if (absl::Status s = Durable([&] {
        return reason != nullptr ? store_->SetDrain(host, *reason)
                                 : store_->ClearDrain(host);
      });
      !s.ok()) {
    return s;
  }
  CoreLock lock(this);
  if (reason != nullptr) {
    drains_[host] = *reason;
  } else {
    drains_.erase(host);
  }
  auto it = nodes_.find(host);
  return ToNode(host, it == nodes_.end() ? nullptr : &it->second);
}

absl::Status ControllerCore::Durable(
    const std::function<absl::Status()>& write) {
  if (options_.join_off_lock) return write();
  CoreLock lock(this);  // the old way (the benchmark's baseline)
  return write();
}

absl::StatusOr<v1::JobPolicy> ControllerCore::GetPolicy(
    const std::string& job_id) {
  if (absl::Status s = Required(job_id, "job_id"); !s.ok()) return s;
  CoreLock lock(this);
  return engine_->GetJobPolicy(job_id);
}

absl::StatusOr<v1::JobPolicy> ControllerCore::SetPolicy(
    const std::string& job_id, const v1::JobPolicy& policy) {
  if (absl::Status s = Required(job_id, "job_id"); !s.ok()) return s;
  if (absl::Status s = CheckLeader(); !s.ok()) return s;
  // Checked and stored first, then set: a write the store refuses (a
  // deposed leader's) changes nothing here either.
  const v1::JobPolicy& defaults = options_.engine.default_policy;
  if (absl::Status s = ValidatePolicy(policy, defaults); !s.ok()) return s;
  MutexLock writes(&write_mu_);
  if (absl::Status s = Durable([&] {
        return store_->SavePolicy(job_id, ResolvePolicy(policy, defaults));
      });
      !s.ok()) {
    return s;
  }
  CoreLock lock(this);
  return engine_->SetJobPolicy(job_id, policy);
}

}  // namespace pitstop::controller
