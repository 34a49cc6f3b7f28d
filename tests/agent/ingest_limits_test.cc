// Issue #11, the agent's ingest socket under a flood of connections: the
// pitstop-agent binary with a low descriptor limit (prlimit) and a small
// connection cap. It must keep running, refuse what is beyond its limits,
// and accept rank streams again once the flood is gone.
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pitstop/grpc_util.h"
#include "pitstop/v1/telemetry.grpc.pb.h"
#include "tests/agent/fake_rank.h"
#include "tests/agent/process_util.h"
#include "tests/agent/test_util.h"

namespace pitstop::agent {
namespace {

using testing::Process;
using testing::ReadFile;
using testing::TempDir;

// Idle connections: connected sockets that never speak HTTP/2.
std::vector<int> Flood(const std::string& path, int n) {
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    if (fd < 0) break;
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd);
      continue;
    }
    fds.push_back(fd);
  }
  return fds;
}

// One rank stream (hello, ops, goodbye) within `deadline`; its final status.
grpc::Status OneStream(const std::string& path, absl::Duration deadline) {
  auto channel = CreateChannel("unix:" + path);
  auto stub = v1::Telemetry::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_wait_for_ready(true);
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  auto stream = stub->StreamTelemetry(&ctx);
  v1::StreamTelemetryRequest hello =
      testing::MakeHello(getpid(), 0, 0xAA, 0, 2);
  testing::AddCompleteOps(&hello, 0xAA, 0, 1, 4);
  stream->Write(hello);
  stream->Write(testing::MakeGoodbye());
  stream->WritesDone();
  return stream->Finish();
}

class IngestLimitsTest : public ::testing::Test {
 protected:
  void Start(int nofile, int max_connections, bool metrics = false) {
    sock_ = dir_.file("a.sock");
    const std::string agent = testing::BinaryPath("src/agent/pitstop-agent");
    std::vector<std::string> argv = {"/usr/bin/prlimit",
                                     "--nofile=" + std::to_string(nofile),
                                     "--",
                                     agent,
                                     "--ingest-socket",
                                     sock_,
                                     "--controller",
                                     "",
                                     "--metrics-address",
                                     ""};
    if (metrics) {
      argv.back() = "127.0.0.1:0";
    }
    // The default cap passes no flag, so this also runs against older
    // agents (which fail it).
    if (max_connections != 1024) {
      argv.push_back("--ingest-max-connections");
      argv.push_back(std::to_string(max_connections));
    }
    agent_ = std::make_unique<Process>(argv, std::vector<std::string>{},
                                       dir_.file("out"), dir_.file("err"));
    metrics_port_ = testing::WaitAgentReady(dir_.file("out"), agent_.get());
    ASSERT_GE(metrics_port_, 0) << ReadFile(dir_.file("err"));
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << "agent log:\n" << ReadFile(dir_.file("err"));
  }
  TempDir dir_;
  std::string sock_;
  std::unique_ptr<Process> agent_;
  int metrics_port_ = 0;
};

// The issue: with 1,024 descriptors, 1,100 idle connections gave "Too many
// open files" and the agent never accepted a stream again. Here: 128
// descriptors, 300 idle connections, a connection cap above the limit so
// accept() itself runs out.
TEST_F(IngestLimitsTest, RecoversAfterDescriptorsRanOut) {
  Start(/*nofile=*/128, /*max_connections=*/1024);
  std::vector<int> idle = Flood(sock_, 300);
  EXPECT_GT(idle.size(), 100u);
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_TRUE(agent_->running());
  for (int fd : idle) close(fd);
  const grpc::Status st = OneStream(sock_, absl::Seconds(20));
  EXPECT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  EXPECT_TRUE(agent_->running());
  EXPECT_THAT(ReadFile(dir_.file("err")),
              ::testing::HasSubstr("out of file descriptors"));
}

// The same flood on the library's shared-memory socket: accept() failing
// with EMFILE left the connection readable, so the server thread woke at
// once forever (a core at 100% while the flood lasted, no log). Now it
// sheds with a reserved descriptor, pauses, says so once, and a real rank
// (the library through the emulator) streams afterwards.
TEST_F(IngestLimitsTest, SharedMemorySocketRecoversAfterDescriptorsRanOut) {
  Start(/*nofile=*/128, /*max_connections=*/1024, /*metrics=*/true);
  const std::string shm = dir_.file("a-shm.sock");
  std::vector<int> idle = Flood(shm, 300);
  EXPECT_GT(idle.size(), 100u);
  ASSERT_TRUE(testing::Eventually([&] {
    return ReadFile(dir_.file("err")).find("out of file descriptors") !=
           std::string::npos;
  })) << ReadFile(dir_.file("err"));
  EXPECT_TRUE(agent_->running());
  for (int fd : idle) close(fd);
  Process rank({testing::BinaryPath("tests/agent/pitstop_emu_rank"), "0", "1",
                "20", "0", "finalize"},
               {"PITSTOP_AGENT_SOCKET=" + shm, "PITSTOP_RECONNECT_MAX_MS=50",
                "PITSTOP_FINALIZE_TIMEOUT_MS=30000"},
               dir_.file("rank.out"), dir_.file("rank.err"));
  const int st = rank.Wait(absl::Seconds(60));
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  EXPECT_TRUE(testing::Eventually([&] {
    const std::string m = testing::HttpGet(metrics_port_, "/metrics");
    const std::string name = "\npitstop_agent_records_ingested_total ";
    const size_t at = m.find(name);
    return at != std::string::npos &&
           std::strtoull(m.c_str() + at + name.size(), nullptr, 10) >= 20;
  })) << testing::HttpGet(metrics_port_, "/metrics");
  EXPECT_TRUE(agent_->running());
}

TEST_F(IngestLimitsTest, ConnectionsBeyondTheCapAreClosedUntilSlotsFree) {
  Start(/*nofile=*/1024, /*max_connections=*/10);
  std::vector<int> idle = Flood(sock_, 50);
  absl::SleepFor(absl::Milliseconds(300));
  // Full: a rank's stream does not get in while the 10 slots are held.
  EXPECT_FALSE(OneStream(sock_, absl::Seconds(1)).ok());
  for (int fd : idle) close(fd);
  const grpc::Status st = OneStream(sock_, absl::Seconds(20));
  EXPECT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  EXPECT_THAT(ReadFile(dir_.file("err")),
              ::testing::HasSubstr("ingest.max_connections"));
}

}  // namespace
}  // namespace pitstop::agent
