#include "src/importers/trace_diff.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <unordered_map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "src/controller/detect/robust_stats.h"
#include "src/importers/import_util.h"
#include "src/importers/input_file.h"
#include "src/importers/trace_event_stream.h"

namespace pitstop::importers {
namespace {

using nlohmann::json;

TraceEventKind KindOf(absl::string_view cat) {
  if (cat == "kernel") return TraceEventKind::kKernel;
  if (cat == "gpu_memcpy" || cat == "gpu_memset")
    return TraceEventKind::kMemory;
  if (cat == "cpu_op") return TraceEventKind::kOperator;
  if (cat == "python_function") return TraceEventKind::kPython;
  if (cat == "cuda_runtime" || cat == "cuda_driver") {
    return TraceEventKind::kRuntime;
  }
  if (cat == "user_annotation" || cat == "gpu_user_annotation") {
    return TraceEventKind::kAnnotation;
  }
  return TraceEventKind::kOther;
}

// One complete event, its name interned (traces repeat a few thousand names
// over millions of events).
struct Span {
  TraceEventKind kind;
  uint32_t name;
  double ts_us;
  double dur_us;
};

// Keeps every complete event with a finite, non-negative duration; the
// window is applied once the trace's first timestamp is known.
class SpanCollector final : public TraceEventSink {
 public:
  void Event(const json& e) override {
    if (!e.is_object()) return;
    auto ph = e.find("ph");
    if (ph == e.end() || !ph->is_string() ||
        ph->get_ref<const std::string&>() != "X") {
      return;
    }
    double ts = Number(e, "ts");
    double dur = Number(e, "dur");
    if (!std::isfinite(ts) || !std::isfinite(dur) || dur < 0) return;
    first_ts_ = std::min(first_ts_, ts);
    last_ts_ = std::max(last_ts_, ts + dur);
    spans_.push_back(
        {KindOf(String(e, "cat")), Intern(String(e, "name")), ts, dur});
  }
  void Distributed(const json& info) override {
    auto it = info.find("rank");
    if (it != info.end() && it->is_number_integer()) {
      rank_ = static_cast<int32_t>(SaturatingInt(it->get<double>()));
    }
  }

  const std::vector<Span>& spans() const { return spans_; }
  const std::vector<std::string>& names() const { return names_; }
  double first_ts() const { return spans_.empty() ? 0 : first_ts_; }
  double last_ts() const { return spans_.empty() ? 0 : last_ts_; }
  int32_t rank() const { return rank_; }

 private:
  static double Number(const json& e, const char* key) {
    auto it = e.find(key);
    return it != e.end() && it->is_number() ? it->get<double>() : NAN;
  }
  static std::string String(const json& e, const char* key) {
    auto it = e.find(key);
    if (it == e.end() || !it->is_string()) return "";
    // Kernel names are long C++ templates that differ late: keep them
    // whole (up to a bound) so distinct kernels stay distinct.
    return CleanText(it->get_ref<const std::string&>(), kMaxNameBytes);
  }
  static constexpr size_t kMaxNameBytes = 16 << 10;
  uint32_t Intern(std::string name) {
    auto [it, inserted] =
        ids_.emplace(std::move(name), static_cast<uint32_t>(names_.size()));
    if (inserted) names_.push_back(it->first);
    return it->second;
  }

  std::vector<Span> spans_;
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<std::string> names_;
  double first_ts_ = INFINITY;
  double last_ts_ = -INFINITY;
  int32_t rank_ = -1;
};

bool ParseMs(absl::string_view text, double* out) {
  return absl::SimpleAtod(text, out) && std::isfinite(*out) && *out >= 0;
}

}  // namespace

const char* TraceEventKindName(TraceEventKind kind) {
  switch (kind) {
    case TraceEventKind::kKernel:
      return "kernel";
    case TraceEventKind::kMemory:
      return "memory";
    case TraceEventKind::kOperator:
      return "operator";
    case TraceEventKind::kPython:
      return "python";
    case TraceEventKind::kRuntime:
      return "runtime";
    case TraceEventKind::kAnnotation:
      return "annotation";
    case TraceEventKind::kOther:
      break;
  }
  return "other";
}

absl::StatusOr<TraceWindow> ParseTraceWindow(const std::string& text) {
  size_t colon = text.find(':');
  if (colon == std::string::npos ||
      text.find(':', colon + 1) != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "window '", text, "': expected START:END in ms (e.g. 0:500, 200:)"));
  }
  TraceWindow w;
  absl::string_view start(text.data(), colon);
  absl::string_view end(text.data() + colon + 1, text.size() - colon - 1);
  if ((!start.empty() && !ParseMs(start, &w.start_ms)) ||
      (!end.empty() && !ParseMs(end, &w.end_ms))) {
    return absl::InvalidArgumentError(
        absl::StrCat("window '", text,
                     "': START and END must be non-negative numbers of ms"));
  }
  if (w.end_ms <= w.start_ms) {
    return absl::InvalidArgumentError(
        absl::StrCat("window '", text, "': END must be after START"));
  }
  return w;
}

