#include "src/sim/timeline.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace pitstop::sim {
namespace {

using nlohmann::json;

double Us(int64_t ns) { return ns / 1000.0; }

void AddRankTracks(const Plan& plan, json* events) {
  for (const RankPlan& r : plan.ranks) {
    events->push_back({{"ph", "M"},
                       {"name", "process_name"},
                       {"pid", r.node},
                       {"args", {{"name", HostName(r.node)}}}});
    events->push_back({{"ph", "M"},
                       {"name", "thread_name"},
                       {"pid", r.node},
                       {"tid", r.rank},
                       {"args",
                        {{"name", absl::StrCat("rank ", r.rank, " (GPU ", r.gpu,
                                               ", ", NicName(r.nic), ")")}}}});
    const int64_t end_of_run = std::max(plan.duration_ns, r.finish_ns);
    const int64_t cut = std::min(end_of_run, r.crash_ns);
    for (const OpPlan& op : r.ops) {
      if (op.api_ns >= cut) break;
      const bool hung = op.end_ns() == kNever || op.end_ns() > cut;
      const int64_t end = hung ? cut : op.end_ns();
      const CommDef& c = plan.comms[op.comm];
      json args = {{"comm", c.name},
                   {"seq", op.seq},
                   {"bytes", op.bytes},
                   {"step", op.step}};
      if (!hung) {
        args["kernel_ms"] = (op.end_ns() - op.kernel_start_ns) / 1e6;
      }
      events->push_back(
          {{"ph", "X"},
           {"pid", r.node},
           {"tid", r.rank},
           {"ts", Us(op.api_ns)},
           {"dur", Us(end - op.api_ns)},
           {"name", absl::StrCat(op.func, " ", c.name, hung ? " (stuck)" : "")},
           {"cat", op.eval ? "eval" : "train"},
           {"args", args}});
    }
    if (r.crash_ns < end_of_run) {
      events->push_back({{"ph", "i"},
                         {"s", "t"},
                         {"pid", r.node},
                         {"tid", r.rank},
                         {"ts", Us(r.crash_ns)},
                         {"name", "process crashed (no finalize)"}});
    }
  }
}

}  // namespace

absl::Status WriteTimeline(const Plan& plan,
                           const std::vector<ObservedFault>& faults,
                           const std::string& path) {
  json events = json::array();
  AddRankTracks(plan, &events);
  for (const FaultTruth& t : plan.truths) {
    events.push_back({{"ph", "i"},
                      {"s", "g"},
                      {"pid", 0},
                      {"tid", 0},
                      {"ts", Us(t.onset_ns)},
                      {"cat", "injected"},
                      {"name", absl::StrCat("injected: ", t.Describe())}});
  }
  for (const ObservedFault& f : faults) {
    std::string suspects;
    for (const v1::Suspect& s : f.fault.suspects()) {
      absl::StrAppend(&suspects, suspects.empty() ? "" : "; ",
                      DescribeSuspect(s));
    }
    events.push_back(
        {{"ph", "i"},
         {"s", "g"},
         {"pid", 0},
         {"tid", 0},
         {"ts", Us(f.first_seen_ns)},
         {"cat", "pitstop"},
         {"name",
          absl::StrCat("pitstop: ", ShortClassName(f.fault.fault_class()), " ",
                       f.fault.fault_id())},
         {"args", {{"summary", f.fault.summary()}, {"suspects", suspects}}}});
  }
  json doc = {{"traceEvents", events},
              {"displayTimeUnit", "ms"},
              {"otherData",
               {{"scenario", plan.scenario.name},
                {"description", plan.scenario.description}}}};
  std::ofstream out(path);
  if (!out) {
    return absl::InternalError(absl::StrCat("cannot write timeline ", path));
  }
  out << doc.dump() << "\n";
  if (!out.good()) {
    return absl::InternalError(absl::StrCat("error writing timeline ", path));
  }
  return absl::OkStatus();
}

}  // namespace pitstop::sim
