// One communicator record of `job` from `host`'s agent, through the
// Controller as a stream would send it: what the host's agent is told.
#ifndef PITSTOP_TESTS_CONTROLLER_REPORT_COMM_H_
#define PITSTOP_TESTS_CONTROLLER_REPORT_COMM_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "src/controller/controller.h"
#include "tests/controller/listed_comm.h"

namespace pitstop::controller::testing {

class NullCommandSink : public CommandSink {
 public:
  void Send(const v1::ConnectResponse&) override {}
};

// Registers `host`, sends rank 0 of a 2-rank communicator `hash` of `job`,
// and disconnects; returns the batch's status.
inline absl::Status ReportComm(Controller* core, const std::string& host,
                               const std::string& job, uint64_t hash) {
  NullCommandSink sink;
  v1::NodeRegistration reg;
  reg.set_host(host);
  reg.set_agent_id("agent-" + host);
  absl::StatusOr<uint64_t> session = core->AgentConnected(reg, &sink);
  if (!session.ok()) return session.status();
  v1::ConnectRequest batch;
  *batch.add_communicators() = ListedComm(hash, job, 0, 0, 2);
  absl::Status s = core->AgentBatch(*session, batch);
  core->AgentDisconnected(*session);
  return s;
}

}  // namespace pitstop::controller::testing

#endif  // PITSTOP_TESTS_CONTROLLER_REPORT_COMM_H_
