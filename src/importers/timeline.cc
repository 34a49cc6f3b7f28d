#include "src/importers/timeline.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/importers/import_util.h"

namespace pitstop::importers {
namespace {

using nlohmann::json;

const char* StateName(v1::OpState s) {
  switch (s) {
    case v1::OP_STATE_COMPLETED:
      return "completed";
    case v1::OP_STATE_STARTED:
      return "started";
    default:
      return "enqueued";
  }
}

// The first and last time (ns) of any op that is not derived.
std::pair<uint64_t, uint64_t> TimeSpan(const ImportedJob& job) {
  uint64_t base = UINT64_MAX, last = 0;
  for (const ImportedRank& r : job.ranks) {
    for (const ImportedOp& op : r.ops) {
      if (op.derived) continue;
      for (uint64_t t :
           {op.record.enqueue_start_cpu_ns(), op.start_ns, op.end_ns}) {
        if (t == 0) continue;
        base = std::min(base, t);
        last = std::max(last, t);
      }
    }
  }
  if (base == UINT64_MAX) base = last = 0;
  return {base, last};
}

uint64_t When(const ImportedOp* op) {
  return op->start_ns != 0 ? op->start_ns : op->record.enqueue_start_cpu_ns();
}

// One rank's process: its name and sort index, a thread per track, a slice
// per timed op (never overlapping the track's previous one) or an instant
// for an op with only an enqueue time.
void AddRankEvents(const ImportedRank& r, uint64_t base, json* events) {
  auto us = [base](uint64_t ns) {
    return static_cast<double>(ns - base) / 1000.0;
  };
  const int32_t pid = r.global_rank;
  events->push_back(
      {{"ph", "M"},
       {"name", "process_name"},
       {"pid", pid},
       {"tid", 0},
       {"args",
        {{"name", absl::StrCat("rank ", r.global_rank, " (", r.host, ")")}}}});
  events->push_back({{"ph", "M"},
                     {"name", "process_sort_index"},
                     {"pid", pid},
                     {"tid", 0},
                     {"args", {{"sort_index", r.global_rank}}}});
  std::map<std::string, int> tids;
  std::map<int, double> track_end;
  std::vector<const ImportedOp*> ops;
  for (const ImportedOp& op : r.ops) {
    if (!op.derived) ops.push_back(&op);
  }
  std::stable_sort(ops.begin(), ops.end(),
                   [](const ImportedOp* a, const ImportedOp* b) {
                     return When(a) < When(b);
                   });
  for (const ImportedOp* op : ops) {
    auto [it, fresh] =
        tids.emplace(op->track, static_cast<int>(tids.size()) + 1);
    int tid = it->second;
    if (fresh) {
      events->push_back({{"ph", "M"},
                         {"name", "thread_name"},
                         {"pid", pid},
                         {"tid", tid},
                         {"args", {{"name", op->track}}}});
    }
    json args = {{"seq", op->record.seq_number()},
                 {"func", CollFuncName(op->record.func())},
                 {"state", StateName(op->state)},
                 {"bytes", op->record.bytes()},
                 {"comm_rank", op->record.rank()}};
    if (!op->for_detection) args["matched"] = false;
    std::string name =
        op->name.empty() ? CollFuncName(op->record.func()) : op->name;
    bool timed = op->start_ns != 0 && op->end_ns > op->start_ns;
    if (timed) {
      double start = us(op->start_ns), end = us(op->end_ns);
      double& prev = track_end[tid];
      if (start < prev) start = prev;
      if (end > start) {
        events->push_back({{"ph", "X"},
                           {"name", name},
                           {"cat", "collective"},
                           {"pid", pid},
                           {"tid", tid},
                           {"ts", start},
                           {"dur", end - start},
                           {"args", args}});
        prev = end;
        continue;
      }
    }
    uint64_t t = When(op);
    if (t == 0) continue;
    events->push_back(
        {{"ph", "i"},
         {"s", "t"},
         {"name", absl::StrCat(name, " [", StateName(op->state), "]")},
         {"cat", "collective"},
         {"pid", pid},
         {"tid", tid},
         {"ts", us(t)},
         {"args", args}});
  }
}

// A global instant per fault at the end of the timeline, and one on each
// suspect rank's process.
void AddFaultEvents(const ImportedJob& job,
                    const std::vector<v1::Fault>& faults, double fault_ts,
                    json* events) {
  std::set<int32_t> ranks;
  for (const ImportedRank& r : job.ranks) ranks.insert(r.global_rank);
  for (const v1::Fault& f : faults) {
    std::vector<int32_t> s, v;
    for (const v1::Suspect& x : f.suspects())
      s.push_back(x.global_rank() >= 0 ? x.global_rank() : x.comm_rank());
    for (const v1::Suspect& x : f.victims())
      v.push_back(x.global_rank() >= 0 ? x.global_rank() : x.comm_rank());
    json args = {{"fault_id", f.fault_id()},
                 {"class", FaultClassLabel(f.fault_class())},
                 {"summary", f.summary()},
                 {"communicator", f.comm_name()},
                 {"seq", f.seq_number()},
                 {"suspects", absl::StrJoin(s, ",")},
                 {"victims", absl::StrJoin(v, ",")}};
    std::string name = absl::StrCat("FAULT ", f.fault_id(), ": ",
                                    FaultClassLabel(f.fault_class()));
    int32_t any_pid = job.ranks.empty() ? 0 : job.ranks[0].global_rank;
    events->push_back({{"ph", "i"},
                       {"s", "g"},
                       {"name", name},
                       {"cat", "fault"},
                       {"pid", any_pid},
                       {"tid", 0},
                       {"ts", fault_ts},
                       {"args", args}});
    for (int32_t r : s) {
      if (!ranks.count(r)) continue;
      events->push_back({{"ph", "i"},
                         {"s", "p"},
                         {"name", absl::StrCat("SUSPECT (", f.fault_id(), ")")},
                         {"cat", "fault"},
                         {"pid", r},
                         {"tid", 0},
                         {"ts", fault_ts},
                         {"args", args}});
    }
  }
}

}  // namespace

json BuildTimeline(const ImportedJob& job,
                   const std::vector<v1::Fault>& faults) {
  const auto [base, last] = TimeSpan(job);
  json events = json::array();
  for (const ImportedRank& r : job.ranks) AddRankEvents(r, base, &events);
  AddFaultEvents(job, faults, static_cast<double>(last - base) / 1000.0,
                 &events);
  json doc;
  doc["traceEvents"] = std::move(events);
  doc["displayTimeUnit"] = "ms";
  doc["otherData"] = {{"generator", "pitstop analyze"},
                      {"format", job.format},
                      {"job_id", job.job_id},
                      {"time_base_ns", base}};
  return doc;
}

absl::Status WriteTimeline(const ImportedJob& job,
                           const std::vector<v1::Fault>& faults,
                           const std::string& path) {
  errno = 0;
  std::ofstream out(path, std::ios::trunc);
  if (!out)
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot write the timeline: ",
                     errno != 0 ? std::strerror(errno) : "open failed"));
  out << BuildTimeline(job, faults)
             .dump(-1, ' ', false, json::error_handler_t::replace)
      << "\n";
  out.close();
  if (!out)
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": timeline write failed: ",
                     errno != 0 ? std::strerror(errno) : "stream error"));
  return absl::OkStatus();
}

