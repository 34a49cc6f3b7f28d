// pitstopctl actions [--job J]: what the controller did and why, newest
// first, built from the existing read RPCs (docs/controller.md,
// "pitstopctl actions"): migrations with their outcome (ListMigrations),
// the leavers drained by their commit, the sync and multi-LoRA policies'
// decisions (ListJobs / GetJob), faults the controller marked MITIGATING
// (ListFaults) and nodes drained by an operator (ListNodes).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "tools/pitstopctl/commands.h"
#include "tools/pitstopctl/ctl_client.h"
#include "tools/pitstopctl/ctl_format.h"

namespace pitstop::ctl {
namespace {

// One row. kind: migration, drain, sync, lora, fault.
struct Action {
  uint64_t time_unix_ns = 0;  // 0: not recorded (an operator's drain)
  std::string job_id;
  std::string kind;
  std::string what;
  std::string outcome;
  std::string by;
  std::string why;
  std::string ref;  // M1, F3, directive 4, a host
};

std::string Lower(const std::string& name, const std::string& prefix) {
  return absl::AsciiStrToLower(ShortEnum(name, prefix));
}

// The drain reason a commit gives the leaver (MigrationService).
std::string MigratedOffNote(const v1::Migration& m) {
  return absl::StrCat("migrated off by ", m.migration_id(), " (job ",
                      m.job_id(), ") to ", m.joiner_host());
}

void AddMigrations(const v1::ListMigrationsResponse& r,
                   std::vector<Action>* out) {
  for (const v1::Migration& m : r.migrations()) {
    Action a;
    a.time_unix_ns =
        m.finished_unix_ns() ? m.finished_unix_ns() : m.created_unix_ns();
    a.job_id = m.job_id();
    a.kind = "migration";
    a.what = absl::StrCat("migrate ", m.leaver_host(), " -> ", m.joiner_host(),
                          m.from_replica() ? " (state from a replica)" : "");
    a.outcome = Lower(v1::MigrationState_Name(m.state()), "MIGRATION_STATE_");
    a.by = m.requested_by();
    a.why = m.abort_reason().empty()
                ? m.reason()
                : absl::StrCat(m.reason(), m.reason().empty() ? "" : "; ",
                               "aborted: ", m.abort_reason());
    a.ref = m.migration_id();
    out->push_back(a);
    if (m.state() != v1::MIGRATION_STATE_COMMITTED) continue;
    Action d;
    d.time_unix_ns = m.finished_unix_ns();
    d.job_id = m.job_id();
    d.kind = "drain";
    d.what = absl::StrCat("drain ", m.leaver_host());
    d.outcome = "drained";
    d.by = "controller";
    d.why = MigratedOffNote(m);
    d.ref = m.migration_id();
    out->push_back(d);
  }
}

std::string Mode(v1::SyncMode m) {
  return m == v1::SYNC_MODE_UNSPECIFIED
             ? "-"
             : Lower(v1::SyncMode_Name(m), "SYNC_MODE_");
}

void AddPolicyDecisions(const v1::Job& j, std::vector<Action>* out) {
  for (const v1::SyncDecision& d : j.sync().decisions()) {
    Action a;
    a.time_unix_ns = d.time_unix_ns();
    a.job_id = j.job_id();
    a.kind = "sync";
    a.what =
        absl::StrCat("switch ", Mode(d.from_mode()), " -> ", Mode(d.to_mode()));
    a.outcome = d.sent() ? "sent" : "advised";
    a.by = absl::StrCat("sync policy ",
                        Lower(v1::SyncPolicy_Name(d.policy()), "SYNC_POLICY_"));
    a.why = d.reason();
    if (d.sent()) a.ref = absl::StrCat("directive ", d.directive_id());
    out->push_back(a);
  }
  for (const v1::LoraDecision& d : j.lora().decisions()) {
    Action a;
    a.time_unix_ns = d.time_unix_ns();
    a.job_id = j.job_id();
    a.kind = "lora";
    a.what =
        absl::StrFormat("reschedule (%.1f -> %.1f samples/s)",
                        d.current_samples_per_s(), d.estimated_samples_per_s());
    a.outcome = d.sent() ? "sent" : "advised";
    a.by = absl::StrCat("lora policy ",
                        Lower(v1::LoraPolicy_Name(d.policy()), "LORA_POLICY_"));
    a.why = d.reason();
    if (d.sent()) a.ref = absl::StrCat("directive ", d.directive_id());
    out->push_back(a);
  }
}

void AddMitigatedFaults(const v1::ListFaultsResponse& r,
                        std::vector<Action>* out) {
  for (const v1::Fault& f : r.faults()) {
    if (f.state() != v1::FAULT_STATE_MITIGATING) continue;
    Action a;
    a.time_unix_ns = f.updated_unix_ns();
    a.job_id = f.job_id();
    a.kind = "fault";
    a.what = absl::StrCat(
        "mitigate ", f.fault_id(), " (",
        Lower(v1::FaultClass_Name(f.fault_class()), "FAULT_CLASS_"), ")");
    a.outcome = "mitigating";
    a.by = "controller";
    a.why = f.resolution_note();
    a.ref = f.fault_id();
    out->push_back(a);
  }
}

// Drains not made by a migration's commit: an operator's (DrainNode). The
// controller does not record when.
void AddOperatorDrains(const std::vector<v1::Node>& nodes,
                       std::vector<Action>* out) {
  for (const v1::Node& n : nodes) {
    if (n.state() != v1::NODE_STATE_DRAINED ||
        absl::StartsWith(n.drain_reason(), "migrated off by ")) {
      continue;
    }
    Action a;
    a.kind = "drain";
    a.what = absl::StrCat("drain ", n.host());
    a.outcome = "drained";
    a.by = "operator";
    a.why = n.drain_reason();
    a.ref = n.host();
    out->push_back(a);
  }
}

// `key` of a journal record when it is a string, else "".
std::string Str(const nlohmann::json& r, const char* key) {
  const auto it = r.find(key);
  return it != r.end() && it->is_string() ? it->get<std::string>() : "";
}

// The controller's action journal (JSON lines of ActionRecordJson: hooks
// and Slurm calls on fault changes). Empty on success, else why, naming the
// file and line.
std::string AddJournal(const std::string& path, const std::string& job,
                       std::vector<Action>* out) {
  std::ifstream in(path);
  if (!in) return absl::StrCat(path, ": cannot be read");
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    const nlohmann::json r = nlohmann::json::parse(line, nullptr, false);
    if (!r.is_object() || !r.contains("time_unix_ns") ||
        !r["time_unix_ns"].is_number_unsigned() || Str(r, "action").empty() ||
        Str(r, "fault_id").empty()) {
      return absl::StrCat(path, ":", n,
                          ": not an action journal record (a JSON object "
                          "with time_unix_ns, action, fault_id, ...)");
    }
    Action a;
    a.time_unix_ns = r["time_unix_ns"].get<uint64_t>();
    a.job_id = Str(r, "job_id");
    if (!job.empty() && a.job_id != job) continue;
    a.kind = Str(r, "action");
    const std::string target = Str(r, "target");
    a.what = absl::StrCat(a.kind, target.empty() ? "" : " ", target, " on ",
                          Str(r, "event"), " of ", Str(r, "fault_id"));
    a.outcome = Str(r, "result");
    a.by = "controller";
    a.why = Str(r, "detail").empty() ? Str(r, "command") : Str(r, "detail");
    a.ref = Str(r, "fault_id");
    out->push_back(a);
  }
  return "";
}

// Every source; the exit code of the first call that failed (printed).
int Gather(const GlobalOptions& g, const std::string& job,
           std::vector<Action>* out) {
  v1::ListMigrationsRequest mreq;
  mreq.set_job_id(job);
  mreq.set_include_finished(true);
  v1::ListMigrationsResponse migrations;
  if (int rc =
          Call(g, &v1::Controller::Stub::ListMigrations, mreq, &migrations)) {
    return rc;
  }
  AddMigrations(migrations, out);
  // Every job, filtered here: GetJob does not know a job seen only in its
  // migrations.
  v1::ListJobsResponse jobs;
  if (int rc = Call(g, &v1::Controller::Stub::ListJobs, v1::ListJobsRequest(),
                    &jobs)) {
    return rc;
  }
  for (const v1::Job& j : jobs.jobs()) {
    if (job.empty() || j.job_id() == job) AddPolicyDecisions(j, out);
  }
  v1::ListFaultsRequest freq;
  freq.set_job_id(job);
  v1::ListFaultsResponse faults;
  if (int rc = Call(g, &v1::Controller::Stub::ListFaults, freq, &faults)) {
    return rc;
  }
  AddMitigatedFaults(faults, out);
  if (!job.empty()) return kExitOk;  // nodes are not a job's
  v1::ListNodesRequest nreq;
  std::vector<v1::Node> nodes;
  do {
    v1::ListNodesResponse page;
    if (int rc = Call(g, &v1::Controller::Stub::ListNodes, nreq, &page)) {
      return rc;
    }
    nodes.insert(nodes.end(), page.nodes().begin(), page.nodes().end());
    nreq.set_page_token(page.next_page_token());
  } while (!nreq.page_token().empty());
  AddOperatorDrains(nodes, out);
  return kExitOk;
}

// Newest first; unrecorded times last; ties in a fixed order.
void Sort(std::vector<Action>* v) {
  std::stable_sort(v->begin(), v->end(), [](const Action& a, const Action& b) {
    if ((a.time_unix_ns == 0) != (b.time_unix_ns == 0)) {
      return b.time_unix_ns == 0;
    }
    if (a.time_unix_ns != b.time_unix_ns) {
      return a.time_unix_ns > b.time_unix_ns;
    }
    return std::tie(a.kind, a.ref) < std::tie(b.kind, b.ref);
  });
}

std::string Rfc3339(uint64_t unix_ns) {
  if (unix_ns == 0) return "";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ",
                          absl::FromUnixNanos(static_cast<int64_t>(unix_ns)),
                          absl::UTCTimeZone());
}

