#include "src/sim/local_cluster.h"

#include <signal.h>
#include <sys/stat.h>

#include <chrono>

#include "gtest/gtest.h"
#include "pitstop/grpc_util.h"
#include "pitstop/v1/controller.grpc.pb.h"

namespace pitstop::sim {
namespace {

// Status of the controller over real gRPC; waits for `nodes_ready` nodes.
v1::ControllerStatus WaitForNodes(const std::string& address, uint32_t want) {
  auto stub = v1::Controller::NewStub(CreateChannel(address));
  v1::ControllerStatus last;
  for (int i = 0; i < 200; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(2));
    v1::GetStatusResponse resp;
    if (stub->GetStatus(&ctx, v1::GetStatusRequest(), &resp).ok()) {
      last = resp.status();
      if (last.nodes_ready() >= want) return last;
    }
    usleep(50000);
  }
  return last;
}

TEST(LocalClusterTest, StartsControllerAndAgentsThatRegister) {
  LocalClusterOptions opts;
  opts.nodes = 3;
  opts.log_level = "warn";
  auto cluster = LocalCluster::Start(opts);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  LocalCluster& c = **cluster;
  EXPECT_GT(c.controller_port(), 0);
  EXPECT_EQ(c.nodes(), 3);
  EXPECT_EQ(c.host(2), "node2");
  struct stat st;
  EXPECT_EQ(stat(c.agent_socket(1).c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  const v1::ControllerStatus status = WaitForNodes(c.controller_address(), 3);
  EXPECT_EQ(status.nodes_ready(), 3u);
  EXPECT_EQ(status.database_path(), c.database_path());

  // An agent killed and restarted comes back under the same host name.
  ASSERT_TRUE(c.KillAgent(1).ok());
  EXPECT_FALSE(c.AgentRunning(1));
  ASSERT_TRUE(c.RestartAgent(1).ok());
  EXPECT_TRUE(c.AgentRunning(1));
  EXPECT_EQ(WaitForNodes(c.controller_address(), 3).nodes_ready(), 3u);

  // The controller restarts on the same port; agents reconnect.
  const int port = c.controller_port();
  ASSERT_TRUE(c.RestartController().ok());
  EXPECT_EQ(c.controller_port(), port);
  EXPECT_EQ(WaitForNodes(c.controller_address(), 3).nodes_ready(), 3u);

  const std::string dir = c.work_dir();
  const absl::Status shut = c.Shutdown();
  EXPECT_TRUE(shut.ok()) << shut;
  EXPECT_FALSE(c.ControllerRunning());
  EXPECT_FALSE(c.AgentRunning(0));
  cluster->reset();
  EXPECT_NE(stat(dir.c_str(), &st), 0) << "work dir not removed";
}

TEST(LocalClusterTest, MissingBinaryIsNotFound) {
  LocalClusterOptions opts;
  opts.agent_path = "/nonexistent/pitstop-agent";
  auto cluster = LocalCluster::Start(opts);
  EXPECT_FALSE(cluster.ok());
}

TEST(LocalClusterTest, DaemonThatDiesAtStartIsReportedWithItsLog) {
  LocalClusterOptions opts;
  opts.controller_extra_args = {"--no-such-flag"};
  auto cluster = LocalCluster::Start(opts);
  ASSERT_FALSE(cluster.ok());
  EXPECT_NE(cluster.status().message().find("pitstop-controller"),
            std::string::npos)
      << cluster.status();
  EXPECT_NE(cluster.status().message().find("no-such-flag"), std::string::npos)
      << cluster.status();
}

}  // namespace
}  // namespace pitstop::sim
