// Per-rank join: turns the raw telemetry records of process streams into one
// CollectiveSummary per (communicator, sequence number, rank), plus
// RankProgress snapshots and RankLifecycle events.
//
// Plain C++: no threads, no gRPC, time from an injected pitstop::Clock. Used
// by pitstop-agent (one joiner per ingest stream) and by the offline
// `pitstop analyze` / `pitstop replay` tools (several streams keyed by id).
//
//   RankJoiner joiner(clock, {.host = "node7"});
//   joiner.Add(/*stream=*/1, request);       // for every
//   StreamTelemetryRequest joiner.Poll();                           // emits
//   ops past their grace time joiner.TakeSummaries(&summaries);        //
//   completed ops, in order joiner.EndStream(1);                     // stream
//   closed joiner.FlushAll();                       // offline: emit everything
//   left
//
// Joining rules (telemetry.proto, agent.proto):
//   - Records of one op are tied by op_id, per stream. Any record may come
//     first; an op is created on the first record that names it.
//   - An op is complete when its OpCompletion arrived and the children it
//     announces (kernel channels + proxy ops) were seen, or `grace_ns` after
//     the completion arrived, whichever is first. Ops imported from other
//     tools (OpRecord + OpCompletion only, children 0) complete at once.
//     An op whose OpRecord has not arrived is never completed by the grace:
//     the record is written on another thread's ring and may come batches
//     later on a loaded node (only the caps and the stream's end emit it).
//   - GPU timer values are converted to the node's CLOCK_MONOTONIC with an
//     offset fitted per stream from KernelChannelRecord (cpu, gpu) pairs
//     (GpuClockFit); kernel_duration_ns = max over channels of
//     (stop_gpu - start_gpu), one GPU clock, not converted. Without GPU
//     timers, kernel start/end come from the CPU observation times.
//   - Bounded memory: at most `max_open_ops` incomplete ops per stream (the
//     oldest is emitted as-is, state ENQUEUED/STARTED, and counted in
//     ops_evicted) and incomplete ops older than `incomplete_timeout_ns` are
//     emitted the same way (ops_timed_out). Records of ops already emitted
//     are counted as late_records and dropped.
//   - A stream that ends after ProcessGoodbye is a CLEAN_EXIT; otherwise the
//     process DIED (unless EndStream is told the agent itself is stopping).
//
// Global ranks: summary.global_rank is CommunicatorInfo.global_ranks[rank]
// when known, else ProcessHello.global_rank, else -1. Communicator infos are
// emitted with host (options.host, else hello.host), pid and job_id filled
// in; when global_ranks is empty and the process knows its global rank, it
// becomes an n_ranks-long list of -1 with this rank's entry set.
//
// Not thread-safe: one caller at a time (the agent guards each joiner with a
// mutex).
#ifndef PITSTOP_AGENT_RANK_JOINER_H_
#define PITSTOP_AGENT_RANK_JOINER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "pitstop/clock.h"
#include "pitstop/v1/agent.pb.h"
#include "pitstop/v1/telemetry.pb.h"

