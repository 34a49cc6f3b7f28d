// Configuration faults (NVIDIA/nccl#426): communicator creation that
// returned an error is the job's configuration, never a hardware verdict.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/controller/actions/action_record.h"
#include "tests/controller/engine_test_base.h"

namespace pitstop::controller::testing {
namespace {

using ::testing::HasSubstr;

class ConfigFaultTest : public EngineTest {
 protected:
  // What the agent sends when the interposer saw `call` fail on `host`.
  void InitFailed(const std::string& host, uint32_t pid, int32_t global_rank,
                  const std::string& error, int32_t result = 2,
                  const std::string& job = "job1") {
    v1::RankLifecycle l;
    l.set_kind(v1::RankLifecycle::KIND_COMM_INIT_FAILED);
    l.set_job_id(job);
    l.set_pid(pid);
    l.set_global_rank(global_rank);
    v1::CommInitFailure* f = l.mutable_init_failure();
    f->set_call("ncclCommInitRank");
    f->set_result(result);
    f->set_error(error);
    f->set_n_ranks(8);
    f->set_rank(global_rank);
    ASSERT_TRUE(engine_->AddLifecycle(host, l).ok());
  }
  void Lifecycle(const std::string& host, uint32_t pid, int32_t global_rank,
                 v1::RankLifecycle::Kind kind) {
    v1::RankLifecycle l;
    l.set_kind(kind);
    l.set_job_id("job1");
    l.set_pid(pid);
    l.set_global_rank(global_rank);
    ASSERT_TRUE(engine_->AddLifecycle(host, l).ok());
  }
};

TEST_F(ConfigFaultTest, FailedCreationIsOneJobFaultNamingTheErrorAndRanks) {
  InitFailed("node0", 100, 0, "NET/IB : No device found.");
  InitFailed("node0", 101, 1, "NET/IB : No device found.");
  InitFailed("node1", 200, 5, "Call to connect returned Connection refused");
  Cycle(absl::Milliseconds(500));
  ASSERT_EQ(Latest().size(), 1u);
  const v1::Fault f = Latest()[0];
  EXPECT_EQ(f.fault_class(), v1::FAULT_CLASS_CONFIG);
  EXPECT_EQ(f.state(), v1::FAULT_STATE_CONFIRMED) << "a return code is final";
  EXPECT_EQ(f.job_id(), "job1");
  EXPECT_EQ(SuspectGlobals(f), (std::set<int32_t>{0, 1, 5}));
  EXPECT_THAT(f.summary(), HasSubstr("ncclSystemError (2)"));
  EXPECT_THAT(f.summary(), HasSubstr("NET/IB : No device found."));
  EXPECT_THAT(f.summary(), HasSubstr("Connection refused"));
  EXPECT_THAT(f.summary(), HasSubstr("rank 5 (node1)"));
  EXPECT_THAT(f.summary(), HasSubstr("not a hardware fault"));
  EXPECT_EQ(f.evidence(0).values().at("ranks_failed"), 3);
  EXPECT_EQ(f.evidence(0).values().at("distinct_errors"), 2);
  // Slurm drain and hooks act on HardwareHosts; migration on GPU, NIC or
  // node suspects: neither ever takes a configuration fault for a machine.
  EXPECT_TRUE(HardwareHosts(f).empty());
  for (const v1::Suspect& s : f.suspects()) {
    EXPECT_EQ(s.level(), v1::SUSPECT_LEVEL_RANK) << s.DebugString();
  }
  // Nothing changes, nothing is re-published.
  const size_t before = faults_.size();
  Cycle(absl::Seconds(1));
  EXPECT_EQ(faults_.size(), before);
}

// The failing process then ends (the training script raised): its death is
// the configuration fault's consequence, not a PROCESS_DIED of its own.
TEST_F(ConfigFaultTest, DeathAfterAFailedCreationIsNoProcessFault) {
  InitFailed("node0", 100, 0, "Bootstrap : no socket interface found");
  Cycle(absl::Milliseconds(500));
  Lifecycle("node0", 100, 0, v1::RankLifecycle::KIND_DIED);
  Cycle(absl::Milliseconds(500));
  const std::vector<v1::Fault> latest = Latest();
  ASSERT_EQ(latest.size(), 1u) << latest[0].DebugString();
  EXPECT_EQ(latest[0].fault_class(), v1::FAULT_CLASS_CONFIG);
  // Reported together (one agent batch), the death is in the evidence.
  InitFailed("node1", 200, 1, "Bootstrap : no socket interface found", 2,
             "job2");
  v1::RankLifecycle l;
  l.set_kind(v1::RankLifecycle::KIND_DIED);
  l.set_job_id("job2");
  l.set_pid(200);
  l.set_global_rank(1);
  ASSERT_TRUE(engine_->AddLifecycle("node1", l).ok());
  Cycle(absl::Milliseconds(500));
  ASSERT_EQ(Latest().size(), 2u);
  for (const v1::Fault& f : Latest()) {
    EXPECT_EQ(f.fault_class(), v1::FAULT_CLASS_CONFIG);
    if (f.job_id() == "job2") {
      EXPECT_EQ(f.evidence(0).values().at("ranks_then_died"), 1);
    }
  }
}

// The operator fixed the setting and the job retried in the same process:
// once every failed process created a communicator, the fault resolves.
TEST_F(ConfigFaultTest, SuccessfulRetryResolvesIt) {
  SimJob job(0xC0, 2, 2);
  InitFailed(job.HostOf(0), job.PidOf(0), 0, "NET/IB : No device found.");
  InitFailed(job.HostOf(1), job.PidOf(1), 1, "NET/IB : No device found.");
  Cycle(absl::Milliseconds(500));
  ASSERT_EQ(Latest().size(), 1u);
  job.Register(engine_.get());
  Cycle(absl::Milliseconds(500));
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_EQ(Latest()[0].state(), v1::FAULT_STATE_RESOLVED);
}

TEST_F(ConfigFaultTest, JobsAreSeparateFaults) {
  InitFailed("node0", 100, 0, "NET/IB : No device found.", 2, "a");
  InitFailed("node9", 900, 0, "invalid usage", 5, "b");
  Cycle(absl::Milliseconds(500));
  ASSERT_EQ(Latest().size(), 2u);
  for (const v1::Fault& f : Latest()) {
    EXPECT_EQ(f.fault_class(), v1::FAULT_CLASS_CONFIG);
    EXPECT_EQ(f.suspects_size(), 1);
  }
}

}  // namespace
}  // namespace pitstop::controller::testing
