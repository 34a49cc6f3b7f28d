#include "src/controller/actions/action_record.h"

#include <set>

#include "nlohmann/json.hpp"

namespace pitstop::controller {

const char* FaultEventName(FaultEvent e) {
  switch (e) {
    case FaultEvent::kConfirmed:
      return "confirmed";
    case FaultEvent::kResolved:
      return "resolved";
    case FaultEvent::kMigrated:
      return "migrated";
  }
  return "unknown";
}

std::string ActionRecordJson(const ActionRecord& r) {
  nlohmann::json j = {{"time_unix_ns", r.time_unix_ns},
                      {"action", r.action},
                      {"event", r.event},
                      {"fault_id", r.fault_id},
                      {"job_id", r.job_id},
                      {"target", r.target},
                      {"command", r.command},
                      {"result", r.result},
                      {"exit_code", r.exit_code},
                      {"term_signal", r.term_signal},
                      {"duration_ms", r.duration_ms},
                      {"detail", r.detail}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::vector<std::string> HardwareHosts(const v1::Fault& fault) {
  std::set<std::string> hosts;
  for (const v1::Suspect& s : fault.suspects()) {
    switch (s.level()) {
      case v1::SUSPECT_LEVEL_GPU:
      case v1::SUSPECT_LEVEL_NIC:
      case v1::SUSPECT_LEVEL_NODE:
        if (!s.host().empty()) hosts.insert(s.host());
        break;
      case v1::SUSPECT_LEVEL_LINK:
        // Either end may hold the bad cable, port or NIC.
        if (!s.host().empty()) hosts.insert(s.host());
        if (!s.peer_host().empty()) hosts.insert(s.peer_host());
        break;
      default:
        break;
    }
  }
  return {hosts.begin(), hosts.end()};
}

}  // namespace pitstop::controller
