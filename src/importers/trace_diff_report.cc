// Table and JSON forms of a trace diff (see trace_diff.h).
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/importers/trace_diff.h"

namespace pitstop::importers {
namespace {

using nlohmann::json;

std::string Shorten(const std::string& name, size_t width) {
  if (name.size() <= width || width < 8) return name;
  return name.substr(0, width - 3) + "...";
}

std::string SideLine(const char* label, const TraceProfile& p) {
  std::string rank = p.rank >= 0 ? absl::StrCat(" (rank ", p.rank, ")") : "";
  return absl::StrFormat(
      "%s: %s%s, window %.1f-%.1f ms, %u of %u events in the window\n", label,
      p.file, rank, p.window_start_ms, p.window_end_ms, p.kept, p.events);
}

json StatsJson(const DurationStats& s) {
  return json{{"count", s.count},
              {"total_us", s.total_us},
              {"p50_us", s.p50_us},
              {"p99_us", s.p99_us},
              {"max_us", s.max_us}};
}

json SideJson(const TraceProfile& p) {
  return json{{"file", p.file},
              {"rank", p.rank},
              {"events", p.events},
              {"events_in_window", p.kept},
              {"window_start_ms", p.window_start_ms},
              {"window_end_ms", p.window_end_ms}};
}

size_t RowsShown(const TraceDiff& diff, size_t top) {
  return top == 0 ? diff.rows.size() : std::min(top, diff.rows.size());
}

}  // namespace

std::string FormatTraceDiff(const TraceProfile& a, const TraceProfile& b,
                            const TraceDiff& diff, size_t top,
                            size_t name_width) {
  std::string out = SideLine("A", a) + SideLine("B", b);
  if (diff.spans_differ) {
    absl::StrAppend(&out,
                    "note: the windows differ in length by more than 10%; "
                    "compare per-call times (p50/p99) rather than totals\n");
  }
  absl::StrAppend(&out, "\n");
  absl::StrAppendFormat(&out, "%-11s %12s %12s %12s %9s %9s\n", "kind",
                        "A total ms", "B total ms", "delta ms", "A count",
                        "B count");
  for (const TraceKindTotals& k : diff.kinds) {
    absl::StrAppendFormat(
        &out, "%-11s %12.3f %12.3f %+12.3f %9u %9u\n",
        TraceEventKindName(k.kind), k.a.total_us / 1e3, k.b.total_us / 1e3,
        (k.b.total_us - k.a.total_us) / 1e3, k.a.count, k.b.count);
  }
  size_t shown = RowsShown(diff, top);
  absl::StrAppendFormat(&out,
                        "\nLargest differences (B - A), %u of %u names:\n",
                        shown, diff.rows.size());
  absl::StrAppendFormat(&out, "%-10s %-*s %15s %21s %12s %19s %19s\n", "kind",
                        static_cast<int>(name_width), "name", "count A/B",
                        "total ms A/B", "delta ms", "p50 us A/B", "p99 us A/B");
  for (size_t i = 0; i < shown; ++i) {
    const TraceDiffRow& r = diff.rows[i];
    absl::StrAppendFormat(
        &out,
        "%-10s %-*s %7u/%-7u %10.3f/%-10.3f %+12.3f %9.1f/%-9.1f "
        "%9.1f/%-9.1f\n",
        TraceEventKindName(r.kind), static_cast<int>(name_width),
        Shorten(r.name, name_width), r.a.count, r.b.count, r.a.total_us / 1e3,
        r.b.total_us / 1e3, r.delta_total_us() / 1e3, r.a.p50_us, r.b.p50_us,
        r.a.p99_us, r.b.p99_us);
  }
  return out;
}

json TraceDiffJson(const TraceProfile& a, const TraceProfile& b,
                   const TraceDiff& diff, size_t top) {
  json kinds = json::array();
  for (const TraceKindTotals& k : diff.kinds) {
    kinds.push_back({{"kind", TraceEventKindName(k.kind)},
                     {"a", StatsJson(k.a)},
                     {"b", StatsJson(k.b)},
                     {"delta_total_us", k.b.total_us - k.a.total_us}});
  }
  json rows = json::array();
  for (size_t i = 0; i < RowsShown(diff, top); ++i) {
    const TraceDiffRow& r = diff.rows[i];
    rows.push_back({{"kind", TraceEventKindName(r.kind)},
                    {"name", r.name},
                    {"a", StatsJson(r.a)},
                    {"b", StatsJson(r.b)},
                    {"delta_count", r.delta_count()},
                    {"delta_total_us", r.delta_total_us()},
                    {"delta_p50_us", r.delta_p50_us()},
                    {"delta_p99_us", r.delta_p99_us()}});
  }
  return json{{"a", SideJson(a)},
              {"b", SideJson(b)},
              {"spans_differ", diff.spans_differ},
              {"kinds", std::move(kinds)},
              {"rows", std::move(rows)},
              {"rows_total", diff.rows.size()}};
}

}  // namespace pitstop::importers
