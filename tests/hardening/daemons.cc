#include "tests/hardening/daemons.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/controller/test_agent.h"

namespace pitstop::hardening {

using agent::testing::BinaryPath;
using agent::testing::Eventually;
using agent::testing::Process;
using agent::testing::ReadFile;

size_t RssOf(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
    }
  }
  return 0;
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

double MetricValue(int port, const std::string& name,
                   const std::string& labels) {
  const std::string want = labels.empty() ? name : name + "{" + labels + "}";
  std::istringstream body(agent::testing::HttpGet(port, "/metrics"));
  std::string line;
  while (std::getline(body, line)) {
    if (line.rfind(want + " ", 0) != 0) continue;
    double v = -1;
    return absl::SimpleAtod(line.substr(want.size() + 1), &v) ? v : -1;
  }
  return -1;
}

ControllerDaemon::ControllerDaemon(const agent::testing::TempDir& dir)
    : dir_(dir) {
  metrics_port_ = FreePort();
  const std::string port_file = dir.file("port");
  process_ = std::make_unique<Process>(
      std::vector<std::string>{
          BinaryPath("src/controller/pitstop-controller"), "--listen",
          "127.0.0.1:0", "--port-file", port_file, "--db", dir.file("c.db"),
          "--metrics-address", absl::StrCat("127.0.0.1:", metrics_port_),
          "--log-level", "warn"},
      std::vector<std::string>{}, dir.file("c.out"), dir.file("c.err"));
  std::string port;
  const bool up = Eventually([&] {
    std::ifstream in(port_file);
    return static_cast<bool>(std::getline(in, port)) && !port.empty();
  });
  EXPECT_TRUE(up) << log();
  if (!up) return;
  target_ = absl::StrCat("127.0.0.1:", port);
  stub_ = v1::Controller::NewStub(controller::testing::TestChannel(target_));
}

std::string ControllerDaemon::log() const {
  return ReadFile(dir_.file("c.err"));
}

v1::Communicator ControllerDaemon::Communicator(uint64_t comm) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  v1::GetCommunicatorRequest req;
  req.set_comm_hash(comm);
  v1::GetCommunicatorResponse resp;
  if (!stub_->GetCommunicator(&ctx, req, &resp).ok()) return {};
  return resp.communicator();
}

uint64_t ControllerDaemon::Joined(uint64_t comm) {
  return Communicator(comm).collectives_joined();
}

std::vector<v1::Fault> ControllerDaemon::Faults(const std::string& job,
                                                v1::FaultClass fault_class) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  v1::ListFaultsRequest req;
  req.set_job_id(job);
  v1::ListFaultsResponse resp;
  std::vector<v1::Fault> out;
  if (!stub_->ListFaults(&ctx, req, &resp).ok()) return out;
  for (const v1::Fault& f : resp.faults()) {
    if (f.fault_class() == fault_class) out.push_back(f);
  }
  return out;
}

AgentDaemon::AgentDaemon(const agent::testing::TempDir& dir,
                         const std::string& sock, const std::string& target,
                         const std::string& host)
    : dir_(dir), host_(host) {
  process_ = std::make_unique<Process>(
      std::vector<std::string>{
          BinaryPath("src/agent/pitstop-agent"), "--ingest-socket", sock,
          "--controller", target, "--metrics-address", "127.0.0.1:0", "--host",
          host, "--batch-ms", "200", "--log-level", "warn"},
      std::vector<std::string>{}, dir.file(host + ".out"),
      dir.file(host + ".err"));
  metrics_port_ =
      agent::testing::WaitAgentReady(dir.file(host + ".out"), process_.get());
}

std::string AgentDaemon::log() const {
  return ReadFile(dir_.file(host_ + ".err"));
}

v1::NodeRegistration Registration(const std::string& host) {
  v1::NodeRegistration reg;
  reg.set_host(host);
  reg.set_agent_id(absl::StrCat("agent-", host));
  reg.set_boot_unix_ns(1);
  return reg;
}

v1::CommunicatorInfo Member(uint64_t comm, const std::string& job, int32_t rank,
                            uint32_t pid) {
  v1::CommunicatorInfo info;
  info.set_comm_hash(comm);
  info.set_job_id(job);
  info.set_n_ranks(2);
  info.set_rank(rank);
  info.set_pid(pid);
  info.add_global_ranks(0);
  info.add_global_ranks(1);
  return info;
}

v1::ConnectRequest BothMembers(uint64_t comm, const std::string& job) {
  v1::ConnectRequest b;
  *b.add_communicators() = Member(comm, job, 0, 100);
  *b.add_communicators() = Member(comm, job, 1, 101);
  return b;
}

void AddCollectives(v1::ConnectRequest* b, uint64_t comm, uint64_t first,
                    int n) {
  for (int i = 0; i < n; ++i) {
    for (int32_t r = 0; r < 2; ++r) {
      v1::CollectiveSummary* s = b->add_summaries();
      s->set_comm_hash(comm);
      s->set_rank(r);
      s->set_global_rank(r);
      s->set_func(v1::COLL_FUNC_ALL_REDUCE);
      s->set_seq_number(first + i);
      s->set_kernel_duration_ns(1'000'000 + 1000 * r);
      s->set_bytes(1 << 20);
    }
  }
}

}  // namespace pitstop::hardening
