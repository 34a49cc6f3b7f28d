#include "src/controller/actions/slurm_nodes.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/controller/actions/command_runner.h"

namespace pitstop::controller {
namespace {

constexpr size_t kMaxReason = 200;

std::string ShortClass(v1::FaultClass c) {
  std::string name = v1::FaultClass_Name(c);
  const std::string prefix = "FAULT_CLASS_";
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

// Runs scontrol and fills the record's command and result fields.
void Run(const SlurmOptions& o, std::vector<std::string> args,
         const std::atomic<bool>* cancel, ActionRecord* r,
         std::string* output = nullptr) {
  CommandSpec spec;
  spec.argv.push_back(o.scontrol);
  for (std::string& a : args) spec.argv.push_back(std::move(a));
  spec.timeout = o.timeout;
  r->command = absl::StrJoin(spec.argv, " ");
  absl::StatusOr<CommandResult> res = RunCommand(spec, cancel);
  if (!res.ok()) {
    r->result = "error";
    r->detail = std::string(res.status().message());
    return;
  }
  r->exit_code = res->exit_code;
  r->term_signal = res->term_signal;
  r->duration_ms = absl::ToInt64Milliseconds(res->duration);
  r->result = res->timed_out ? "timeout" : res->ok() ? "ok" : "failed";
  if (output != nullptr) *output = res->output;
  if (!res->ok()) r->detail = res->output;
}

}  // namespace

absl::Status ParseNodeMap(const std::vector<std::string>& entries,
                          std::map<std::string, std::string>* out) {
  for (const std::string& e : entries) {
    const size_t eq = e.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == e.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("slurm.node_map entry '", e, "': expected host=node"));
    }
    (*out)[e.substr(0, eq)] = e.substr(eq + 1);
  }
  return absl::OkStatus();
}

std::string SlurmDrainReason(const v1::Fault& fault) {
  std::string reason =
      absl::StrCat("pitstop ", fault.fault_id(), ": ",
                   ShortClass(fault.fault_class()), " job ", fault.job_id());
  if (!fault.summary().empty()) absl::StrAppend(&reason, ": ", fault.summary());
  // scontrol stores the reason as given; keep it one short line.
  for (char& c : reason) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  if (reason.size() > kMaxReason) reason.resize(kMaxReason);
  return reason;
}

std::string SlurmNodes::NodeName(const std::string& host) const {
  auto it = options_.node_names.find(host);
  if (it != options_.node_names.end()) return it->second;
  if (options_.strip_domain) return host.substr(0, host.find('.'));
  return host;
}

ActionRecord SlurmNodes::Drain(const std::string& host, const v1::Fault& fault,
                               const std::atomic<bool>* cancel) {
  ActionRecord r;
  r.action = "slurm_drain";
  r.target = NodeName(host);
  Run(options_,
      {"update", absl::StrCat("NodeName=", r.target), "State=DRAIN",
       absl::StrCat("Reason=", SlurmDrainReason(fault))},
      cancel, &r);
  return r;
}

ActionRecord SlurmNodes::ResumeIfOurs(const std::string& host,
                                      const v1::Fault& fault,
                                      const std::atomic<bool>* cancel) {
  ActionRecord r;
  r.action = "slurm_resume";
  r.target = NodeName(host);
  std::string shown;
  Run(options_, {"show", "node", "--oneliner", r.target}, cancel, &r, &shown);
  if (r.result != "ok") return r;
  // The reason is the last field: "... Reason=pitstop F3: ... [root@time]".
  const std::string ours =
      absl::StrCat("Reason=pitstop ", fault.fault_id(), ":");
  if (shown.find(ours) == std::string::npos) {
    r.result = "skipped";
    const size_t at = shown.find(" Reason=");
    r.detail = at == std::string::npos
                   ? "node is not drained"
                   : absl::StrCat("drained for another reason: ",
                                  shown.substr(at + 8, 120));
    return r;
  }
  Run(options_, {"update", absl::StrCat("NodeName=", r.target), "State=RESUME"},
      cancel, &r);
  return r;
}

}  // namespace pitstop::controller
