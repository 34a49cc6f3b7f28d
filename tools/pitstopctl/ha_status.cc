// pitstopctl status with several controllers (docs/ha.md): asks each one
// for its status and shows its role, then the leader's counts.
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/pitstopctl/ctl_client.h"
#include "tools/pitstopctl/ctl_format.h"

namespace pitstop::ctl {
namespace {

std::string ToJsonString(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

int PrintHaStatus(const GlobalOptions& g) {
  const std::vector<std::string> list = SplitControllerList(g.controller);
  Table t({"CONTROLLER", "ROLE", "LEADER", "TERMS WON", "FENCED WRITES",
           "NODES READY/TOTAL", "OPEN FAULTS", "STORE"});
  std::string json = "[";
  int leaders = 0;
  int reachable = 0;
  int rc = kExitOk;
  for (const std::string& addr : list) {
    v1::GetStatusResponse r;
    const grpc::Status s = CallOne(g, addr, &v1::Controller::Stub::GetStatus,
                                   v1::GetStatusRequest(), &r);
    if (json.size() > 1) json += ",";
    if (!s.ok()) {
      rc = ExitCodeFor(s);
      t.AddRow(
          {addr, "unreachable", "-", "-", "-", "-", "-", s.error_message()});
      json +=
          absl::StrCat("{\"controller\":\"", addr,
                       "\",\"error\":", ToJsonString(s.error_message()), "}");
      continue;
    }
    ++reachable;
    const v1::ControllerStatus& st = r.status();
    leaders += st.role() == v1::CONTROLLER_ROLE_LEADER ||
               st.role() == v1::CONTROLLER_ROLE_SINGLE;
    t.AddRow({addr,
              ShortEnum(v1::ControllerRole_Name(st.role()), "CONTROLLER_ROLE_"),
              st.leader().empty() ? "-" : st.leader(),
              absl::StrCat(st.leader_terms_won()),
              absl::StrCat(st.fenced_writes_refused()),
              absl::StrCat(st.nodes_ready(), "/", st.nodes_total()),
              absl::StrCat(st.open_faults()), st.database_path()});
    json += absl::StrCat("{\"controller\":\"", addr,
                         "\",\"status\":", ToJson(st), "}");
  }
  json += "]";
  if (g.output == "json") {
    std::cout << json << "\n";
  } else {
    t.Print(std::cout);
    if (leaders == 0 && reachable > 0) {
      std::cout << "no leader elected right now (an election takes about "
                   "one lease TTL)\n";
    }
  }
  // Some controller down is worth an exit code even when a leader answers.
  return rc;
}

}  // namespace pitstop::ctl
