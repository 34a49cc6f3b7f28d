// The agent's state shared by ingest and upstream: one RankJoiner per rank
// stream, the bounded upstream buffer, counters and metrics.
//
// Thread-safe. Ingest reactors call OpenStream/OnMessage/CloseStream (each
// stream from one thread at a time); the upstream thread calls FillBatch and
// ApplyActivation. Lock order: core mutex, then a stream's mutex, then the
// CommandSink's own lock.
#ifndef PITSTOP_AGENT_AGENT_CORE_H_
#define PITSTOP_AGENT_AGENT_CORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "pitstop/clock.h"
#include "pitstop/sync.h"
#include "pitstop/v1/agent.pb.h"
#include "pitstop/v1/telemetry.pb.h"
#include "src/agent/agent_metrics.h"
#include "src/agent/local_tenants.h"
#include "src/agent/process_ledger.h"
#include "src/agent/rank_joiner.h"
#include "src/agent/upstream_buffer.h"

namespace pitstop::agent {

// Where commands for one rank stream go (the ingest reactor): activation
// commands and migration directives (StreamTelemetryResponse).
class CommandSink {
 public:
  virtual ~CommandSink() = default;
  // Any thread; must not block or call back into AgentCore.
  virtual void SendResponse(const v1::StreamTelemetryResponse& response) = 0;
  void SendActivation(const v1::ActivationCommand& command) {
    v1::StreamTelemetryResponse r;
    *r.add_activation() = command;
    SendResponse(r);
  }
};

// What the migration data plane (library_migration_plane.h) hears from
// rank streams. Called from ingest threads without AgentCore's locks held;
// may call AgentCore back.
class RankMigrationListener {
 public:
  virtual ~RankMigrationListener() = default;
  // A stream said hello (its process's job and RANK, -1 when unset).
  virtual void OnRankHello(uint64_t stream, const std::string& job_id,
                           int32_t global_rank) = 0;
  // The library answered RankMigrationDirectives.
  virtual void OnRankAcks(
      uint64_t stream,
      const google::protobuf::RepeatedPtrField<v1::RankMigrationAck>& acks) = 0;
};

struct AgentCoreOptions {
  std::string host;        // written into infos and summaries
  RankJoinerOptions join;  // .host is set from `host`
  size_t buffer_summaries = 50'000;
  // Shares of the node's rank table (ingest.max_ranks_*).
  LocalTenantsOptions tenants;
  // Tests only: called first in OnMessage (may throw, to exercise the
  // ingest path's exception handling).
  std::function<void(const v1::StreamTelemetryRequest&)> on_message_for_test;
};

class AgentCore {
 public:
  // `clock` must outlive the core; `metrics` may be null.
  AgentCore(Clock* clock, AgentCoreOptions options, AgentMetrics* metrics);
  ~AgentCore();

  // A rank stream connected; `sink` stays valid until CloseStream returns.
  // `who`: its process as the kernel knows it (unknown when the server does
  // not check: ingest.verify_pid off).
  uint64_t OpenStream(CommandSink* sink, const ProcessIdentity& who = {});
  // One message of a stream. InvalidArgument naming the field for protocol
  // violations (first message without hello, second hello, ...),
  // PermissionDenied for a hello claiming a job or rank its process may
  // not (LocalTenants): the caller ends the stream with that status.
  // Communicators and ops for ranks the process may not report for are
  // dropped (counted).
  absl::Status OnMessage(uint64_t stream,
                         const v1::StreamTelemetryRequest& request);
  // The stream ended (cleanly or not). Idempotent.
  void CloseStream(uint64_t stream);
  // From now on streams that end are not reported as dead ranks.
  void SetStopping();

  // One upstream batch: polls the joiners, then adds progress of every
  // local (comm, rank, func), lifecycle, communicators, aggregates, up to
  // `max_summaries` summaries and the counters.
  void FillBatch(size_t max_summaries, v1::ConnectRequest* out);
  // Polls the joiners (grace / timeout expiry) and collects what they
  // emitted into the buffer and metrics, without draining (the periodic
  // tick when there is no upstream).
  void Poll();
  // Communicator infos of every connected rank (sent after registering).
  void AllCommunicators(std::vector<v1::CommunicatorInfo>* out);
  // Sends the mask to the matching rank streams; returns how many.
  int ApplyActivation(uint64_t command_id, const v1::SetActivationMask& mask);

