// What each local training process delivered to agents and what this agent
// read from it (docs/reliability.md, "Lost without a count"): the agent's
// half of counting records an agent killed with SIGKILL had accepted and
// never delivered. The process's shared-memory hello says how many records
// earlier agents read from it; this ledger adds what this agent reads, and
// every upstream batch carries a snapshot (ConnectRequest.process_records).
// The controller compares a process's records_before under a new agent
// with what the earlier agents' batches said they had read.
//
// Bounded: at most kMaxProcesses entries; an ended process is kept for
// kEndedTtl after its last connection closed (long enough for a few
// batches to report its final count), the oldest ended one goes first when
// full; past that a new process is not accounted (counted in
// `untracked()`).
//
// It also knows when each process was last heard from (SilentNs: a process
// stopped whole sends no heartbeat).
//
// Thread-safe: the ingest thread calls Hello/Counters/RecordsRead/Closed,
// the upstream thread Snapshot and SilentNs.
#ifndef PITSTOP_AGENT_PROCESS_LEDGER_H_
#define PITSTOP_AGENT_PROCESS_LEDGER_H_

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "pitstop/clock.h"
#include "pitstop/shm_transport.h"
#include "pitstop/sync.h"
#include "pitstop/v1/agent.pb.h"

namespace pitstop::agent {

class ProcessLedger {
 public:
  static constexpr size_t kMaxProcesses = 4096;
  static constexpr uint64_t kEndedTtlNs = 60'000'000'000ull;  // 60 s

  explicit ProcessLedger(Clock* clock) : clock_(clock) {}

  // A connection of a process said hello. A hello without
  // counters_start_unix_ns (library 0.1) is not accounted.
  void Hello(uint64_t stream, const shm::HelloFrame& hello);
  // The process's cumulative counters (hello, heartbeat, goodbye).
  void Counters(uint64_t stream, const shm::Counters& counters);
  // `n` more records of the stream were read and acknowledged to the
  // process (its ring's records_read now includes them).
  void RecordsRead(uint64_t stream, uint64_t n);
  // The connection ended.
  void Closed(uint64_t stream);

  // How long nothing was heard from live process `pid` (no hello,
  // heartbeat, goodbye or record) on the agent's clock, in ns; 0 when no
  // connected process has that pid (or it is not accounted).
  uint64_t SilentNs(uint32_t pid) const;

  // One entry per known process (drops expired ended ones first). Also
  // returns the sum of records_before + records_read over them and over
  // the processes forgotten before (AgentCounters.rank_records_sent).
  uint64_t Snapshot(std::vector<v1::ProcessRecords>* out);
  // Processes not accounted because the ledger was full.
  uint64_t untracked() const;

 private:
  using Key = std::pair<uint32_t, uint64_t>;  // pid, counters start
  struct Entry {
    v1::ProcessRecords rec;
    int connections = 0;
    uint64_t ended_ns = 0;  // monotonic, when connections fell to 0
    uint64_t heard_ns = 0;  // monotonic, the last frame or record read
  };
  Entry* Find(uint64_t stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes room for one entry; false if every entry is a live process.
  bool MakeRoom() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock* const clock_;
  mutable Mutex mu_;
  std::map<Key, Entry> entries_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Key> streams_ ABSL_GUARDED_BY(mu_);
  uint64_t forgotten_sent_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t untracked_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pitstop::agent

#endif  // PITSTOP_AGENT_PROCESS_LEDGER_H_