absl::StatusOr<TraceProfile> ProfileTrace(const std::string& path,
                                          const TraceWindow& window) {
  absl::StatusOr<std::unique_ptr<InputStream>> in = InputStream::Open(path);
  if (!in.ok()) return in.status();
  SpanCollector collector;
  absl::StatusOr<uint64_t> events =
      StreamTraceEvents(in->get(), path, &collector);
  if (!events.ok()) return events.status();
  TraceProfile p;
  p.file = path;
  p.rank = collector.rank();
  p.events = *events;
  p.first_ts_us = collector.first_ts();
  double span_ms = (collector.last_ts() - collector.first_ts()) / 1e3;
  p.window_start_ms = std::min(window.start_ms, span_ms);
  p.window_end_ms = std::min(window.end_ms, span_ms);
  for (const Span& s : collector.spans()) {
    double start_ms = (s.ts_us - p.first_ts_us) / 1e3;
    if (start_ms < window.start_ms || start_ms >= window.end_ms) continue;
    p.durations[{s.kind, collector.names()[s.name]}].push_back(s.dur_us);
    ++p.kept;
  }
  return p;
}

DurationStats ComputeStats(std::vector<double> durations_us) {
  DurationStats s;
  s.count = durations_us.size();
  for (double d : durations_us) {
    s.total_us += d;
    s.max_us = std::max(s.max_us, d);
  }
  s.p50_us = controller::Quantile(durations_us, 0.5);
  s.p99_us = controller::Quantile(std::move(durations_us), 0.99);
  return s;
}

TraceDiff DiffProfiles(const TraceProfile& a, const TraceProfile& b) {
  TraceDiff diff;
  std::map<std::pair<TraceEventKind, std::string>, TraceDiffRow> rows;
  std::vector<double> kind_a[kTraceEventKinds], kind_b[kTraceEventKinds];
  bool present[kTraceEventKinds] = {};
  auto add = [&](const TraceProfile& p, bool side_a) {
    for (const auto& [key, durs] : p.durations) {
      TraceDiffRow& row = rows[key];
      row.kind = key.first;
      row.name = key.second;
      (side_a ? row.a : row.b) = ComputeStats(durs);
      int k = static_cast<int>(key.first);
      present[k] = true;
      auto& dst = side_a ? kind_a[k] : kind_b[k];
      dst.insert(dst.end(), durs.begin(), durs.end());
    }
  };
  add(a, true);
  add(b, false);
  for (auto& [key, row] : rows) diff.rows.push_back(std::move(row));
  std::sort(diff.rows.begin(), diff.rows.end(),
            [](const TraceDiffRow& x, const TraceDiffRow& y) {
              double dx = std::fabs(x.delta_total_us());
              double dy = std::fabs(y.delta_total_us());
              if (dx != dy) return dx > dy;
              double tx = std::max(x.a.total_us, x.b.total_us);
              double ty = std::max(y.a.total_us, y.b.total_us);
              if (tx != ty) return tx > ty;
              return x.name < y.name;
            });
  for (int k = 0; k < kTraceEventKinds; ++k) {
    if (!present[k]) continue;
    diff.kinds.push_back({static_cast<TraceEventKind>(k),
                          ComputeStats(std::move(kind_a[k])),
                          ComputeStats(std::move(kind_b[k]))});
  }
  double span_a = a.window_end_ms - a.window_start_ms;
  double span_b = b.window_end_ms - b.window_start_ms;
  diff.spans_differ =
      std::fabs(span_a - span_b) > 0.1 * std::max(span_a, span_b);
  return diff;
}

}  // namespace pitstop::importers
