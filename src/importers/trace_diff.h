// Differential profiling of PyTorch profiler (Kineto) traces: what one rank,
// or one time window, spends its time on compared with another (PerfTracker's
// differential observability; HTA's trace diff).
//
//   ASSIGN_OR_RETURN(TraceProfile a, ProfileTrace("rank-0.json.gz", {}));
//   ASSIGN_OR_RETURN(TraceProfile b, ProfileTrace("rank-1.json.gz", {}));
//   TraceDiff diff = DiffProfiles(a, b);   // rows, largest |delta| first
//
// Complete events ("ph": "X") are grouped by kind and name: GPU kernels
// (cat "kernel"), memory copies/sets (gpu_memcpy, gpu_memset), operators
// (cpu_op), Python functions (python_function), CUDA runtime calls
// (cuda_runtime, cuda_driver) and user annotations (user_annotation). Other
// categories count under "other". Durations are in µs, as Kineto writes them.
#ifndef PITSTOP_IMPORTERS_TRACE_DIFF_H_
#define PITSTOP_IMPORTERS_TRACE_DIFF_H_

#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace pitstop::importers {

enum class TraceEventKind {
  kKernel,
  kMemory,
  kOperator,
  kPython,
  kRuntime,
  kAnnotation,
  kOther,
};
inline constexpr int kTraceEventKinds = 7;

// "kernel", "memory", "operator", "python", "runtime", "annotation", "other".
const char* TraceEventKindName(TraceEventKind kind);

// A time window relative to the trace's first event, in ms: events that start
// in [start_ms, end_ms) are kept.
struct TraceWindow {
  double start_ms = 0;
  double end_ms = std::numeric_limits<double>::infinity();
};

// Parses "START:END" (ms; either side may be empty: ":500", "200:").
absl::StatusOr<TraceWindow> ParseTraceWindow(const std::string& text);

struct TraceProfile {
  std::string file;
  int32_t rank = -1;       // distributedInfo.rank, -1 when absent
  uint64_t events = 0;     // trace events in the file (all kinds)
  uint64_t kept = 0;       // complete events inside the window
  double first_ts_us = 0;  // first event of the trace (its time origin)
  double window_start_ms = 0;
  double window_end_ms = 0;  // clipped to the trace's last event
  // (kind, name) -> durations in µs of the events in the window.
  std::map<std::pair<TraceEventKind, std::string>, std::vector<double>>
      durations;
};

// Reads `path` (gzip or not) and keeps the complete events that start inside
// `window`. InvalidArgument naming the file and offset for bad input.
absl::StatusOr<TraceProfile> ProfileTrace(const std::string& path,
                                          const TraceWindow& window);

struct DurationStats {
  uint64_t count = 0;
  double total_us = 0;
  double p50_us = 0;  // nearest rank
  double p99_us = 0;
  double max_us = 0;
};

DurationStats ComputeStats(std::vector<double> durations_us);

struct TraceDiffRow {
  TraceEventKind kind = TraceEventKind::kOther;
  std::string name;
  DurationStats a;
  DurationStats b;
  double delta_total_us() const { return b.total_us - a.total_us; }
  int64_t delta_count() const {
    return static_cast<int64_t>(b.count) - static_cast<int64_t>(a.count);
  }
  double delta_p50_us() const { return b.p50_us - a.p50_us; }
  double delta_p99_us() const { return b.p99_us - a.p99_us; }
};

struct TraceKindTotals {
  TraceEventKind kind = TraceEventKind::kOther;
  DurationStats a;
  DurationStats b;
};

struct TraceDiff {
  // Every (kind, name) present on either side, largest |delta_total_us|
  // first (ties: larger total first, then name).
  std::vector<TraceDiffRow> rows;
  // One entry per kind present on either side, in enum order.
  std::vector<TraceKindTotals> kinds;
  // Window lengths differ by more than 10%: totals are not directly
  // comparable (the report says so).
  bool spans_differ = false;
};

TraceDiff DiffProfiles(const TraceProfile& a, const TraceProfile& b);

// The report as a table: both sides, totals per kind, then the `top` largest
// differences (0 = all). Names longer than `name_width` are shortened.
std::string FormatTraceDiff(const TraceProfile& a, const TraceProfile& b,
                            const TraceDiff& diff, size_t top,
                            size_t name_width = 60);

// The same as JSON, every field present (zeros too): {"a": side, "b": side,
// "spans_differ", "kinds": [...], "rows": [...], "rows_total"}; times in µs
// (window bounds in ms).
nlohmann::json TraceDiffJson(const TraceProfile& a, const TraceProfile& b,
                             const TraceDiff& diff, size_t top);

}  // namespace pitstop::importers

#endif  // PITSTOP_IMPORTERS_TRACE_DIFF_H_
