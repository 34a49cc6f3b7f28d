// The common, format-neutral result of every importer: per-rank records of
// the kind the in-process library produces (telemetry.proto), plus what the
// timeline needs. Everything downstream (join, detection, replay, timeline)
// works from this.
//
// Clocks: *_ns times of an ImportedOp are the rank's node clock as the source
// recorded it (Flight Recorder: wall clock ns; Kineto: trace µs x 1000;
// Inspector: µs x 1000). They are compared only within one rank, except by
// the Kineto pairing, which the data README allows (ends align within
// ~0.3 ms on one host) and which says so in its evidence.
#ifndef PITSTOP_IMPORTERS_IMPORTED_JOB_H_
#define PITSTOP_IMPORTERS_IMPORTED_JOB_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "pitstop/v1/agent.pb.h"
#include "pitstop/v1/common.pb.h"
#include "pitstop/v1/telemetry.pb.h"

namespace pitstop::importers {

// One rank's part in one operation.
struct ImportedOp {
  // op_id (unique per rank), comm_hash, rank (comm rank), kind, func,
  // seq_number, count, bytes, datatype, peer, enqueue_start_cpu_ns.
  v1::OpRecord record;
  // ENQUEUED (FR "scheduled"), STARTED or COMPLETED.
  v1::OpState state = v1::OP_STATE_ENQUEUED;
  // Start / end of the operation's execution (kernel) on the node clock, ns;
  // 0 = unknown.
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  // Source's own name for it ("nccl:all_to_all", kernel name, ...).
  std::string name;
  // Timeline track within the rank ("stream 84", process group name, ...).
  std::string track;
  // True for ops the importer derived from counters (FR pg_status) rather
  // than read as individual records; they have no times.
  bool derived = false;
  // False for ops that cannot be judged (no partner on every member, a
  // communicator with absent members): shown in the timeline only, not sent
  // to detection (ToTelemetry skips them).
  bool for_detection = true;
};

struct ImportedRank {
  int32_t global_rank = -1;
  std::string host;
  uint32_t pid = 0;
  // The file the rank came from (for messages).
  std::string file;
  // Communicators this rank is a member of (source SOURCE_IMPORTED, global
  // ranks filled when the source says).
  std::vector<v1::CommunicatorInfo> comms;
  std::vector<ImportedOp> ops;
  // A member of some communicator whose file is missing: it carries only
  // its memberships, and its telemetry stream ends with a goodbye so that
  // detection treats it as absent (exited) instead of "never enqueued".
  bool absent = false;
  // Communicator creations that failed in this process (from NCCL's log):
  // sent as the library would (StreamTelemetryRequest.init_failures).
  std::vector<v1::CommInitFailure> init_failures;
  // When the rank's file was last written, on its node clock (ns; 0 =
  // unknown): Inspector's latest dump_timestamp_us. Readers whose files
  // carry no such time leave it 0 (log_ends.h then uses the latest record).
  uint64_t log_end_ns = 0;
  // How often the source flushed the file (ns; 0 = unknown or on demand):
  // Inspector's dump interval, the median gap between its successive
  // dump_timestamp_us values.
  uint64_t flush_interval_ns = 0;
};

// A collective matched across ranks by an importer (Kineto: end times).
struct MatchedCollective {
  std::string comm_name;
  uint64_t comm_hash = 0;
  uint64_t seq_number = 0;
  std::vector<int32_t> global_ranks;
  std::vector<double> duration_us;
  std::vector<double> end_us;
  // The rank that started last (shortest duration): the others waited for it.
  int32_t late_rank = -1;
  // Longest duration minus shortest (µs): how long the earliest rank waited.
  double max_wait_us = 0;
};

struct ImportedJob {
  // "flight-recorder", "kineto" or "inspector".
  std::string format;
  std::string job_id;
  // World size as the source states it (FR: default_pg size; Kineto:
  // distributedInfo.world_size); 0 when unknown.
  int32_t world_size = 0;
  // Sorted by global rank.
  std::vector<ImportedRank> ranks;
  // Global ranks expected (world size / communicator membership) but absent.
  std::vector<int32_t> missing_ranks;
  // Non-fatal problems, each naming the file (and line / offset).
  std::vector<std::string> warnings;
  // Free-form lines describing what the importer derived (e.g. Kineto
  // pairings), shown with the verdict.
  std::vector<std::string> notes;
  std::vector<MatchedCollective> matched;
};

// Completes a job after a reader built it: gives ranks without a pid a
// synthetic one (1000000 + global rank; the engine tells processes apart
// by host and pid) and adds an absent rank (see ImportedRank::absent) for
// every communicator member without a file, placed on host_of(rank).
void AddAbsentRanks(ImportedJob* job,
                    const std::function<std::string(int32_t)>& host_of);

// Builds the telemetry one rank's in-process library would have streamed:
// a hello (global rank, host, job id, load_mode "imported"), the
// communicators (KIND_INIT), the ops, their completions and (when GPU times
// are known) one kernel channel each; split into batches of at most
// `max_records` ops. batch_seq counts from 1. The last batch carries no
// goodbye (a dump says nothing about how the process ended), except for an
// absent rank, whose single batch ends with one. Collectives of a
// (communicator, function) in `cuts` with a sequence number above its cut
// are left out (log_ends.h).
//
// Keyed by function too: NCCL numbers collectives per communicator *and*
// function (comm->seqNumber[func], Inspector's coll_sn), and detection keeps
// progress per (communicator, function).
using SeqKey = std::pair<uint64_t, int32_t>;  // comm_hash, v1::CollFunc
using SeqCuts = std::map<SeqKey, uint64_t>;   // -> highest seq kept
SeqKey SeqKeyOf(const v1::OpRecord& record);
std::vector<v1::StreamTelemetryRequest> ToTelemetry(
    const ImportedJob& job, const ImportedRank& rank, size_t max_records = 4096,
    const SeqCuts* cuts = nullptr);

// True when `op` is sent to detection: ImportedOp::for_detection and not
// above its (communicator, function)'s cut.
bool ForDetection(const ImportedOp& op, const SeqCuts* cuts);

// Clears for_detection of every op above its (communicator, function)'s cut
// (for paths that send ImportedOps themselves, such as replay).
void ApplySeqCuts(const SeqCuts& cuts, ImportedJob* job);

}  // namespace pitstop::importers

#endif  // PITSTOP_IMPORTERS_IMPORTED_JOB_H_
