// Reader of NCCL Inspector logs (ext-profiler/inspector in NVIDIA/nccl): one
// file per process, JSON Lines, one object per collective per communicator:
//   {"header": {"id": "0x7f8c496ae9f661", "rank": 2, "n_ranks": 8,
//               "nnodes": 1},
//    "metadata": {"inspector_output_format_version": "v4.0",
//                 "dump_timestamp_us": ..., "hostname": "...", "pid": ...},
//    "coll_perf": {"coll": "AllReduce", "coll_sn": 1407,
//                  "coll_msg_size_bytes": ..., "coll_exec_time_us": 61974,
//                  "coll_timing_source": "kernel_gpu", "coll_algobw_gbs": ..,
//                  "coll_busbw_gbs": ..,
//                  "event_trace_ts": {"coll_start_ts": us, "coll_stop_ts": us,
//                     "kernel_events": [{"channel_id", "kernel_start_ts",
//                                        "kernel_stop_ts", ...}]}}}   (verbose)
// Pretty-printed objects (several lines each) are accepted too.
//
// Mapping: header.id -> communicator (comm_hash = the id; members are comm
// ranks 0..n_ranks-1; global ranks unknown unless one file per comm rank of
// the same id says so: the global rank is taken from the file's rank in the
// communicator with the most ranks, i.e. the world), coll_sn -> seq_number,
// exec time -> kernel duration (verbose kernel timestamps when present, else
// an interval ending at the dump timestamp). Host and pid from metadata.
#ifndef PITSTOP_IMPORTERS_INSPECTOR_READER_H_
#define PITSTOP_IMPORTERS_INSPECTOR_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/importers/imported_job.h"
#include "src/importers/input_file.h"

namespace pitstop::importers {

struct InspectorRecord {
  uint64_t comm_id = 0;
  int32_t rank = -1;
  int32_t n_ranks = 0;
  int32_t n_nodes = 0;
  std::string hostname;
  uint32_t pid = 0;
  std::string coll;
  uint64_t seq = 0;
  uint64_t msg_bytes = 0;
  double exec_time_us = 0;
  std::string timing_source;
  double busbw_gbs = 0;
  uint64_t dump_ts_us = 0;
  uint64_t start_us = 0;  // verbose: coll/kernel start
  uint64_t stop_us = 0;   // verbose: last kernel stop
  int64_t line = 0;
};

struct InspectorFile {
  std::string file;
  std::vector<InspectorRecord> records;
  std::vector<std::string> warnings;
};

bool LooksLikeInspector(absl::string_view head);

// Parses one file. A line that is not valid JSON is an error naming the
// file and line; objects without header/coll_perf are skipped with a warning.
absl::StatusOr<InspectorFile> ParseInspectorFile(InputStream* in,
                                                 const std::string& file);

struct InspectorJobOptions {
  std::string job_id = "imported";
};

absl::StatusOr<ImportedJob> BuildInspectorJob(
    std::vector<InspectorFile> files, const InspectorJobOptions& options);

}  // namespace pitstop::importers

#endif  // PITSTOP_IMPORTERS_INSPECTOR_READER_H_
