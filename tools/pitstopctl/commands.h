// pitstopctl subcommands.
#ifndef PITSTOP_TOOLS_PITSTOPCTL_COMMANDS_H_
#define PITSTOP_TOOLS_PITSTOPCTL_COMMANDS_H_

#include <string>

namespace CLI {
class App;
}
namespace pitstop::v1 {
class JobLora;
}

namespace pitstop::ctl {

struct GlobalOptions {
  std::string controller = "localhost:7070";
  std::string output = "table";
  double timeout_s = 10;
  // Trust (docs/reliability.md): mutual TLS and/or a bearer token (flags
  // --ca --cert --key --token, env PITSTOP_CA/CERT/KEY/TOKEN).
  std::string ca;
  std::string cert;
  std::string key;
  std::string token;
};

// Adds status, nodes, jobs, comms, faults, fault show, ack, resolve, drain,
// uncordon and policy. Each callback stores its exit code in *exit_code.
void AddCommands(CLI::App* app, GlobalOptions* g, int* exit_code);
// faults, fault show, ack, resolve (fault_commands.cc).
void AddFaultCommands(CLI::App* app, GlobalOptions* g, int* exit_code);
// drain, uncordon, policy get/set (fault_commands.cc).
void AddNodeActions(CLI::App* app, GlobalOptions* g, int* exit_code);
// job JOB, sync-policy JOB POLICY (sync_commands.cc).
void AddSyncCommands(CLI::App* app, GlobalOptions* g, int* exit_code);
// lora JOB, lora-policy JOB POLICY (lora_commands.cc).
void AddLoraCommands(CLI::App* app, GlobalOptions* g, int* exit_code);
// standby, migrate, migrations, migration ID (migrate_commands.cc).
void AddMigrateCommands(CLI::App* app, GlobalOptions* g, int* exit_code);
// actions [--job J] (actions_command.cc).
void AddActionsCommand(CLI::App* app, GlobalOptions* g, int* exit_code);
// plan JOB, links (plan_commands.cc).
void AddPlanCommands(CLI::App* app, GlobalOptions* g, int* exit_code);
// The multi-LoRA section of `job JOB` (lora_commands.cc).
void PrintLora(const v1::JobLora& l);

}  // namespace pitstop::ctl

#endif  // PITSTOP_TOOLS_PITSTOPCTL_COMMANDS_H_
