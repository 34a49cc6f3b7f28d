#include "src/controller/actions/actions_config.h"

#include <filesystem>

#include "absl/strings/str_cat.h"

namespace pitstop::controller {

absl::StatusOr<FaultActions::Options> ActionsConfig::ToOptions(
    const std::string& db_path) const {
  FaultActions::Options o;
  if (timeout_ms == 0) {
    return absl::InvalidArgumentError(
        "key 'actions.timeout_ms' (--actions-timeout-ms): must be > 0");
  }
  if (slurm_timeout_ms == 0) {
    return absl::InvalidArgumentError(
        "key 'slurm.timeout_ms' (--slurm-timeout-ms): must be > 0");
  }
  if (slurm_enabled && scontrol.empty()) {
    return absl::InvalidArgumentError(
        "key 'slurm.scontrol' (--slurm-scontrol): empty");
  }
  o.hooks.on_confirmed = on_confirmed;
  o.hooks.on_resolved = on_resolved;
  o.hooks.on_migrated = on_migrated;
  o.hooks.timeout = absl::Milliseconds(timeout_ms);
  o.hooks.require_act = hooks_require_act;
  o.slurm.enabled = slurm_enabled;
  o.slurm.scontrol = scontrol;
  o.slurm.timeout = absl::Milliseconds(slurm_timeout_ms);
  o.slurm.strip_domain = strip_domain;
  if (absl::Status s = ParseNodeMap(node_map, &o.slurm.node_names); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("key 'slurm.node_map' (--slurm-node-map): ", s.message()));
  }
  o.journal_path = journal;
  if (o.journal_path.empty() && db_path != ":memory:" && !db_path.empty()) {
    o.journal_path =
        (std::filesystem::path(db_path).parent_path() / "actions.jsonl")
            .string();
  }
  return o;
}

void RegisterActionsOptions(ConfigSchema* s, ActionsConfig* c) {
  s->Add("actions.on_confirmed", &c->on_confirmed,
         "shell command run when a fault is CONFIRMED; the fault as JSON on "
         "stdin, PITSTOP_EVENT/FAULT_ID/FAULT_CLASS/JOB_ID/HOSTS in the "
         "environment (docs/deploy.md)");
  s->Add("actions.on_resolved", &c->on_resolved,
         "shell command run when a confirmed fault is RESOLVED");
  s->Add("actions.on_migrated", &c->on_migrated,
         "shell command run when a fault's job was migrated (MITIGATING)");
  s->Add("actions.timeout_ms", &c->timeout_ms,
         "a hook still running after this gets SIGTERM, then SIGKILL");
  s->Add("actions.hooks_require_act", &c->hooks_require_act,
         "run hooks only for jobs whose policy mode is ACT");
  s->Add("actions.journal", &c->journal,
         "JSON-lines record of every action and its exit status; empty = "
         "actions.jsonl next to the database");
  s->Add("slurm.enabled", &c->slurm_enabled,
         "drain the Slurm nodes of a CONFIRMED hardware fault of a job whose "
         "policy is ACT (reason 'pitstop <fault id>: ...'), resume them "
         "when it is resolved");
  s->Add("slurm.scontrol", &c->scontrol, "scontrol program (PATH lookup)");
  s->Add("slurm.timeout_ms", &c->slurm_timeout_ms,
         "timeout of one scontrol call");
  s->Add("slurm.node_map", &c->node_map,
         "host=slurmnode entries for hosts whose Slurm node name differs");
  s->Add("slurm.strip_domain", &c->strip_domain,
         "Slurm node name = host name up to the first '.' (unless mapped)");
}

}  // namespace pitstop::controller
