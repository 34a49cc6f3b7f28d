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

absl::Status Feed(const ImportedJob& job, agent::RankJoiner* joiner,
                  controller::DetectionEngine* engine, HostMap* hosts) {
  std::set<std::string> registered;
  for (size_t i = 0; i < job.ranks.size(); ++i) {
    const ImportedRank& rank = job.ranks[i];
    if (registered.insert(rank.host).second) {
      v1::NodeRegistration reg;
      reg.set_host(rank.host);
      reg.set_agent_id("imported");
      RETURN_IF_ERROR(engine->AddNode(reg));
    }
    for (const v1::CommunicatorInfo& c : rank.comms) {
      (*hosts)[{c.comm_hash(), c.rank()}] = rank.host;
    }
    for (const v1::StreamTelemetryRequest& batch : ToTelemetry(job, rank)) {
      RETURN_IF_ERROR(joiner->Add(i + 1, batch));
    }
  }
  joiner->Poll();
  for (size_t i = 0; i < job.ranks.size(); ++i) {
    if (job.ranks[i].absent) joiner->EndStream(i + 1);
  }
  std::vector<v1::CommunicatorInfo> comms;
  joiner->TakeCommunicators(&comms);
  for (const v1::CommunicatorInfo& c : comms) {
    RETURN_IF_ERROR(engine->AddCommunicator(c.host(), c));
  }
  std::vector<v1::RankLifecycle> lifecycle;
  joiner->TakeLifecycle(&lifecycle);
  for (const v1::RankLifecycle& l : lifecycle) {
    std::string host = "imported";
    if (!l.communicators().empty()) host = l.communicators(0).host();
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

const char* ClassName(v1::FaultClass c) {
  switch (c) {
    case v1::FAULT_CLASS_COMM_HANG:
      return "comm-hang";
    case v1::FAULT_CLASS_NON_COMM_HANG:
      return "non-comm-hang";
    case v1::FAULT_CLASS_COMM_SLOW:
      return "comm-slow";
    case v1::FAULT_CLASS_NON_COMM_SLOW:
      return "non-comm-slow";
    case v1::FAULT_CLASS_PROCESS_DIED:
      return "process-died";
    default:
      return "none";
  }
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
  HostMap hosts;
  RETURN_IF_ERROR(Feed(job, &joiner, engine.get(), &hosts));
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
  return result;
}

Verdict VerdictFromFaults(const std::vector<v1::Fault>& faults,
                          const std::vector<int32_t>& absent) {
  Verdict v;
  std::set<int32_t> suspects, victims;
  int best_rank = -1;
  for (const v1::Fault& f : faults) {
    for (const v1::Suspect& s : f.suspects()) suspects.insert(RankOf(s));
    for (const v1::Suspect& s : f.victims()) victims.insert(RankOf(s));
    // Class: faults with suspects first; among them hangs and deaths over
    // slowness.
    int rank = f.suspects_size() > 0 ? 10 : 0;
    switch (f.fault_class()) {
      case v1::FAULT_CLASS_PROCESS_DIED:
        rank += 5;
        break;
      case v1::FAULT_CLASS_NON_COMM_HANG:
        rank += 4;
        break;
      case v1::FAULT_CLASS_COMM_HANG:
        rank += 3;
        break;
      case v1::FAULT_CLASS_NON_COMM_SLOW:
        rank += 2;
        break;
      default:
        rank += 1;
        break;
    }
    if (rank > best_rank) {
      best_rank = rank;
      v.fault_class = f.fault_class();
    }
    if (f.suspects_size() > 0 &&
        (f.fault_class() == v1::FAULT_CLASS_NON_COMM_HANG ||
         f.fault_class() == v1::FAULT_CLASS_COMM_HANG)) {
      v.hung_collectives.push_back(absl::StrCat(CollFuncName(f.func()), " seq ",
                                                f.seq_number(), " in ",
                                                f.comm_name()));
    }
  }
  for (int32_t s : suspects) victims.erase(s);
  for (int32_t a : absent) victims.erase(a);
  v.suspects.assign(suspects.begin(), suspects.end());
  v.victims.assign(victims.begin(), victims.end());
  std::sort(v.hung_collectives.begin(), v.hung_collectives.end());
  return v;
}

std::string FormatVerdictTable(const ImportedJob& job,
                               const std::vector<v1::Fault>& faults,
                               const Verdict& verdict,
                               const std::string& tool) {
  std::string out;
  size_t present = 0;
  for (const ImportedRank& r : job.ranks) present += !r.absent;
  absl::StrAppend(
      &out, tool, ": ", job.format, ", ", present, " rank(s)",
      job.world_size > 0 ? absl::StrCat(" of ", job.world_size) : "", "\n");
  for (const std::string& w : job.warnings)
    absl::StrAppend(&out, "warning: ", w, "\n");
  absl::StrAppend(&out, "\nVERDICT: ", ClassName(verdict.fault_class), "\n");
  absl::StrAppend(
      &out, "  suspects: ",
      verdict.suspects.empty() ? "none" : absl::StrJoin(verdict.suspects, ","),
      "\n");
  absl::StrAppend(
      &out, "  victims:  ",
      verdict.victims.empty() ? "none" : absl::StrJoin(verdict.victims, ","),
      "\n");
  for (const std::string& h : verdict.hung_collectives) {
    absl::StrAppend(&out, "  hung:     ", h, "\n");
  }
  // Faults with suspects first, then by number (F2 before F10).
  std::vector<const v1::Fault*> order;
  for (const v1::Fault& f : faults) order.push_back(&f);
  auto number = [](const v1::Fault* f) {
    uint64_t n = 0;
    for (char c : f->fault_id()) {
      if (c >= '0' && c <= '9') n = n * 10 + static_cast<uint64_t>(c - '0');
    }
    return n;
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](const v1::Fault* a, const v1::Fault* b) {
                     bool sa = a->suspects_size() > 0;
                     bool sb = b->suspects_size() > 0;
                     return sa != sb ? sa : number(a) < number(b);
                   });
  auto row = [](absl::string_view a, absl::string_view b, absl::string_view c,
                absl::string_view d, absl::string_view e, absl::string_view f,
                absl::string_view g) {
    return absl::StrFormat("%-6s %-14s %-10s %-48s %-22s %-14s %s\n", a, b, c,
                           d, e, f, g);
  };
  if (!faults.empty()) {
    absl::StrAppend(&out, "\n",
                    row("ID", "CLASS", "STATE", "COMMUNICATOR", "OP",
                        "SUSPECTS", "VICTIMS"));
  }
  for (const v1::Fault* fp : order) {
    const v1::Fault& f = *fp;
    std::vector<int32_t> s, v;
    for (const v1::Suspect& x : f.suspects()) s.push_back(RankOf(x));
    for (const v1::Suspect& x : f.victims()) v.push_back(RankOf(x));
    std::string op = f.seq_number() > 0 ? absl::StrCat(CollFuncName(f.func()),
                                                       "#", f.seq_number())
                                        : "-";
    absl::StrAppend(&out, row(f.fault_id(), ClassName(f.fault_class()),
                              v1::FaultState_Name(f.state()).substr(12),
                              f.comm_name().substr(0, 48), op,
                              s.empty() ? "-" : absl::StrJoin(s, ","),
                              v.empty() ? "-" : absl::StrJoin(v, ",")));
  }
  if (!faults.empty()) absl::StrAppend(&out, "\nEVIDENCE\n");
  for (const v1::Fault* f : order) {
    absl::StrAppend(&out, "  ", f->fault_id(), ": ", f->summary(), "\n");
  }
  if (!job.notes.empty()) absl::StrAppend(&out, "\nNOTES\n");
  for (const std::string& n : job.notes) absl::StrAppend(&out, "  ", n, "\n");
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
  out["verdict"] = v;
  json fj = json::array();
  for (const v1::Fault& f : faults) {
    std::string text;
    google::protobuf::util::JsonPrintOptions po;
    po.preserve_proto_field_names = true;
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
