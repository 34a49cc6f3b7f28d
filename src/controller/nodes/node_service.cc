// NodeService: agent streams, the registry's upkeep and commands to agents.
// Queries and drains are in node_queries.cc.
#include "src/controller/nodes/node_service.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pitstop/logging.h"
#include "src/controller/controller_metrics.h"
#include "src/controller/ha/leadership.h"
#include "src/controller/nodes/agent_limits.h"
#include "src/controller/store/fault_store.h"

namespace pitstop::controller {

NodeService::NodeService(Options options)
    : options_(std::move(options)), commands_(options_.clock) {
  ServiceLock lock(&mu_);
  next_command_id_ = std::max<uint64_t>(
      1, static_cast<uint64_t>(absl::ToUnixMicros(options_.clock->Now())));
  drains_ = options_.store->Drains();
  process_budget_ = options_.max_tracked_processes;
}

uint64_t NodeService::NowUnixNs() const {
  return static_cast<uint64_t>(absl::ToUnixNanos(options_.clock->Now()));
}

void NodeService::CountRefused(const char* what, uint64_t* counter,
                               uint64_t n) {
  *counter += n;
  if (options_.metrics) options_.metrics->Refused(what, n);
}

void NodeService::PublishConnected() {
  if (options_.metrics) options_.metrics->SetAgentsConnected(sessions_.size());
}

NodeService::Registered NodeService::Register(
    const v1::NodeRegistration& registration, CommandSink* sink) {
  Registered out;
  out.registration = registration;
  v1::NodeRegistration& reg = out.registration;
  int nics_dropped = 0;
  out.status = CheckRegistration(&reg, &nics_dropped);
  if (!out.status.ok()) return out;
  ServiceLock lock(&mu_);
  out.status = Admit(reg, &out.gone);
  if (!out.status.ok()) return out;
  if (nics_dropped > 0) {
    CountRefused("nics", &stats_.nics_dropped, nics_dropped);
    Logger("controller")
        ->warn("agent {}: {} NICs beyond {} dropped from its registration",
               reg.host(), nics_dropped, kMaxNicsPerNode);
  }
  out.session = next_session_++;
  Entry& e = nodes_[reg.host()];
  e.registration = reg;
  e.session = out.session;
  e.opening = true;
  e.sink = sink;
  e.last_seen_unix_ns = NowUnixNs();
  sessions_[out.session] = reg.host();
  PublishConnected();
  Logger("controller")
      ->info("agent {} connected (agent_id {}, {} GPUs{})", reg.host(),
             reg.agent_id(), reg.gpus_size(), reg.standby() ? ", standby" : "");
  ResendUnacked(reg.host(), sink);
  return out;
}

void NodeService::Opened(uint64_t session) {
  ServiceLock lock(&mu_);
  auto s = sessions_.find(session);
  if (s == sessions_.end()) return;
  auto e = nodes_.find(s->second);
  if (e != nodes_.end() && e->second.session == session) {
    e->second.opening = false;
  }
}

absl::Status NodeService::Admit(const v1::NodeRegistration& reg, Gone* gone) {
  auto existing = nodes_.find(reg.host());
  if (existing == nodes_.end() && nodes_.size() >= options_.max_hosts) {
    ShedAndExpireLocked(gone);  // make room from nodes that are gone
    if (nodes_.size() >= options_.max_hosts) {
      CountRefused("hosts", &stats_.hosts_refused);
      return absl::ResourceExhaustedError(absl::StrCat(
          "registration.host: the controller already tracks ", nodes_.size(),
          " hosts (budget max_hosts); ", reg.host(), " refused"));
    }
    existing = nodes_.end();
  }
  if (existing == nodes_.end() || existing->second.session == 0) {
    return absl::OkStatus();
  }
  // Two live streams claim one host: decided by agent id and start time,
  // never by which stream came last (docs/reliability.md).
  Entry& cur = existing->second;
  if (!NewClaimWins(cur.registration, reg)) {
    CountRefused("claims", &stats_.claims_refused);
    if (stats_.claims_refused % 100 == 1) {
      Logger("controller")
          ->warn(
              "agent {} (agent_id {}) refused: host served by agent {} "
              "started later ({} refusals)",
              reg.host(), reg.agent_id(), cur.registration.agent_id(),
              stats_.claims_refused);
    }
    return absl::AlreadyExistsError(absl::StrCat(
        "registration.host: ", reg.host(), " is served by agent ",
        cur.registration.agent_id(), ", started later than ", reg.agent_id()));
  }
  sessions_.erase(cur.session);
  if (cur.sink != nullptr) {
    cur.sink->Close(absl::AbortedError(absl::StrCat(
        "superseded: agent ", reg.agent_id(), " registered ", reg.host())));
  }
  ++stats_.sessions_superseded;
  // The same agent reconnecting is routine; another agent taking the host
  // over is worth a warning.
  Logger("controller")
      ->log(cur.registration.agent_id() == reg.agent_id() ? spdlog::level::info
                                                          : spdlog::level::warn,
            "agent {}: stream of {} superseded by {}; closed", reg.host(),
            cur.registration.agent_id(), reg.agent_id());
  cur.session = 0;
  cur.sink = nullptr;
  return absl::OkStatus();
}

std::string NodeService::Disconnect(uint64_t session) {
  ServiceLock lock(&mu_);
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return "";
  const std::string host = it->second;
  Entry& e = nodes_[host];
  e.session = 0;
  e.sink = nullptr;
  e.last_seen_unix_ns = NowUnixNs();
  sessions_.erase(it);
  Logger("controller")->info("agent {} disconnected", host);
  PublishConnected();
  return host;
}

absl::Status NodeService::AfterJoin(uint64_t session,
                                    const v1::ConnectRequest& batch) {
  ServiceLock lock(&mu_);
  auto sit = sessions_.find(session);
  if (sit == sessions_.end()) {
    return absl::FailedPreconditionError(
        "stream is not registered (superseded or shed); reconnect");
  }
  const std::string& host = sit->second;
  Entry& node = nodes_[host];
  node.last_seen_unix_ns = NowUnixNs();
  absl::Status status;
  if (batch.has_counters()) {
    status = ApplyCounters(host, &node, batch.counters());
  }
  AccountRecords(host, &node, batch);
  if (batch.acked_command_ids_size() > 0) {
    for (uint64_t id : batch.acked_command_ids()) commands_.Acked(host, id);
    PublishCommandCounts();
  }
  return status;
}

absl::Status NodeService::ApplyCounters(const std::string& host, Entry* e,
                                        const v1::AgentCounters& counters) {
  if (absl::Status s = CheckCounters(counters); !s.ok()) {
    CountRefused("counters", &stats_.counters_refused);
    return s;  // the previous values stay
  }
  e->connected_ranks = counters.connected_ranks();
  e->plugin_dropped = counters.plugin_dropped();
  if (counters.undelivered() > e->undelivered) {
    Logger("controller")
        ->warn(
            "agent {}: {} summaries/events accepted by its agents and "
            "never delivered (counters.undelivered)",
            host, counters.undelivered());
  }
  e->undelivered = counters.undelivered();
  return absl::OkStatus();
}

void NodeService::AccountRecords(const std::string& host, Entry* node,
                                 const v1::ConnectRequest& batch) {
  const std::string& agent_id = node->registration.agent_id();
  const int n = std::min(batch.process_records_size(),
                         RecordLossLedger::kMaxEntriesPerBatch);
  uint64_t lost = 0;
  for (int i = 0; i < n; ++i) {
    const v1::ProcessRecords& rec = batch.process_records(i);
    if (rec.records_before() > kMaxCounter ||
        rec.records_read() > kMaxCounter ||
        rec.records_produced() > kMaxCounter ||
        rec.records_dropped() > kMaxCounter) {
      CountRefused("counters", &stats_.counters_refused);
      continue;
    }
    uint64_t l = 0;
    if (!node->records.Observe(agent_id, rec, &process_budget_, &l) &&
        rec.counters_start_unix_ns() != 0 && process_budget_ <= 0) {
      CountRefused("processes", &stats_.processes_refused);
      continue;
    }
    lost += l;
  }
  if (lost == 0) return;
  if (options_.metrics) options_.metrics->LostInAgent(host, lost);
  Logger("controller")
      ->warn(
          "agent {}: {} telemetry records were read by an earlier agent "
          "(killed?) and never delivered, said the ranks reconnecting to "
          "agent {}; {} lost in agents on this host so far",
          host, lost, agent_id, node->records.totals().lost_in_agent);
}

NodeService::Gone NodeService::ShedAndExpire() {
  Gone gone;
  ServiceLock lock(&mu_);
  ShedAndExpireLocked(&gone);
  return gone;
}

void NodeService::ShedAndExpireLocked(Gone* gone) {
  const uint64_t now = NowUnixNs();
  const uint64_t grace = absl::ToInt64Nanoseconds(options_.node_grace);
  const int64_t expiry = absl::ToInt64Nanoseconds(options_.node_expiry);
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    Entry& e = it->second;
    const uint64_t silent = now - std::min(now, e.last_seen_unix_ns);
    if (e.session != 0 && silent > grace) {
      // A stream this silent is dead or stuck; closing it frees its
      // descriptor and makes a live agent reconnect.
      sessions_.erase(e.session);
      if (e.sink != nullptr) {
        e.sink->Close(absl::DeadlineExceededError(absl::StrCat(
            "agent stream silent for ", silent / 1'000'000'000, " s")));
      }
      gone->shed.emplace_back(it->first, e.session);
      e.session = 0;
      e.sink = nullptr;
      ++stats_.streams_shed;
      Logger("controller")
          ->warn("agent {}: stream silent for {} s; closed", it->first,
                 silent / 1'000'000'000);
    }
    if (e.session == 0 && expiry > 0 &&
        silent > static_cast<uint64_t>(expiry) && !drains_.count(it->first)) {
      e.records.Release(&process_budget_);
      commands_.Forget(it->first);
      ++stats_.nodes_expired;
      Logger("controller")
          ->info("node {} forgotten: no agent for {} s", it->first,
                 silent / 1'000'000'000);
      gone->forgotten.push_back(it->first);
      it = nodes_.erase(it);
      continue;
    }
    ++it;
  }
  PublishConnected();
}

NodeService::Sent NodeService::Send(const std::string& host,
                                    v1::AgentCommand cmd) {
  ServiceLock lock(&mu_);
  Sent out;
  out.command_id = next_command_id_++;
  cmd.set_command_id(out.command_id);
  auto it = nodes_.find(host);
  if (it == nodes_.end()) return out;
  out.known = true;
  out.written = it->second.sink != nullptr;
  if (out.written) {
    v1::ConnectResponse resp;
    *resp.add_commands() = cmd;
    it->second.sink->Send(resp);
  }
  if (CommandLedger::Tracked(cmd)) {
    commands_.Sent(host, cmd, out.written);
    PublishCommandCounts();
  }
  return out;
}

bool NodeService::SendIfConnected(const std::string& host,
                                  v1::AgentCommand cmd) {
  ServiceLock lock(&mu_);
  auto it = nodes_.find(host);
  if (it == nodes_.end() || it->second.sink == nullptr) return false;
  cmd.set_command_id(next_command_id_++);
  v1::ConnectResponse resp;
  *resp.add_commands() = std::move(cmd);
  it->second.sink->Send(resp);
  return true;
}

void NodeService::ResendUnacked(const std::string& host, CommandSink* sink) {
  std::vector<v1::AgentCommand> again = commands_.ForReconnect(host);
  PublishCommandCounts();
  if (again.empty() || sink == nullptr) return;
  v1::ConnectResponse resp;
  for (v1::AgentCommand& c : again) *resp.add_commands() = std::move(c);
  sink->Send(resp);
  Logger("controller")
      ->info("agent {}: {} unacked command(s) sent again on its new stream",
             host, resp.commands_size());
}

void NodeService::PublishCommandCounts() {
  if (options_.metrics == nullptr) return;
  const CommandLedger::Counts t = commands_.Total();
  options_.metrics->SetAgentCommands(t.sent, t.acked, t.resent, t.dropped,
                                     t.pending);
}

NodeService::Stats NodeService::stats() {
  ServiceLock lock(&mu_);
  return stats_;
}

size_t NodeService::CloseAll(const absl::Status& why, bool forget_commands) {
  ServiceLock lock(&mu_);
  size_t closed = 0;
  for (auto& [host, e] : nodes_) {
    if (e.sink != nullptr) {
      e.sink->Close(why);
      ++closed;
    }
    if (forget_commands) commands_.Forget(host);  // the next leader's own
  }
  nodes_.clear();
  sessions_.clear();
  PublishConnected();
  return closed;
}

void NodeService::SetDrains(std::map<std::string, std::string> drains) {
  ServiceLock lock(&mu_);
  drains_ = std::move(drains);
}

size_t NodeService::drains() {
  ServiceLock lock(&mu_);
  return drains_.size();
}

}  // namespace pitstop::controller
