// Front door of the importers: expands paths, recognises each file's format
// and builds one ImportedJob.
//
//   ImportOptions opts;
//   ASSIGN_OR_RETURN(ImportedJob job, ImportPaths({"dumps/"}, opts));
//
// A directory is one job: its regular files (not recursive) are read, and
// files that are none of the known formats (README, fault_injection.log, ...)
// are skipped with a note; a file named explicitly must be readable and of a
// known format. All files must be of one format. Formats: Flight Recorder
// (pickle or JSON), Kineto / Chrome trace (JSON, gzipped or not), NCCL
// Inspector (JSON Lines). Errors name the file and offset/line.
#ifndef PITSTOP_IMPORTERS_IMPORTER_H_
#define PITSTOP_IMPORTERS_IMPORTER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/importers/imported_job.h"
#include "src/importers/input_file.h"

namespace pitstop::importers {

struct ImportOptions {
  std::string job_id = "imported";
  // Sources without host names place rank r on node r / ranks_per_node.
  int32_t ranks_per_node = 8;
  // Kineto: kernels of one communicator on different ranks are the same
  // collective when their ends are this close (µs).
  double kineto_match_tolerance_us = 500;
  // Caps on what each input file may decompress to.
  DecompressLimits limits;
  // Progress lines for long work ("reading x: 120/800 MB"); may be null.
  std::function<void(const std::string&)> progress;
};

// Most ranks without a file (members of some group) that a job may have:
// each is modelled, and detection state grows with members x absent ranks
// (16384 absent of 16400: about 2.3 GB, 4 s). ImportPaths refuses more with
// InvalidArgument.
inline constexpr size_t kMaxAbsentRanks = 16384;

enum class FileFormat { kUnknown, kFlightRecorder, kKineto, kInspector };

// Recognises a file from its first (decompressed) bytes.
FileFormat DetectFormat(absl::string_view head);

// InvalidArgument naming the file for unreadable or malformed input, and
// when more than kMaxAbsentRanks ranks have no file.
absl::StatusOr<ImportedJob> ImportPaths(const std::vector<std::string>& paths,
                                        const ImportOptions& options);

}  // namespace pitstop::importers

#endif  // PITSTOP_IMPORTERS_IMPORTER_H_
