// The real daemons for the hardening tests: a pitstop-controller (loopback,
// port 0, metrics on a free port) and pitstop-agents pointed at it, plus
// what the tests read of them (memory, metrics, faults, communicators).
#ifndef PITSTOP_TESTS_HARDENING_DAEMONS_H_
#define PITSTOP_TESTS_HARDENING_DAEMONS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pitstop/v1/agent.pb.h"
#include "pitstop/v1/controller.grpc.pb.h"
#include "tests/agent/process_util.h"
#include "tests/agent/test_util.h"

namespace pitstop::hardening {

// Resident memory of a process (VmRSS), 0 when gone.
size_t RssOf(int pid);

// A port nobody listens on now (for listeners that cannot report theirs).
int FreePort();

// The value of one Prometheus sample line `name{labels}` ("" labels: the
// bare name) on http://127.0.0.1:port/metrics; -1 when absent.
double MetricValue(int port, const std::string& name,
                   const std::string& labels);

class ControllerDaemon {
 public:
  // Starts it in `dir` and waits for its port. ASSERTs inside: check
  // ok() after.
  explicit ControllerDaemon(const agent::testing::TempDir& dir);
  bool ok() const { return !target_.empty(); }
  const std::string& target() const { return target_; }
  int metrics_port() const { return metrics_port_; }
  agent::testing::Process& process() { return *process_; }
  v1::Controller::Stub* stub() { return stub_.get(); }
  std::string log() const;

  // Collectives the controller joined of `comm` (0 when unknown).
  uint64_t Joined(uint64_t comm);
  // The communicator (empty when unknown).
  v1::Communicator Communicator(uint64_t comm);
  // Open faults of `fault_class` in `job`.
  std::vector<v1::Fault> Faults(const std::string& job,
                                v1::FaultClass fault_class);

 private:
  const agent::testing::TempDir& dir_;
  std::unique_ptr<agent::testing::Process> process_;
  std::string target_;
  int metrics_port_ = 0;
  std::unique_ptr<v1::Controller::Stub> stub_;
};

// A pitstop-agent for `host` on socket `sock`, reporting to `target`
// (ingest.verify_pid on, as the daemon's default); metrics on a port it
// reports. ok() is false when it did not start.
class AgentDaemon {
 public:
  AgentDaemon(const agent::testing::TempDir& dir, const std::string& sock,
              const std::string& target, const std::string& host);
  bool ok() const { return metrics_port_ > 0; }
  int metrics_port() const { return metrics_port_; }
  agent::testing::Process& process() { return *process_; }
  std::string log() const;

 private:
  const agent::testing::TempDir& dir_;
  std::string host_;
  std::unique_ptr<agent::testing::Process> process_;
  int metrics_port_ = -1;
};

// Agent-link records of a well-behaved host.
v1::NodeRegistration Registration(const std::string& host);
// Member `rank` (process `pid`) of a 2-rank communicator of `job`.
v1::CommunicatorInfo Member(uint64_t comm, const std::string& job, int32_t rank,
                            uint32_t pid);
// Both members (pids 100, 101) of a 2-rank communicator of `job`.
v1::ConnectRequest BothMembers(uint64_t comm, const std::string& job);
// Both ranks' summaries of collectives [first, first + n) of `comm`.
void AddCollectives(v1::ConnectRequest* b, uint64_t comm, uint64_t first,
                    int n);

}  // namespace pitstop::hardening

#endif  // PITSTOP_TESTS_HARDENING_DAEMONS_H_
