#include "src/importers/analysis.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "pitstop/clock.h"
#include "pitstop/status_macros.h"
#include "src/agent/rank_joiner.h"
#include "src/controller/detect/detection_engine.h"
#include "src/importers/import_util.h"

namespace pitstop::importers {
namespace {

using nlohmann::json;

// Host of each (comm_hash, comm rank), for summaries and progress.
using HostMap = std::map<std::pair<uint64_t, int32_t>, std::string>;

absl::Status Feed(const ImportedJob& job, const SeqCuts& cuts,
                  agent::RankJoiner* joiner,
                  controller::DetectionEngine* engine, HostMap* hosts) {
  std::set<std::string> registered;
  for (size_t i = 0; i < job.ranks.size(); ++i) {
    const ImportedRank& rank = job.ranks[i];
    // A rank without a file left no data: like a rank whose telemetry never
    // started, it is known only from its peers' member lists. Only a hang
    // that waits for it makes it a suspect.
    if (rank.absent && rank.init_failures.empty()) continue;
    if (registered.insert(rank.host).second) {
      v1::NodeRegistration reg;
      reg.set_host(rank.host);
      reg.set_agent_id("imported");
      RETURN_IF_ERROR(engine->AddNode(reg));
    }
    for (const v1::CommunicatorInfo& c : rank.comms) {
      (*hosts)[{c.comm_hash(), c.rank()}] = rank.host;
    }
    for (const v1::StreamTelemetryRequest& batch :
         ToTelemetry(job, rank, 4096, &cuts)) {
      RETURN_IF_ERROR(joiner->Add(i + 1, batch));
    }
  }
  joiner->Poll();
  std::vector<v1::CommunicatorInfo> comms;
  joiner->TakeCommunicators(&comms);
  for (const v1::CommunicatorInfo& c : comms) {
    RETURN_IF_ERROR(engine->AddCommunicator(c.host(), c));
  }
  std::vector<v1::RankLifecycle> lifecycle;
  joiner->TakeLifecycle(&lifecycle);
  for (const v1::RankLifecycle& l : lifecycle) {
    std::string host = "imported";
    if (!l.communicators().empty()) {
      host = l.communicators(0).host();
    } else {
      for (const ImportedRank& r : job.ranks) {
        if (r.pid == l.pid() && !r.host.empty()) host = r.host;
      }
    }
    RETURN_IF_ERROR(engine->AddLifecycle(host, l));
  }
  std::vector<v1::CollectiveSummary> summaries;
  joiner->TakeSummaries(&summaries);
  for (const v1::CollectiveSummary& s : summaries) {
    RETURN_IF_ERROR(engine->AddSummary((*hosts)[{s.comm_hash(), s.rank()}], s));
  }
  return absl::OkStatus();
}

absl::Status FeedProgress(const agent::RankJoiner& joiner,
                          controller::DetectionEngine* engine, HostMap* hosts) {
  std::vector<v1::RankProgress> progress;
  joiner.SnapshotProgress(&progress);
  for (const v1::RankProgress& p : progress) {
    RETURN_IF_ERROR(
        engine->AddProgress((*hosts)[{p.comm_hash(), p.rank()}], p));
  }
  return absl::OkStatus();
}

void Collect(const controller::CycleResult& r,
             std::map<std::string, v1::Fault>* open) {
  for (const v1::Fault& f : r.faults) {
    if (f.state() == v1::FAULT_STATE_RESOLVED) {
      open->erase(f.fault_id());
    } else {
      (*open)[f.fault_id()] = f;
    }
  }
}

int32_t RankOf(const v1::Suspect& s) {
  return s.global_rank() >= 0 ? s.global_rank() : s.comm_rank();
}

const char* ClassName(v1::FaultClass c) { return FaultClassLabel(c); }

// Higher = more likely the cause: hangs and deaths over slowness.
int ClassWeight(v1::FaultClass c) {
  switch (c) {
    case v1::FAULT_CLASS_CONFIG:
      return 6;  // the job never started as configured: explains the rest
    case v1::FAULT_CLASS_PROCESS_DIED:
      return 5;
    case v1::FAULT_CLASS_NON_COMM_HANG:
    case v1::FAULT_CLASS_MISMATCH:
      return 4;
    case v1::FAULT_CLASS_COMM_HANG:
      return 3;
    case v1::FAULT_CLASS_NON_COMM_SLOW:
      return 2;
    default:
      return 1;
  }
}

// Primary faults first: with suspects, more suspects, heavier class, then by
// number (F2 before F10).
bool PrimaryFirst(const v1::Fault& a, const v1::Fault& b) {
  auto number = [](const v1::Fault& f) {
    uint64_t n = 0;
    for (char c : f.fault_id()) {
      if (c >= '0' && c <= '9') n = n * 10 + static_cast<uint64_t>(c - '0');
    }
    return n;
  };
  bool sa = a.suspects_size() > 0, sb = b.suspects_size() > 0;
  if (sa != sb) return sa;
  if (a.suspects_size() != b.suspects_size())
    return a.suspects_size() > b.suspects_size();
  int wa = ClassWeight(a.fault_class()), wb = ClassWeight(b.fault_class());
  if (wa != wb) return wa > wb;
  return number(a) < number(b);
}

// A hang blamed on members that sent nothing (hang_detector.cc).
bool LeftNoData(const v1::Fault& f) {
  return f.evidence_size() > 0 &&
         f.evidence(0).values().count("members_without_data") > 0;
}

// Offline there is no one to ask for deep profiling: drop that remark.
std::string OfflineSummary(std::string s) {
  for (const std::string cut :
       {" (deep profiling asked)", "(deep profiling asked)"}) {
    size_t pos;
    while ((pos = s.find(cut)) != std::string::npos) s.erase(pos, cut.size());
  }
  return s;
}

}  // namespace

v1::JobPolicy ImportedJobPolicy() {
  v1::JobPolicy p = controller::DefaultJobPolicy();
  p.set_warmup_collectives(2);
  p.set_persistence_n(1);
  p.set_persistence_m(1);
  // Replay runs on a real clock: a short floor keeps it to seconds.
  p.set_hang_timeout_floor_ms(1000);
  return p;
}

LogEndOptions LogEndOptionsOf(const v1::JobPolicy& policy) {
  LogEndOptions o;
  o.hang_timeout_floor_ns =
      static_cast<int64_t>(policy.hang_timeout_floor_ms()) * 1'000'000;
  o.hang_timeout_multiplier = policy.hang_timeout_multiplier();
  return o;
}

absl::StatusOr<AnalysisResult> AnalyzeJob(const ImportedJob& job,
                                          const AnalysisOptions& options) {
  FakeClock clock;
  agent::RankJoiner joiner(&clock);
  controller::DetectionEngine::Options eo;
  ASSIGN_OR_RETURN(auto engine,
                   controller::DetectionEngine::Create(&clock, eo));
  v1::JobPolicy policy = ImportedJobPolicy();
  policy.MergeFrom(options.policy);
  RETURN_IF_ERROR(engine->SetJobPolicy(job.job_id, policy).status());
  // Records above where some rank's log merely ends are not judged; what a
  // member's file lacks but it completed is filled in (log_ends.h).
  LogEndReport ends = JudgeLogEnds(job, LogEndOptionsOf(policy));
  ImportedJob filled;
  if (!ends.fills.empty()) {
    filled = job;
    ApplyLogEnds(ends, &filled);
  }
  HostMap hosts;
  RETURN_IF_ERROR(Feed(ends.fills.empty() ? job : filled, ends.cuts, &joiner,
                       engine.get(), &hosts));
  RETURN_IF_ERROR(FeedProgress(joiner, engine.get(), &hosts));
  std::map<std::string, v1::Fault> open;
  Collect(engine->RunCycle(), &open);
  // Let windows close and hang timeouts pass (twice, to confirm).
  const int kSteps = 6;
  for (int k = 0; k < kSteps; ++k) {
    clock.Advance(options.settle / kSteps);
    RETURN_IF_ERROR(FeedProgress(joiner, engine.get(), &hosts));
    Collect(engine->RunCycle(), &open);
  }
  AnalysisResult result;
  for (auto& [id, f] : open) result.faults.push_back(f);
  std::vector<int32_t> absent;
  for (const ImportedRank& r : job.ranks) {
    if (r.absent) absent.push_back(r.global_rank);
  }
  result.verdict = VerdictFromFaults(result.faults, absent);
  result.verdict.log_ends = std::move(ends.ends);
  return result;
}

bool Verdict::CannotTell() const {
  if (fault_class != v1::FAULT_CLASS_UNSPECIFIED) return false;
  for (const LogEnd& e : log_ends) {
    if (e.judgement == LogEndJudgement::kCannotTell) return true;
  }
  return false;
}

Verdict VerdictFromFaults(const std::vector<v1::Fault>& faults,
                          const std::vector<int32_t>& absent) {
  Verdict v;
  std::set<int32_t> suspects, victims;
  std::vector<const v1::Fault*> order;
  // A rank that left no data is the suspect only when nothing measured
  // explains the hang: with measured suspects elsewhere, a rank without a
  // dump may just as well be one of their victims.
  bool measured = false;
  for (const v1::Fault& f : faults) {
    measured |= f.suspects_size() > 0 && !LeftNoData(f);
  }
  for (const v1::Fault& f : faults) {
    if (!measured || !LeftNoData(f)) order.push_back(&f);
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const v1::Fault* a, const v1::Fault* b) {
                     return PrimaryFirst(*a, *b);
                   });
  if (!order.empty()) v.fault_class = order.front()->fault_class();
  for (const v1::Fault* fp : order) {
    const v1::Fault& f = *fp;
    for (const v1::Suspect& s : f.suspects()) suspects.insert(RankOf(s));
    for (const v1::Suspect& s : f.victims()) victims.insert(RankOf(s));
    if (f.suspects_size() > 0 &&
        (f.fault_class() == v1::FAULT_CLASS_NON_COMM_HANG ||
         f.fault_class() == v1::FAULT_CLASS_COMM_HANG ||
         f.fault_class() == v1::FAULT_CLASS_MISMATCH || LeftNoData(f))) {
      v.hung_collectives.push_back(absl::StrCat(CollFuncName(f.func()), " seq ",
                                                f.seq_number(), " in ",
                                                f.comm_name()));
    }
  }
  for (int32_t s : suspects) victims.erase(s);
  for (int32_t a : absent) victims.erase(a);
  v.suspects.assign(suspects.begin(), suspects.end());
  v.victims.assign(victims.begin(), victims.end());
  return v;
}

