#include "src/controller/nodes/command_ledger.h"

#include <algorithm>

namespace pitstop::controller {

namespace {
CommandLedger::Options Checked(CommandLedger::Options o) {
  if (o.max_pending_per_host == 0) o.max_pending_per_host = 1;
  return o;
}
}  // namespace

CommandLedger::CommandLedger(Clock* clock, Options options)
    : clock_(clock), options_(Checked(options)) {}

bool CommandLedger::Tracked(const v1::AgentCommand& cmd) {
  return cmd.command_id() != 0 &&
         (cmd.has_set_activation_mask() || cmd.has_path());
}

void CommandLedger::Drop(Host* h, size_t n) {
  n = std::min(n, h->pending.size());
  h->pending.erase(h->pending.begin(), h->pending.begin() + n);
  h->counts.dropped += n;
}

void CommandLedger::Sent(const std::string& host, const v1::AgentCommand& cmd,
                         bool delivered) {
  if (!Tracked(cmd)) return;
  Host& h = hosts_[host];
  if (cmd.has_path()) {
    // Only the newest plan of a job matters to the agent.
    const std::string& job = cmd.path().job_id();
    const size_t before = h.pending.size();
    std::erase_if(h.pending, [&](const Pending& p) {
      return p.cmd.has_path() && p.cmd.path().job_id() == job;
    });
    h.counts.dropped += before - h.pending.size();
  }
  if (delivered) ++h.counts.sent;
  h.pending.push_back(Pending{cmd, clock_->MonotonicNanos(), delivered});
  if (h.pending.size() > options_.max_pending_per_host) {
    Drop(&h, h.pending.size() - options_.max_pending_per_host);
  }
}

bool CommandLedger::Acked(const std::string& host, uint64_t command_id) {
  auto it = hosts_.find(host);
  if (it == hosts_.end()) return false;
  Host& h = it->second;
  auto p = std::find_if(
      h.pending.begin(), h.pending.end(),
      [&](const Pending& e) { return e.cmd.command_id() == command_id; });
  if (p == h.pending.end()) return false;
  h.pending.erase(p);
  ++h.counts.acked;
  return true;
}

std::vector<v1::AgentCommand> CommandLedger::ForReconnect(
    const std::string& host) {
  std::vector<v1::AgentCommand> out;
  auto it = hosts_.find(host);
  if (it == hosts_.end()) return out;
  Host& h = it->second;
  const int64_t now = clock_->MonotonicNanos();
  for (auto p = h.pending.begin(); p != h.pending.end();) {
    if (p->cmd.has_set_activation_mask()) {
      v1::SetActivationMask* m = p->cmd.mutable_set_activation_mask();
      const int64_t age_ms = (now - p->sent_ns) / 1'000'000;
      const int64_t left_ms = static_cast<int64_t>(m->duration_ms()) - age_ms;
      // duration_ms 0 asks for no end; keep it as it is.
      if (m->duration_ms() != 0 && left_ms <= 0) {
        p = h.pending.erase(p);
        ++h.counts.dropped;
        continue;
      }
      if (m->duration_ms() != 0) {
        // The request asked for profiling until sent + duration: re-sent,
        // it asks for what is left (the mask's timer restarts on apply).
        out.push_back(p->cmd);
        out.back().mutable_set_activation_mask()->set_duration_ms(
            static_cast<uint32_t>(left_ms));
      } else {
        out.push_back(p->cmd);
      }
    } else {
      out.push_back(p->cmd);
    }
    if (p->delivered) {
      ++h.counts.resent;
    } else {
      ++h.counts.sent;
      p->delivered = true;
    }
    ++p;
  }
  return out;
}

void CommandLedger::Forget(const std::string& host) {
  auto it = hosts_.find(host);
  if (it == hosts_.end()) return;
  const Counts& c = it->second.counts;
  gone_.sent += c.sent;
  gone_.acked += c.acked;
  gone_.resent += c.resent;
  gone_.dropped += c.dropped + it->second.pending.size();
  hosts_.erase(it);
}

CommandLedger::Counts CommandLedger::HostCounts(const std::string& host) const {
  auto it = hosts_.find(host);
  if (it == hosts_.end()) return {};
  Counts c = it->second.counts;
  c.pending = it->second.pending.size();
  return c;
}

CommandLedger::Counts CommandLedger::Total() const {
  Counts t = gone_;
  for (const auto& [host, h] : hosts_) {
    t.sent += h.counts.sent;
    t.acked += h.counts.acked;
    t.resent += h.counts.resent;
    t.dropped += h.counts.dropped;
    t.pending += h.pending.size();
  }
  return t;
}

}  // namespace pitstop::controller
