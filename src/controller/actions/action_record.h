// One action the controller ran (or chose not to run) for a fault change,
// as recorded in the action journal and the metrics.
#ifndef PITSTOP_CONTROLLER_ACTIONS_ACTION_RECORD_H_
#define PITSTOP_CONTROLLER_ACTIONS_ACTION_RECORD_H_

#include <cstdint>
#include <string>

#include "pitstop/v1/controller.pb.h"

namespace pitstop::controller {

// The fault state changes actions react to.
enum class FaultEvent { kConfirmed, kResolved, kMigrated };
// "confirmed", "resolved", "migrated".
const char* FaultEventName(FaultEvent e);

struct ActionRecord {
  uint64_t time_unix_ns = 0;
  std::string action;  // "hook", "slurm_drain", "slurm_resume"
  std::string event;   // FaultEventName
  std::string fault_id;
  std::string job_id;
  std::string target;   // Slurm node name; empty for hooks
  std::string command;  // what ran, argv joined with spaces
  // "ok", "failed" (non-zero exit or signal), "timeout", "error" (could not
  // start), "skipped" (policy does not allow acting, or nothing to do).
  std::string result;
  int exit_code = -1;
  int term_signal = 0;
  int64_t duration_ms = 0;
  std::string detail;  // why skipped / error text / output tail
};

// One JSON object (one line, no newline) with every field, zeros included.
std::string ActionRecordJson(const ActionRecord& r);

// The hosts a fault blames at hardware level: suspects at GPU, NIC or NODE
// level, and both ends of LINK suspects; sorted, unique. Empty for faults
// that blame a process or rank (PROCESS_DIED, a rank that stopped issuing
// work), which draining a machine would not fix.
std::vector<std::string> HardwareHosts(const v1::Fault& fault);

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_ACTIONS_ACTION_RECORD_H_