  // Where rank hellos and migration acks go; set once, before streams
  // carry migrations (null: nowhere).
  void SetMigrationListener(RankMigrationListener* listener);
  struct LocalRank {
    uint64_t stream = 0;
    int32_t global_rank = -1;
  };
  // The connected streams of `job_id` that said hello, by stream id.
  std::vector<LocalRank> RanksOfJob(const std::string& job_id);
  // Sends `response` on `stream`; false when the stream is gone.
  bool SendToStream(uint64_t stream,
                    const v1::StreamTelemetryResponse& response);

  UpstreamBuffer* buffer() { return &buffer_; }
  // Records per local process (shared-memory ingest), in every batch.
  ProcessLedger* process_ledger() { return &ledger_; }
  // The pid `stream`'s process is reported by upstream: its pid on this
  // host when the kernel's word is known, else `claimed` (R18-2).
  uint32_t ReportedPid(uint64_t stream, uint32_t claimed);
  LocalTenants::Stats tenant_stats() const { return tenants_.stats(); }
  // Whether process `who` may report trainer steps for `job` and
  // `global_rank` (LocalTenants::CheckTrainer; counted there).
  absl::Status CheckTrainer(const ProcessIdentity& who, const std::string& job,
                            int32_t global_rank) {
    return tenants_.CheckTrainer(who, job, global_rank);
  }
  v1::AgentCounters Counters();
  uint32_t connected_ranks();
  uint64_t rank_deaths() const { return deaths_.load(); }
  // Publishes totals to the metrics (if any), with the upstream state.
  void PublishMetrics(bool upstream_connected, uint64_t upstream_reconnects);
  // The agent stops: what the buffer still holds will never be delivered.
  // Counts it (counters.undelivered, pitstop_agent_undelivered_total) and
  // returns how much it was.
  uint64_t CountUndelivered();
  // Undelivered counted by earlier agents on this node (read at start).
  void AddUndelivered(uint64_t n) { undelivered_.fetch_add(n); }
  // Set by the agent: connections the ingest listener refused so far.
  void SetConnectionsRefused(uint64_t n) { connections_refused_.store(n); }
  // Connections refused for a pid claim (both ingest servers, cumulative).
  void SetPidRefused(uint64_t n) { pid_refused_.store(n); }
  // Messages refused before parsing (both ingest servers, cumulative).
  void SetMessagesRefused(uint64_t n) { messages_refused_.store(n); }

 private:
  struct Slot {
    Mutex mu;
    std::unique_ptr<RankJoiner> joiner ABSL_GUARDED_BY(mu);
    bool got_first ABSL_GUARDED_BY(mu) = false;
    std::string job_id ABSL_GUARDED_BY(mu);  // from the hello
    int32_t global_rank ABSL_GUARDED_BY(mu) = -1;
    CommandSink* sink = nullptr;
    ProcessIdentity who;
  };
  std::shared_ptr<Slot> FindSlot(uint64_t stream);
  // Checks a stream's message against what its process may claim
  // (LocalTenants): `*in` is `req`, or `copy` made of it without what the
  // process may not report (an anonymous hello's job and global rank,
  // records for ranks it does not hold).
  absl::Status Admit(uint64_t stream, Slot* slot,
                     const v1::StreamTelemetryRequest& req,
                     v1::StreamTelemetryRequest* copy,
                     const v1::StreamTelemetryRequest** in)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot->mu);
  // Moves what `joiner` emitted into the buffer and metrics.
  void Collect(RankJoiner* joiner);

  Clock* const clock_;
  const AgentCoreOptions options_;
  AgentMetrics* const metrics_;
  UpstreamBuffer buffer_;
  ProcessLedger ledger_;
  LocalTenants tenants_;
  std::atomic<RankMigrationListener*> migration_listener_{nullptr};
  Mutex mu_;
  uint64_t next_stream_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Slot>> slots_
      ABSL_GUARDED_BY(mu_);
  static constexpr size_t kMaxDropPids = 1024;
  absl::flat_hash_map<uint32_t, uint64_t> dropped_by_pid_ ABSL_GUARDED_BY(mu_);
  uint64_t dropped_base_ ABSL_GUARDED_BY(mu_) = 0;  // of pruned pids
  std::atomic<uint64_t> records_{0};
  std::atomic<uint64_t> batches_lost_{0};
  std::atomic<uint64_t> deaths_{0};
  std::atomic<uint64_t> records_refused_{0};
  std::atomic<uint64_t> connections_refused_{0};
  std::atomic<uint64_t> pid_refused_{0};
  std::atomic<uint64_t> messages_refused_{0};
  std::atomic<uint64_t> undelivered_{0};
};

}  // namespace pitstop::agent

#endif  // PITSTOP_AGENT_AGENT_CORE_H_
