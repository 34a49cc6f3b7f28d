// The `actions.*` and `slurm.*` keys of pitstop-controller's config (and
// their flags), turned into FaultActions::Options.
#ifndef PITSTOP_CONTROLLER_ACTIONS_ACTIONS_CONFIG_H_
#define PITSTOP_CONTROLLER_ACTIONS_ACTIONS_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pitstop/config.h"
#include "src/controller/actions/fault_actions.h"

namespace pitstop::controller {

struct ActionsConfig {
  std::string on_confirmed;
  std::string on_resolved;
  std::string on_migrated;
  uint32_t timeout_ms = 30000;
  bool hooks_require_act = true;
  // "" = actions.jsonl next to the database (none for ":memory:").
  std::string journal;
  bool slurm_enabled = false;
  std::string scontrol = "scontrol";
  uint32_t slurm_timeout_ms = 20000;
  std::vector<std::string> node_map;
  bool strip_domain = true;

  bool Enabled() const {
    return slurm_enabled || !on_confirmed.empty() || !on_resolved.empty() ||
           !on_migrated.empty();
  }
  // InvalidArgument naming the key for unusable values (a zero timeout, a
  // bad node_map entry). `db_path` places the default journal.
  absl::StatusOr<FaultActions::Options> ToOptions(
      const std::string& db_path) const;
};

void RegisterActionsOptions(ConfigSchema* schema, ActionsConfig* c);

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_ACTIONS_ACTIONS_CONFIG_H_