namespace pitstop::agent {

// Limits on sizes a rank's messages control (the agent trusts no stream):
// records beyond them are dropped and counted in invalid_records.
inline constexpr int32_t kMaxCommRanks = 1 << 20;      // n_ranks, global_ranks
inline constexpr uint32_t kMaxConnsPerOp = 256;        // proxy_index < this
inline constexpr size_t kMaxCommsPerStream = 4096;     // live communicators
inline constexpr size_t kMaxProgressKeys = 65536;      // (comm, rank, func)
inline constexpr size_t kMaxConnsPerStream = 1 << 20;  // over open ops
// Records (of all kinds) in one StreamTelemetryRequest; the library sends
// at most 4096 ops per batch. Beyond it the message's records are dropped
// and counted in records_over_cap (the stream stays open).
inline constexpr size_t kMaxRecordsPerMessage = 65536;
// Failed communicator creations taken from one message (more are ignored)
// and the longest error text kept of each (cut beyond).
inline constexpr int kMaxInitFailures = 16;
inline constexpr size_t kMaxInitErrorText = 1024;
// Strings kept per stream or communicator (hello host/job_id/versions,
// comm_name, host, job_id): longer ones are refused (a hello: the stream
// ends with InvalidArgument; a communicator record: dropped, counted).
inline constexpr size_t kMaxStringBytes = 256;
// global_ranks entries over a stream's live communicators (16 MiB).
inline constexpr size_t kMaxGlobalRankEntries = size_t{1} << 22;

struct RankJoinerOptions {
  // Host name written into summaries' communicator infos and lifecycle; empty
  // = the host the process reports in its hello.
  std::string host;
  // Cap on incomplete ops per stream.
  uint32_t max_open_ops = 65536;
  // Incomplete ops older than this (by the injected clock) are emitted as
  // they are. Long enough that a hang is still reported through RankProgress.
  int64_t incomplete_timeout_ns = 600'000'000'000;  // 10 min
  // How long a completed op waits for children it announced but were not
  // seen yet (records of one op can arrive in different batches).
  int64_t grace_ns = 200'000'000;  // 200 ms
};

// Counters since construction (cumulative over all streams).
struct RankJoinerStats {
  uint64_t records = 0;           // records of all kinds fed in
  uint64_t batches = 0;           // StreamTelemetryRequest messages fed in
  uint64_t batches_lost = 0;      // gaps in batch_seq
  uint64_t summaries = 0;         // summaries emitted (any state)
  uint64_t ops_evicted = 0;       // incomplete ops pushed out by the cap
  uint64_t ops_timed_out = 0;     // incomplete ops emitted by the timeout
  uint64_t late_records = 0;      // records of ops already emitted
  uint64_t orphan_ops = 0;        // ops with no OpRecord, discarded
  uint64_t invalid_records = 0;   // records rejected by the size limits
                                  // (kMax* below), dropped
  uint64_t records_over_cap = 0;  // records of messages beyond
                                  // kMaxRecordsPerMessage, dropped
  uint64_t plugin_dropped = 0;    // sum over streams of the growth of
                                  // DropCounters ring_full + pool_exhausted +
                                  // export_dropped (first value counts fully)
};

struct JoinConn;  // join_state.h

class RankJoiner {
 public:
  // `clock` must outlive the joiner.
  explicit RankJoiner(Clock* clock, RankJoinerOptions options = {});
  ~RankJoiner();
  RankJoiner(const RankJoiner&) = delete;
  RankJoiner& operator=(const RankJoiner&) = delete;

  // Feeds one message of stream `stream` (any id the caller chooses; a new
  // id starts a new stream). A hello opens the stream (lifecycle
  // STREAM_OPENED); streams without one are accepted (offline input) with
  // pid 0 and global rank -1. A goodbye marks the stream clean.
  // InvalidArgument (naming the field) for a second hello on a stream or a
  // message after the goodbye; the message is then ignored.
  absl::Status Add(uint64_t stream, const v1::StreamTelemetryRequest& request);

  // Emits ops whose completion grace or incomplete timeout has passed (call
  // periodically, e.g. each batch).
  void Poll();

  // The stream closed. Emits all its ops as they are (incomplete ones with
  // state ENQUEUED/STARTED) and a RankLifecycle CLEAN_EXIT (goodbye seen)
  // or DIED, then forgets the stream. With
  // `agent_stopping`, no lifecycle event is emitted for a stream that
  // ended without goodbye (the agent is shutting down, not the rank). With
  // `no_death`, such a stream ends as a CLEAN_EXIT: its process's end
  // releases what it registered upstream but is no death (a process of no
  // job, LocalTenants' anonymous tenant: R18-5).
  void EndStream(uint64_t stream, bool agent_stopping = false,
                 bool no_death = false);

  // Emits every op of every stream as it is (offline end of input).
  void FlushAll();

  // Moves out what was emitted since the last call (appends to `out`).
  void TakeSummaries(std::vector<v1::CollectiveSummary>* out);
  void TakeLifecycle(std::vector<v1::RankLifecycle>* out);
  // Communicators first seen or changed since the last call.
  void TakeCommunicators(std::vector<v1::CommunicatorInfo>* out);

  // Appends one RankProgress per (comm, rank, func) of every open stream,
  // with now_cpu_ns from the clock, plus one with func UNSPECIFIED and no
  // sequence numbers (all 0) for each live communicator in which the rank
  // has not enqueued anything yet.
  void SnapshotProgress(std::vector<v1::RankProgress>* out) const;