std::string FormatVerdictTable(const ImportedJob& job,
                               const std::vector<v1::Fault>& faults,
                               const Verdict& verdict, const std::string& tool,
                               bool verbose) {
  std::string out;
  size_t present = 0;
  std::set<int32_t> absent;
  for (const ImportedRank& r : job.ranks) {
    present += !r.absent;
    if (r.absent) absent.insert(r.global_rank);
  }
  absl::StrAppend(
      &out, tool, ": ", job.format, ", ", present, " rank(s)",
      job.world_size > 0 ? absl::StrCat(" of ", job.world_size) : "", "\n");
  for (const std::string& w : job.warnings)
    absl::StrAppend(&out, "warning: ", w, "\n");
  absl::StrAppend(
      &out, "\nVERDICT: ",
      verdict.CannotTell() ? "cannot tell" : ClassName(verdict.fault_class),
      "\n");
  absl::StrAppend(
      &out, "  suspects: ",
      verdict.suspects.empty() ? "none" : RankRanges(verdict.suspects), "\n");
  absl::StrAppend(
      &out, "  victims:  ",
      verdict.victims.empty() ? "none" : RankRanges(verdict.victims), "\n");
  // The hung list is in primary-first order already; the first is the key.
  for (size_t k = 0; k < verdict.hung_collectives.size(); ++k) {
    absl::StrAppend(&out, k == 0 ? "  hung:     " : "            ",
                    verdict.hung_collectives[k], "\n");
  }
  absl::StrAppend(&out, FormatLogEnds(verdict.log_ends, verbose));
  std::vector<const v1::Fault*> primary, secondary;
  for (const v1::Fault& f : faults) {
    (f.suspects_size() > 0 ? primary : secondary).push_back(&f);
  }
  auto by_rank = [](const v1::Fault* a, const v1::Fault* b) {
    return PrimaryFirst(*a, *b);
  };
  std::stable_sort(primary.begin(), primary.end(), by_rank);
  std::stable_sort(secondary.begin(), secondary.end(), by_rank);
  // Suspect-less faults are usually the consequences (groups stuck behind
  // the primary fault): one line, unless -v.
  std::vector<const v1::Fault*> shown = primary;
  if (verbose || primary.empty()) {
    shown.insert(shown.end(), secondary.begin(), secondary.end());
  } else if (!secondary.empty()) {
    std::map<std::string, int> by_class;
    std::set<std::string> comms;
    for (const v1::Fault* f : secondary) {
      ++by_class[ClassName(f->fault_class())];
      comms.insert(f->comm_name());
    }
    std::vector<std::string> parts;
    for (const auto& [c, n] : by_class)
      parts.push_back(absl::StrCat(n, " ", c));
    absl::StrAppend(&out, "  also:     ", secondary.size(),
                    " fault(s) without suspects (", absl::StrJoin(parts, ", "),
                    ") in ", comms.size(),
                    " other process group(s), stuck behind it (details: -v "
                    "or -o json)\n");
  }
  auto row = [](absl::string_view a, absl::string_view b, absl::string_view c,
                absl::string_view d, absl::string_view e, absl::string_view f,
                absl::string_view g) {
    return absl::StrFormat("%-6s %-14s %-10s %-48s %-22s %-14s %s\n", a, b, c,
                           d, e, f, g);
  };
  if (!shown.empty()) {
    absl::StrAppend(&out, "\n",
                    row("ID", "CLASS", "STATE", "COMMUNICATOR", "OP",
                        "SUSPECTS", "VICTIMS"));
  }
  for (const v1::Fault* fp : shown) {
    const v1::Fault& f = *fp;
    std::vector<int32_t> s, v;
    for (const v1::Suspect& x : f.suspects()) s.push_back(RankOf(x));
    for (const v1::Suspect& x : f.victims()) {
      if (!absent.count(RankOf(x)))
        v.push_back(RankOf(x));  // no dump: not a victim
    }
    std::sort(s.begin(), s.end());
    std::sort(v.begin(), v.end());
    std::string op = f.seq_number() > 0 ? absl::StrCat(CollFuncName(f.func()),
                                                       "#", f.seq_number())
                                        : "-";
    absl::StrAppend(&out, row(f.fault_id(), ClassName(f.fault_class()),
                              v1::FaultState_Name(f.state()).substr(12),
                              f.comm_name().substr(0, 48), op,
                              s.empty() ? "-" : RankRanges(s),
                              v.empty() ? "-" : RankRanges(v)));
  }
  if (!shown.empty()) {
    absl::StrAppend(&out,
                    "\nEVIDENCE (durations such as \"stalled 10 s ago\" are "
                    "on the analysis clock, which runs past the data's end)\n");
  }
  for (const v1::Fault* f : shown) {
    absl::StrAppend(&out, "  ", f->fault_id(), ": ",
                    OfflineSummary(f->summary()), "\n");
  }
  size_t kMaxNotes = 20;
  if (!job.notes.empty()) absl::StrAppend(&out, "\nNOTES\n");
  for (size_t k = 0; k < job.notes.size(); ++k) {
    if (!verbose && k == kMaxNotes) {
      absl::StrAppend(&out, "  ... ", job.notes.size() - kMaxNotes,
                      " more note(s) (-v or -o json)\n");
      break;
    }
    absl::StrAppend(&out, "  ", job.notes[k], "\n");
  }
  return out;
}

