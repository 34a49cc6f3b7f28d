#include "pitstop/logging.h"

#include "absl/strings/str_cat.h"
#include "pitstop/bounded_file.h"
#include "spdlog/sinks/basic_file_sink.h"
#include "spdlog/sinks/stdout_color_sinks.h"

namespace pitstop {

absl::Status SetupLogging(const LoggingOptions& options) {
  const spdlog::level::level_enum level =
      spdlog::level::from_str(options.level);
  // from_str maps unknown names to "off"; only accept "off" when asked for.
  if (level == spdlog::level::off && options.level != "off") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--log-level: unknown log level '", options.level,
        "' (use trace, debug, info, warn, error, critical or off)"));
  }
  std::vector<spdlog::sink_ptr> sinks;
  sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  if (!options.file.empty()) {
    if (absl::Status st =
            CheckAppendableRegularFile(options.file, options.file_flag);
        !st.ok()) {
      return st;
    }
    try {
      sinks.push_back(
          std::make_shared<spdlog::sinks::basic_file_sink_mt>(options.file));
    } catch (const spdlog::spdlog_ex& e) {
      return absl::InvalidArgumentError(
          absl::StrCat(options.file_flag, ": cannot open log file ",
                       options.file, ": ", e.what()));
    }
  }
  auto logger =
      std::make_shared<spdlog::logger>("pitstop", sinks.begin(), sinks.end());
  logger->set_level(level);
  const std::string prefix =
      options.program.empty() ? "" : absl::StrCat("[", options.program, "] ");
  spdlog::set_pattern(
      absl::StrCat("%Y-%m-%dT%H:%M:%S.%e %^%L%$ ", prefix, "[%n] %v"));
  spdlog::set_default_logger(logger);
  spdlog::set_level(level);
  spdlog::flush_on(spdlog::level::warn);
  return absl::OkStatus();
}

std::shared_ptr<spdlog::logger> Logger(std::string_view component) {
  const std::string name(component);
  if (auto existing = spdlog::get(name)) return existing;
  auto base = spdlog::default_logger();
  auto logger = std::make_shared<spdlog::logger>(name, base->sinks().begin(),
                                                 base->sinks().end());
  logger->set_level(base->level());
  // Another thread may have registered it meanwhile; return whichever won.
  try {
    spdlog::register_logger(logger);
  } catch (const spdlog::spdlog_ex&) {
    if (auto existing = spdlog::get(name)) return existing;
  }
  return logger;
}

}  // namespace pitstop
