// Joiner launchers (docs/migration.md "Who starts the joiners"): a
// migration needs the moved ranks' processes on the standby. The standby's
// agent starts them when the first directive of a migration reaches it as
// the joiner (MAKE_IDS, or PREPARE when the controller makes the ids), with
// the launcher the operator configured for the job (migration.joiners_file,
// joiner_config.h). A launcher that cannot start a joiner answers that
// directive with its reason: the controller aborts the migration at once
// and the job trains on, instead of waiting for the prepare timeout.
//
// What a launcher may run is the operator's: the command, the user and the
// environment come from the agent's configuration, never from a directive
// or a client. A directive only picks which configured entry (by its job id)
// and fills the per-rank values below.
//
// Kinds: "plain" (bare machines: fork/exec on this node as the job's user).
// Slurm and Kubernetes launchers are not built yet.
#ifndef PITSTOP_AGENT_JOINER_LAUNCHER_H_
#define PITSTOP_AGENT_JOINER_LAUNCHER_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pitstop/clock.h"
#include "pitstop/sync.h"

namespace pitstop::agent {

// One job's entry of the operator's joiner configuration.
struct JoinerLaunchConfig {
  std::string job_id;
  std::string launcher = "plain";
  // The job's user (name or numeric uid); never root.
  std::string user;
  // argv; command[0] an absolute path. Each argument and env value may use
  // {rank}, {local_rank}, {job}, {host}, {leaver_host}, {migration}.
  std::vector<std::string> command;
  // Added to the joiner's environment (the leaver's: MASTER_ADDR,
  // WORLD_SIZE, LD_PRELOAD, ...). The agent's own environment is not
  // passed on.
  std::map<std::string, std::string> env;
  // Working directory ("" = /).
  std::string work_dir;
  // Each joiner's stdout and stderr: {log_dir}/{job}-{migration}-rank{R}.log
  // ("" = /dev/null).
  std::string log_dir;
  // A joiner that exits within this long after its exec failed to start.
  absl::Duration start_grace = absl::Milliseconds(500);
};

// What one joiner is started for.
struct JoinerSpec {
  std::string job_id;
  std::string migration_id;
  std::string host;         // this standby
  std::string leaver_host;  // whose ranks it takes over
  int32_t global_rank = -1;
  int32_t local_rank = 0;  // its index among the moved ranks
  // The agent's shared-memory socket (PITSTOP_AGENT_SOCKET).
  std::string agent_socket;
};

// Thread-safe.
class JoinerLauncher {
 public:
  virtual ~JoinerLauncher() = default;
  // By config.launcher. InvalidArgument for an unknown kind, an empty or
  // relative command or a missing user; FailedPrecondition for root.
  static absl::StatusOr<std::unique_ptr<JoinerLauncher>> Create(
      JoinerLaunchConfig config, Clock* clock);
  // Starts one joiner; returns when it is started (or failed to). The
  // status's message is the reason a migration is aborted with.
  virtual absl::Status Launch(const JoinerSpec& spec) = 0;
  // Ends the joiners started for `migration_id` that still run (a later
  // rank's launch failed: the migration is aborted).
  virtual void Stop(const std::string& migration_id) = 0;
  virtual std::string name() const = 0;
};

// Starts the configured command on this node as the job's user. The
// agent may run as root to switch users; the joiner never does (uid 0 is
// refused when configured and again when resolved). Fails when the user is
// unknown, the switch to it is refused, the command cannot be executed, or
// the process exits within start_grace.
class PlainJoinerLauncher final : public JoinerLauncher {
 public:
  PlainJoinerLauncher(JoinerLaunchConfig config, Clock* clock);
  ~PlainJoinerLauncher() override;
  absl::Status Launch(const JoinerSpec& spec) override;
  // SIGTERM to each.
  void Stop(const std::string& migration_id) override;
  std::string name() const override { return "plain"; }
  // The joiners started and not yet reaped.
  std::vector<pid_t> children() const;

 private:
  // Fails when `pid` exits within start_grace.
  absl::Status WatchStart(const std::string& what, pid_t pid,
                          const std::string& log);
  // Collects joiners that ended (no zombies left behind).
  void Reap() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const JoinerLaunchConfig config_;
  Clock* const clock_;
  mutable Mutex mu_;
  // pid -> the migration it was started for.
  std::map<pid_t, std::string> children_ ABSL_GUARDED_BY(mu_);
};

// `text` with {rank}, {local_rank}, {job}, {host}, {leaver_host} and
// {migration} replaced from `spec`.
std::string ExpandJoinerTemplate(const std::string& text,
                                 const JoinerSpec& spec);

}  // namespace pitstop::agent

#endif  // PITSTOP_AGENT_JOINER_LAUNCHER_H_
