// Commands that land (docs/controller.md, "Commands that land"): the
// AgentCommands a host's agent acknowledges by command_id (deep profiling
// masks, flow-plan directives, and any later command the agent acks the
// same way) are kept per host until their ack arrives, and handed back to
// be sent again when the host's agent opens a new stream: a command written
// to a stream that broke before the agent applied it, or whose ack was lost
// with the stream, would otherwise be gone. The agent applies a command id
// once (src/agent/upstream_client.cc) and acks a repeat without applying it
// again, so a re-send lands exactly once in effect.
//
// Not tracked here: pings (answered on the stream they came on), trainer
// directives (the agent does not ack them; the trainer policies repeat
// their verdicts every cycle) and migration directives (their own READY /
// SWITCHED acks and timeouts, docs/migration.md).
#ifndef PITSTOP_CONTROLLER_NODES_COMMAND_LEDGER_H_
#define PITSTOP_CONTROLLER_NODES_COMMAND_LEDGER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "pitstop/clock.h"
#include "pitstop/v1/agent.pb.h"

namespace pitstop::controller {

// Not thread-safe: the controller core calls it under its lock.
class CommandLedger {
 public:
  struct Options {
    // Unacked commands kept per host; beyond, the oldest is dropped (an
    // agent that never acks cannot grow the controller's memory).
    size_t max_pending_per_host = 64;
  };
  struct Counts {
    uint64_t sent = 0;     // tracked commands written to a stream or queued
    uint64_t acked = 0;    // acks of tracked commands
    uint64_t resent = 0;   // sent again to a reconnected agent
    uint64_t dropped = 0;  // expired, superseded or over the budget
    uint64_t pending = 0;  // unacked now (not a total)
  };

  explicit CommandLedger(Clock* clock) : CommandLedger(clock, Options{}) {}
  CommandLedger(Clock* clock, Options options);

  // True for the commands the agent acks by command_id.
  static bool Tracked(const v1::AgentCommand& cmd);

  // `cmd` was written to `host`'s stream, or (`delivered` false) is waiting
  // for the host's agent to connect. A flow-plan directive supersedes the
  // unacked ones of the same job for this host (the agent keeps the newest
  // epoch anyway). Untracked commands are ignored.
  void Sent(const std::string& host, const v1::AgentCommand& cmd,
            bool delivered = true);
  // The agent acked `command_id`; false when it is not pending (acked
  // before, dropped, or never tracked).
  bool Acked(const std::string& host, uint64_t command_id);
  // `host`'s agent opened a new stream: every pending command, oldest
  // first, to write to it, with the same command ids. A deep-profiling
  // request asks only for what is left of its duration; one whose duration
  // has passed is dropped instead. Commands that were never delivered count
  // as sent then, the others as re-sent.
  std::vector<v1::AgentCommand> ForReconnect(const std::string& host);
  // The host is gone for good (expired): its pending commands are dropped.
  void Forget(const std::string& host);

  Counts HostCounts(const std::string& host) const;
  Counts Total() const;

 private:
  struct Pending {
    v1::AgentCommand cmd;
    int64_t sent_ns = 0;  // clock's monotonic time of the first send
    bool delivered = false;
  };
  struct Host {
    std::deque<Pending> pending;
    Counts counts;
  };
  void Drop(Host* h, size_t n);

  Clock* const clock_;
  const Options options_;
  std::map<std::string, Host> hosts_;
  Counts gone_;  // counts of forgotten hosts, so totals never go down
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_NODES_COMMAND_LEDGER_H_
