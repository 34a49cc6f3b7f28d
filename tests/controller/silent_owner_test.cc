// Issue #33, the attacker's F3 on the controller (gRPC, FakeClock): an
// agent that is connected but quiet for agent_silence is unreachable for
// hang detection, but its live ranks stay its own. Another host's records
// for them, or for their deaths, are refused and counted.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pitstop/clock.h"
#include "src/controller/api/controller_service.h"
#include "src/controller/controller.h"
#include "tests/controller/sim_job.h"
#include "tests/controller/test_agent.h"

namespace pitstop::controller::testing {
namespace {

TEST(SilentOwnerTest, ASilentAgentKeepsItsRanks) {
  FakeClock clock;
  Controller::Options o;
  o.clock = &clock;
  o.agent_silence = absl::Seconds(3);
  auto core = Controller::Create(o);
  ASSERT_TRUE(core.ok()) << core.status();
  auto server = ControllerServer::Start(core->get(), "127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string target = absl::StrCat("127.0.0.1:", (*server)->port());
  SimJob job(0x63, 4, 2);  // node0: ranks 0, 1; node1: ranks 2, 3
  std::vector<std::unique_ptr<TestAgent>> agents;
  for (const v1::NodeRegistration& reg : job.Nodes()) {
    agents.push_back(std::make_unique<TestAgent>(target, reg));
  }
  for (int32_t r = 0; r < 4; ++r) {
    v1::ConnectRequest batch;
    *batch.add_communicators() = job.Info(r);
    *batch.add_progress() = job.Progress(r, 10, 10);
    ASSERT_TRUE(agents[r / 2]->Send(batch));
  }
  ASSERT_TRUE(WaitUntil([&] {
    auto comms = (*core)->ingest().Communicators("");
    return comms.size() == 1 && comms[0].members_size() == 4 &&
           !comms[0].members(3).host().empty();
  }));
  // node1 is quiet for 4 s (node0 keeps sending, like an idle agent).
  for (int s = 0; s < 4; ++s) {
    clock.Advance(absl::Seconds(1));
    ASSERT_TRUE(agents[0]->Send(v1::ConnectRequest()));
    const uint64_t now = static_cast<uint64_t>(absl::ToUnixNanos(clock.Now()));
    ASSERT_TRUE(WaitUntil([&] {
      return (*core)->nodes().Node("node0")->last_seen_unix_ns() == now;
    }));
    (*core)->RunCycle();
  }
  // node0 claims node1's rank 2, and its own rank 0's process reports the
  // death of global rank 2.
  v1::ConnectRequest claims;
  v1::CommunicatorInfo claim = job.Info(2);
  claim.set_host("");
  claim.set_pid(job.PidOf(0));
  *claims.add_communicators() = claim;
  v1::RankLifecycle* l = claims.add_lifecycle();
  l->set_kind(v1::RankLifecycle::KIND_DIED);
  l->set_job_id("job1");
  l->set_pid(job.PidOf(0));
  l->set_global_rank(2);
  ASSERT_TRUE(agents[0]->Send(claims));
  ASSERT_TRUE(WaitUntil([&] {
    (*core)->RunCycle();
    const Controller::InputStats s = (*core)->input_stats();
    return s.foreign_claims_refused >= 1 && s.foreign_deaths_refused >= 1;
  })) << (*core)->input_stats().foreign_claims_refused
      << " " << (*core)->input_stats().foreign_deaths_refused;
  auto comms = (*core)->ingest().Communicators("");
  ASSERT_EQ(comms.size(), 1u);
  for (const v1::MemberLocation& m : comms[0].members()) {
    if (m.comm_rank() >= 2) {
      EXPECT_EQ(m.host(), "node1") << m.DebugString();
    }
  }
  auto faults = (*core)->faults().Faults("job1", false, 0);
  ASSERT_TRUE(faults.ok());
  for (const v1::Fault& f : *faults) {
    EXPECT_NE(f.fault_class(), v1::FAULT_CLASS_PROCESS_DIED) << f.summary();
  }
  agents.clear();
  (*server)->Shutdown(absl::ZeroDuration());
}

}  // namespace
}  // namespace pitstop::controller::testing