// {"actions":[{time_unix_ns, time, job_id, kind, what, outcome, by, why,
// ref}, ...]}: the fields in this order, every one present.
std::string Json(const std::vector<Action>& v) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const Action& a : v) {
    list.push_back({{"time_unix_ns", a.time_unix_ns},
                    {"time", Rfc3339(a.time_unix_ns)},
                    {"job_id", a.job_id},
                    {"kind", a.kind},
                    {"what", a.what},
                    {"outcome", a.outcome},
                    {"by", a.by},
                    {"why", a.why},
                    {"ref", a.ref}});
  }
  nlohmann::ordered_json doc;
  doc["actions"] = std::move(list);
  return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void PrintTable(const std::vector<Action>& v) {
  Table t({"TIME", "JOB", "KIND", "WHAT", "OUTCOME", "BY", "REF", "WHY"});
  for (const Action& a : v) {
    t.AddRow({Age(a.time_unix_ns), a.job_id.empty() ? "-" : a.job_id, a.kind,
              a.what, a.outcome, a.by, a.ref.empty() ? "-" : a.ref,
              a.why.empty() ? "-" : a.why});
  }
  t.Print(std::cout);
  if (v.empty()) std::cout << "(no actions)\n";
}

}  // namespace

void AddActionsCommand(CLI::App* app, GlobalOptions* g, int* rc) {
  static std::string job, journal;
  CLI::App* cmd = app->add_subcommand(
      "actions",
      "what the controller did and why, newest first: migrations (queued, "
      "running, committed, aborted with the reason), the leavers their "
      "commit drained, sync-policy switches and multi-LoRA reschedules "
      "(sent, or advised only), faults marked MITIGATING, and nodes an "
      "operator drained (time not recorded: listed last). Built from the "
      "read RPCs (viewer role); with --journal also the hooks and Slurm "
      "calls the controller ran on fault changes. -o json: {\"actions\": [{"
      "time_unix_ns, time (RFC 3339, \"\" when not recorded), job_id, kind "
      "(migration|drain|sync|lora|fault|hook|slurm_drain|slurm_resume), "
      "what, outcome, by, why, ref}]}");
  cmd->add_option("--job", job,
                  "only this job's actions (operator drains are no job's)");
  cmd->add_option("--journal", journal,
                  "the controller's action journal (actions.journal, e.g. "
                  "/var/lib/pitstop/actions.jsonl, readable where pitstopctl "
                  "runs): adds its hooks and Slurm calls");
  cmd->callback([g, rc] {
    std::vector<Action> actions;
    if (!journal.empty()) {
      if (const std::string bad = AddJournal(journal, job, &actions);
          !bad.empty()) {
        std::cerr << "pitstopctl: --journal " << bad << std::endl;
        *rc = kExitUsage;
        return;
      }
    }
    if ((*rc = Gather(*g, job, &actions))) return;
    Sort(&actions);
    if (g->output == "json") {
      std::cout << Json(actions) << "\n";
      return;
    }
    PrintTable(actions);
  });
}

}  // namespace pitstop::ctl
