// Reader of PyTorch profiler (Kineto) traces: Chrome-trace JSON, gzipped or
// not, parsed as a stream (SAX) so traces of hundreds of MB need memory only
// for the NCCL events they hold.
//
// Kept per trace: distributedInfo (rank, world_size, pg_config), NCCL kernels
// (cat "kernel", name starting "ncclKernel_" / "ncclDevKernel_"; ts/dur in
// µs, args.stream, and when present "Collective name", "In msg nelems",
// "Out msg nelems", "Group size", "dtype", "Process Group Name" /
// "Description" / "Ranks"), the CPU-side c10d:: / nccl: ops (name, ts, dur,
// Input Dims/type -> message size) and the CUDA launch calls that tie a
// kernel (args.correlation) to the CPU op that issued it.
//
// Building a job (several traces of one run):
//   - communicator = the kernel's process group when the trace names it,
//     else its stream (one communicator per stream, members = the ranks whose
//     traces use that stream, with a warning: membership is inferred);
//   - kernels of one communicator are matched across ranks on end time
//     (within `match_tolerance_us`): in a synchronising collective every rank
//     ends together and the late starter is the one the others waited for.
//     Matched groups become collectives with sequence numbers 1..N in time
//     order; a kernel without a partner on every present rank (sampling) is
//     kept for the timeline but not used for detection;
//   - a communicator with a single present rank cannot be judged (warning).
// Errors name the file and the byte offset (decompressed) of bad JSON; a
// truncated gzip names the compressed offset.
#ifndef PITSTOP_IMPORTERS_KINETO_READER_H_
#define PITSTOP_IMPORTERS_KINETO_READER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/importers/imported_job.h"
#include "src/importers/input_file.h"

namespace pitstop::importers {

struct KinetoKernel {
  std::string name;
  double ts_us = 0;
  double dur_us = 0;
  int64_t stream = -1;
  int64_t device = -1;
  int64_t correlation = -1;
  std::string coll_name;  // args "Collective name", or the issuing c10d op
  uint64_t in_nelems = 0;
  uint64_t out_nelems = 0;
  int64_t group_size = 0;
  std::string dtype;
  std::string pg_name;
  std::string pg_desc;
  std::vector<int32_t> pg_ranks;
  uint64_t msg_bytes = 0;  // from the issuing CPU op's inputs, when linked
  double cpu_ts_us = 0;    // issuing CPU op start, when linked
};

struct KinetoTrace {
  std::string file;
  int32_t rank = -1;
  int32_t world_size = 0;
  uint32_t pid = 0;
  std::vector<KinetoKernel> kernels;
  uint64_t events = 0;  // trace events seen (all kinds)
  std::vector<std::string> warnings;
};

// Parses one trace from `in` (see InputStream). `progress`, if set, is
// called about every 16 MiB with (compressed bytes read, file size).
absl::StatusOr<KinetoTrace> ParseKinetoTrace(
    InputStream* in, const std::string& file,
    const std::function<void(uint64_t, uint64_t)>& progress = nullptr);

// True if the first bytes look like a Chrome trace ("traceEvents").
bool LooksLikeKineto(absl::string_view head);

struct KinetoJobOptions {
  std::string job_id = "imported";
  int32_t ranks_per_node = 8;
  double match_tolerance_us = 500;
};

absl::StatusOr<ImportedJob> BuildKinetoJob(std::vector<KinetoTrace> traces,
                                           const KinetoJobOptions& options);

}  // namespace pitstop::importers

#endif  // PITSTOP_IMPORTERS_KINETO_READER_H_
