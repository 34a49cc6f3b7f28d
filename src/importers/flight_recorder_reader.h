// Reader of PyTorch Flight Recorder dumps (ProcessGroupNCCL's ring of recent
// collectives, written on a watchdog timeout or on demand): the pickle
// (protocol 2+, decoded by the safe decoder, pickle_decoder.h) and the JSON
// form newer PyTorch can write. Both hold a dict:
//   version      "2.9"
//   pg_config    {pg name: {name, desc, ranks: "[0, 1]" or [0, 1]}}
//   pg_status    {pg id: {last_enqueued_collective, last_started_collective,
//                         last_completed_collective}}
//   entries      [{record_id, pg_id, process_group: (name, desc),
//                  collective_seq_id, p2p_seq_id, profiling_name
//                  ("nccl:all_to_all", "nccl:send 0->3"), time_created_ns,
//                  input_sizes, input_dtypes, state ("scheduled" | "started"
//                  | "completed"), time_discovered_{started,completed}_ns,
//                  timeout_ms, is_p2p, ...}]
//
// Mapping to pitstop records (imported_job.h):
//   - each process group -> a communicator (comm_hash = StableHash of name
//     and member list, equal on every member; comm_name "DESC (pg NAME)";
//     global_ranks = the group's ranks);
//   - each entry -> an op (collectives: seq = collective_seq_id; P2P: seq =
//     p2p_seq_id, peer from the profiling name) in state ENQUEUED /
//     STARTED / COMPLETED;
//   - pg_status counters (keyed by the rank-local pg id, mapped to names via
//     the entries, or by creation order when the entries do not say) ->
//     derived ops for every sequence number between the lowest completed and
//     the highest enqueued of the group across the dumps, so "enqueued up to
//     N, completed up to M" reaches the joiner as ops. Groups that carry
//     point-to-point traffic are excluded: there pg_status counts P2P
//     sequence numbers, which are per rank and not comparable.
//
// The dump's own rank: a top-level "rank" when present, else the trailing
// digits of the file name (`_dump_<rank>`, as PyTorch names them), else the
// one rank every group of the dump contains.
#ifndef PITSTOP_IMPORTERS_FLIGHT_RECORDER_READER_H_
#define PITSTOP_IMPORTERS_FLIGHT_RECORDER_READER_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/importers/imported_job.h"

namespace pitstop::importers {

struct FrProcessGroup {
  std::string name;
  std::string desc;
  std::vector<int32_t> ranks;
};

struct FrStatus {
  int64_t last_enqueued = -1;
  int64_t last_started = -1;
  int64_t last_completed = -1;
};

struct FrEntry {
  int64_t record_id = 0;
  int64_t pg_id = -1;
  std::string pg_name;
  std::string pg_desc;
  int64_t collective_seq_id = 0;
  int64_t p2p_seq_id = 0;
  std::string profiling_name;
  std::string state;  // "scheduled", "started", "completed"
  bool is_p2p = false;
  uint64_t time_created_ns = 0;
  uint64_t time_started_ns = 0;
  uint64_t time_completed_ns = 0;
  uint64_t elements = 0;  // sum over input tensors of their element counts
  std::string dtype;
  int64_t timeout_ms = 0;
};

struct FlightRecorderDump {
  std::string file;
  int32_t rank = -1;
  std::string version;
  std::string nccl_version;
  std::map<std::string, FrProcessGroup> groups;  // by pg name
  std::map<std::string, FrStatus> status;        // by pg name (mapped)
  std::vector<FrEntry> entries;
  std::vector<std::string> warnings;
  // pg_config names (keys) whose description is malformed (e.g. ranks not a
  // list of ranks in [0, 2^20)): such groups are judged for no rank.
  std::set<std::string> malformed_groups;
};

// True if `bytes` look like a Flight Recorder dump (pickle, or JSON with
// "pg_config"/"entries" near the start).
bool LooksLikeFlightRecorder(absl::string_view bytes);

// Parses one dump. `file` names it in errors ("<file>: offset N: ..." for
// the pickle, "<file>: line L: ..." for JSON). InvalidArgument for a
// forbidden opcode, a truncated file, or a dict without pg_config/entries.
absl::StatusOr<FlightRecorderDump> ParseFlightRecorderDump(
    absl::string_view bytes, const std::string& file);

struct FrJobOptions {
  std::string job_id = "imported";
  // Hosts are not in the dumps: rank r is placed on "fr-node<r / n>".
  int32_t ranks_per_node = 8;
  // Cap on derived sequence numbers per group (oldest dropped, warned).
  int64_t max_window = 4096;
};

// Builds the job from the dumps of one hang (any order; duplicates of a rank
// are an error). Ranks named by the groups but without a dump are listed in
// missing_ranks with a warning.
absl::StatusOr<ImportedJob> BuildFlightRecorderJob(
    std::vector<FlightRecorderDump> dumps, const FrJobOptions& options);

}  // namespace pitstop::importers

#endif  // PITSTOP_IMPORTERS_FLIGHT_RECORDER_READER_H_
