// Logging setup over spdlog for the daemons and tools (never the in-process
// library, which logs only through NCCL's logger and never on the hot path).
//
// One named logger per component ("agent", "controller.detect", "rpc", ...),
// all sharing the sinks configured by SetupLogging().
#ifndef PITSTOP_LOGGING_H_
#define PITSTOP_LOGGING_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "spdlog/spdlog.h"

namespace pitstop {

struct LoggingOptions {
  // trace, debug, info, warn, error, critical, off.
  std::string level = "info";
  // Log file; empty = stderr only. Only a regular file is opened
  // (CheckAppendableRegularFile); errors name `file_flag`.
  std::string file;
  std::string file_flag = "--log-file";
  // Prefix every line with the program name (useful when many processes share
  // a terminal, as in `pitstop sim`).
  std::string program;
};

// Configures the default sinks and level. Call once from main() before
// threads start. InvalidArgument for an unknown level name.
absl::Status SetupLogging(const LoggingOptions& options);

// Returns the logger for `component`, creating it with the default sinks.
// Thread-safe.
std::shared_ptr<spdlog::logger> Logger(std::string_view component);

}  // namespace pitstop

#endif  // PITSTOP_LOGGING_H_