  // Communicators of open streams (for re-registration upstream).
  void AllCommunicators(std::vector<v1::CommunicatorInfo>* out) const;

  // Process identity of a stream; nullptr if unknown or sent no hello.
  const v1::ProcessHello* hello(uint64_t stream) const;
  // Latest cumulative DropCounters of a stream; nullptr if none yet.
  const v1::DropCounters* drops(uint64_t stream) const;
  // True if the stream's process is a member of `comm_hash` (with comm rank
  // `rank`, or any rank if rank < 0). comm_hash 0 matches every stream.
  bool StreamInComm(uint64_t stream, uint64_t comm_hash, int32_t rank) const;

  size_t open_streams() const;
  size_t open_ops() const;
  const RankJoinerStats& stats() const { return stats_; }

  struct Stream;  // internal, defined in rank_joiner.cc

 private:
  Stream* GetStream(uint64_t id);
  void EmitOp(Stream* s, uint64_t op_id, bool forced);
  void EmitLifecycle(Stream* s, v1::RankLifecycle::Kind kind);
  // A communicator was finalized/aborted: keep it only for summaries.
  void EndComm(Stream* s, uint64_t comm_hash);
  // Add()'s steps, in order (rank_joiner.cc). `now` is the message's
  // monotonic time; `touched` collects the ops its records reached.
  absl::Status AddHello(Stream* s, const v1::StreamTelemetryRequest& req);
  void AddInitFailures(Stream* s, const v1::StreamTelemetryRequest& req);
  void NoteSequenceAndDrops(Stream* s, const v1::StreamTelemetryRequest& req);
  // True when the message holds more records than one may: they are
  // dropped and counted (hello, drops and goodbye still count).
  bool DropOverCap(uint64_t stream, Stream* s,
                   const v1::StreamTelemetryRequest& req);
  void AddCommunicators(uint64_t stream, Stream* s,
                        const v1::StreamTelemetryRequest& req,
                        std::vector<uint64_t>* ended);
  void AddOpRecords(uint64_t stream, Stream* s,
                    const v1::StreamTelemetryRequest& req, int64_t now,
                    std::vector<uint64_t>* touched);
  void AddKernelChannels(Stream* s, const v1::StreamTelemetryRequest& req,
                         int64_t now, std::vector<uint64_t>* touched);
  void AddProxyRecords(uint64_t stream, Stream* s,
                       const v1::StreamTelemetryRequest& req, int64_t now,
                       std::vector<uint64_t>* touched);
  void AddCompletions(Stream* s, const v1::StreamTelemetryRequest& req,
                      int64_t now, std::vector<uint64_t>* touched);
  // Emits what is complete, parks completed ops still missing children,
  // and pushes out the oldest incomplete ops beyond max_open_ops.
  void EmitCompleted(Stream* s, const std::vector<uint64_t>& touched);
  // An invalid record of `stream`: counted; the first one is logged.
  void Invalid(uint64_t stream, Stream* s, std::string why);
  // The connection slot `index` of op `op_id` (created), or nullptr when
  // the op was emitted already or the index is beyond the per-op or
  // per-stream bounds (counted invalid).
  JoinConn* FindConn(uint64_t stream, Stream* s, uint64_t op_id, uint32_t index,
                     int64_t now);

  Clock* clock_;
  RankJoinerOptions options_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Stream>> streams_;
  std::vector<v1::CollectiveSummary> summaries_;
  std::vector<v1::RankLifecycle> lifecycle_;
  std::vector<v1::CommunicatorInfo> communicators_;
  RankJoinerStats stats_;
};

// NCCL's bus-bandwidth factor for `func` on `n_ranks` ranks (nccl-tests
// PERFORMANCE.md): AllReduce 2(n-1)/n, AllGather/ReduceScatter/AllToAll
// (n-1)/n, others 1. 0 when n_ranks is unknown (<= 0) and the factor
// depends on it.
double BusBandwidthFactor(v1::CollFunc func, int32_t n_ranks);

}  // namespace pitstop::agent

#endif  // PITSTOP_AGENT_RANK_JOINER_H_