nlohmann::json VerdictJson(const ImportedJob& job,
                           const std::vector<v1::Fault>& faults,
                           const Verdict& verdict) {
  json out;
  out["format"] = job.format;
  out["job_id"] = job.job_id;
  json ranks = json::array();
  for (const ImportedRank& r : job.ranks) {
    if (!r.absent) ranks.push_back(r.global_rank);
  }
  out["ranks"] = ranks;
  out["world_size"] = job.world_size;
  out["missing_ranks"] = job.missing_ranks;
  json v;
  v["fault_class"] = ClassName(verdict.fault_class);
  v["suspects"] = verdict.suspects;
  v["victims"] = verdict.victims;
  v["hung_collectives"] = verdict.hung_collectives;
  v["cannot_tell"] = verdict.CannotTell();
  v["log_ends"] = LogEndsJson(verdict.log_ends);
  out["verdict"] = v;
  json fj = json::array();
  for (const v1::Fault& f : faults) {
    std::string text;
    google::protobuf::util::JsonPrintOptions po;
    po.preserve_proto_field_names = true;
    po.always_print_primitive_fields = true;  // rank 0 / GPU 0 included
    if (google::protobuf::util::MessageToJsonString(f, &text, po).ok()) {
      fj.push_back(json::parse(text, nullptr, false));
    }
  }
  out["faults"] = fj;
  out["warnings"] = job.warnings;
  out["notes"] = job.notes;
  json matched = json::array();
  for (const MatchedCollective& m : job.matched) {
    matched.push_back({{"communicator", m.comm_name},
                       {"seq", m.seq_number},
                       {"ranks", m.global_ranks},
                       {"duration_us", m.duration_us},
                       {"late_rank", m.late_rank},
                       {"max_wait_us", m.max_wait_us}});
  }
  out["matched"] = matched;
  return out;
}

}  // namespace pitstop::importers