absl::Status ValidateTraceEvents(const json& doc) {
  if (!doc.is_object())
    return absl::InvalidArgumentError("top level is not an object");
  auto it = doc.find("traceEvents");
  if (it == doc.end() || !it->is_array()) {
    return absl::InvalidArgumentError("no traceEvents array");
  }
  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<double, double>>>
      slices;
  size_t k = 0;
  for (const json& e : *it) {
    auto bad = [k](const std::string& what) {
      return absl::InvalidArgumentError(
          absl::StrCat("traceEvents[", k, "]: ", what));
    };
    if (!e.is_object()) return bad("not an object");
    if (!e.contains("name") || !e["name"].is_string())
      return bad("name missing");
    if (!e.contains("ph") || !e["ph"].is_string()) return bad("ph missing");
    std::string ph = e["ph"];
    if (ph != "X" && ph != "i" && ph != "I" && ph != "M" && ph != "B" &&
        ph != "E" && ph != "s" && ph != "f" && ph != "t") {
      return bad("unknown ph " + ph);
    }
    if (!e.contains("pid") || !e["pid"].is_number_integer())
      return bad("pid not an integer");
    if (!e.contains("tid") || !e["tid"].is_number_integer())
      return bad("tid not an integer");
    if (ph == "M") {
      if (!e.contains("args") || !e["args"].is_object())
        return bad("metadata without args");
    } else {
      if (!e.contains("ts") || !e["ts"].is_number() ||
          e["ts"].get<double>() < 0) {
        return bad("ts missing or negative");
      }
    }
    if (ph == "i" || ph == "I") {
      if (e.contains("s")) {
        std::string s = e["s"];
        if (s != "g" && s != "p" && s != "t")
          return bad("instant scope must be g, p or t");
      }
    }
    if (ph == "X") {
      if (!e.contains("dur") || !e["dur"].is_number() ||
          e["dur"].get<double>() < 0) {
        return bad("X without dur >= 0");
      }
      slices[{e["pid"].get<int64_t>(), e["tid"].get<int64_t>()}].push_back(
          {e["ts"].get<double>(),
           e["ts"].get<double>() + e["dur"].get<double>()});
    }
    ++k;
  }
  for (auto& [track, list] : slices) {
    std::sort(list.begin(), list.end());
    for (size_t i = 1; i < list.size(); ++i) {
      bool nested = list[i].second <= list[i - 1].second;
      if (list[i].first < list[i - 1].second && !nested) {
        return absl::InvalidArgumentError(absl::StrCat(
            "pid ", track.first, " tid ", track.second,
            ": slices overlap without nesting at ts ", list[i].first));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace pitstop::importers
