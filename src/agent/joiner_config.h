// The operator's joiner configuration (migration.joiners_file): which
// command the standby's agent may start, as which user and with which
// environment, when a migration of a job makes this node its joiner
// (joiner_launcher.h, docs/migration.md "Who starts the joiners").
//
//   jobs:
//     torch-job:                     # the job id (PITSTOP_JOB_ID)
//       launcher: plain              # the only kind built
//       user: alice                  # never root
//       command: [/usr/bin/python3, /opt/job/train.py, --rank, "{rank}"]
//       env: {MASTER_ADDR: node0, WORLD_SIZE: "4"}
//       work_dir: /opt/job           # optional
//       log_dir: /var/log/pitstop    # optional
//       start_grace_ms: 500          # optional
//
// A job missing from the file gets no launcher: its joiners must be
// started by someone else (its scheduler), as before.
#ifndef PITSTOP_AGENT_JOINER_CONFIG_H_
#define PITSTOP_AGENT_JOINER_CONFIG_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "pitstop/clock.h"
#include "src/agent/joiner_launcher.h"

namespace pitstop::agent {

// Each job's launcher, created from `path`. InvalidArgument naming the
// file, the line and the key on bad input (unknown keys included), and
// the launcher's own refusals (root, a relative command) likewise.
absl::StatusOr<std::map<std::string, std::unique_ptr<JoinerLauncher>>>
LoadJoinerLaunchers(const std::string& path, Clock* clock);

// The same from YAML text; `source` names it in errors.
absl::StatusOr<std::map<std::string, std::unique_ptr<JoinerLauncher>>>
ParseJoinerLaunchers(const std::string& text, const std::string& source,
                     Clock* clock);

}  // namespace pitstop::agent

#endif  // PITSTOP_AGENT_JOINER_CONFIG_H_
