// NCCL's own log (NCCL_DEBUG=INFO or WARN) and the launcher's output around
// it, read for one thing: communicator creation that failed (NVIDIA/nccl
// #426: "NET/IB : No device found", "Call to connect returned Connection
// refused", ncclSystemError from ncclCommInitRank). Such a job never ran a
// collective, so no Flight Recorder dump or trace says anything; the log is
// the only post-mortem record of it.
//
// Lines used (others are skipped):
//   HOST:PID:TID [DEV] NCCL INFO ncclCommInitRank comm 0x.. rank R nranks N
//       ... - Init START / Init COMPLETE
//   HOST:PID:TID [DEV] file.cc:LINE NCCL WARN TEXT
//   HOST:PID:TID [DEV] NCCL INFO file.cc:LINE -> CODE     (error unwinding)
//   ... ncclSystemError / "unhandled system error" / ncclInternalError ...
//       (PyTorch's DistBackendError, any prefix)
// A "[rankN]:" prefix (torchrun --tee / PyTorch) or the digits at the end
// of the file name give the global rank.
#ifndef PITSTOP_IMPORTERS_NCCL_LOG_READER_H_
#define PITSTOP_IMPORTERS_NCCL_LOG_READER_H_

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/importers/imported_job.h"

namespace pitstop::importers {

// Whether the start of a file looks like NCCL's log output.
bool LooksLikeNcclLog(absl::string_view head);

// One process as its log lines describe it.
struct NcclLogProcess {
  std::string host;
  uint32_t pid = 0;
  int32_t global_rank = -1;
  // From "Init START": the rank in the communicator being created, its size
  // and the API.
  int32_t comm_rank = -1;
  int32_t n_ranks = -1;
  std::string call;
  bool init_started = false;
  bool init_completed = false;
  // An error unwinding ("init.cc:1266 -> 2") seen in init or bootstrap code.
  bool init_trace = false;
  // ncclResult_t of the failure (first code seen); 0 = none.
  int32_t result = 0;
  // NCCL WARN texts in order (at most 8 kept).
  std::vector<std::string> warnings;
  // Line (1-based) of the first error seen, for messages.
  int64_t error_line = 0;

  // Creation failed: an error code and no "Init COMPLETE", in creation
  // (Init START seen, or the error unwound through init/bootstrap code).
  bool InitFailed() const;
  // The most telling WARN ("No device found", "Connection refused", ...).
  std::string ErrorText() const;
};

struct NcclLog {
  std::string file;
  std::vector<NcclLogProcess> processes;
};

// Reads a log; `file` names it in errors and gives the rank fallback.
// Error only for unreadable input (a log has no syntax to violate).
absl::StatusOr<NcclLog> ParseNcclLog(std::istream* in, const std::string& file);

// Adds the failed creations of `logs` to `job`: to the rank with the same
// global rank (present or absent), else as a new rank with no
// communicators. Ranks without a known global rank are numbered after the
// job's. Returns how many failures were added.
int AddNcclLogFailures(const std::vector<NcclLog>& logs, ImportedJob* job);

}  // namespace pitstop::importers

#endif  // PITSTOP_IMPORTERS_NCCL_LOG_READER_H_
