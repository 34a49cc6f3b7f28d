// Records lost inside a node agent that was killed (docs/reliability.md,
// "Lost without a count"): the controller's half of the join whose agent
// half is src/agent/process_ledger.h.
//
// Every agent batch carries, per local process (pid + when its counters
// started), records_before (what earlier agents read from it, as the
// process told this agent in its hello) and records_read (what this agent
// read, in a batch built after reading them). For one process the
// controller keeps the last records_read of each agent incarnation
// (agent_id); when a new incarnation reports the process,
//
//   lost = records_before(new agent) - sum of records_read received from
//          the earlier agents
//
// is what the earlier agents had read (accepted) and never delivered. The
// first time the controller hears of a process its records_before is a
// baseline (a controller restart cannot tell what reached its predecessor),
// so only losses the controller witnessed are counted. A restarted rank is
// a new process (new counters start): its counters from zero are never
// compared with the old ones.
//
// Memory: at most kMaxProcessesPerHost entries per host (the one heard of
// least recently is folded into the totals) and the caller's global
// budget. Not thread-safe: NodeService calls it under its mu_.
#ifndef PITSTOP_CONTROLLER_NODES_RECORD_LOSS_H_
#define PITSTOP_CONTROLLER_NODES_RECORD_LOSS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "pitstop/v1/agent.pb.h"

namespace pitstop::controller {

class RecordLossLedger {
 public:
  static constexpr size_t kMaxProcessesPerHost = 1024;
  // Entries of one batch beyond this are ignored (the agent sends at most
  // 4096; docs/reliability.md).
  static constexpr int kMaxEntriesPerBatch = 4096;

  struct Totals {
    // Sum over processes of what they say reached any agent (records
    // produced - dropped, latest counters), since the controller first
    // heard of each (less its baseline). sent - received - lost_in_agent
    // is what is in flight (rings, agents' open batches).
    uint64_t sent = 0;
    // Records read by agents whose batches reached us (records_read).
    uint64_t received = 0;
    // Read by an agent that was then replaced, never delivered.
    uint64_t lost_in_agent = 0;
    uint64_t processes = 0;  // tracked now
  };

  // One entry of a batch of agent `agent_id`. `budget` is the global count
  // of entries the caller still allows: decremented for a new process,
  // incremented for one forgotten; a new process with budget 0 is ignored
  // (returns false). Returns the records newly counted as lost in *lost.
  bool Observe(const std::string& agent_id, const v1::ProcessRecords& rec,
               int64_t* budget, uint64_t* lost);
  Totals totals() const;
  // Gives the budget of every entry back (the host is forgotten).
  void Release(int64_t* budget);

 private:
  using Key = std::pair<uint32_t, uint64_t>;
  struct Entry {
    std::string agent_id;
    uint64_t read = 0;       // last records_read of agent_id
    uint64_t before = 0;     // records_before of agent_id
    uint64_t delivered = 0;  // baseline + records_read of earlier agents
    uint64_t baseline = 0;   // records_before when first heard of
    uint64_t sent = 0;       // produced - dropped
    uint64_t lost = 0;
    uint64_t last_seen = 0;  // observation number
  };
  void Forget(std::map<Key, Entry>::iterator it);

  std::map<Key, Entry> entries_;
  uint64_t observations_ = 0;
  // Of forgotten processes.
  uint64_t base_sent_ = 0;
  uint64_t base_received_ = 0;
  uint64_t base_lost_ = 0;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_NODES_RECORD_LOSS_H_
