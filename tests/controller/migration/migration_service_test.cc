// MigrationService's cycle over small fakes of the services it needs
// (detection, nodes, faults) and a real SQLite store: policy ACT migrates a
// CONFIRMED GPU fault once, and while that migration runs a cycle does not
// read the communicators again (a snapshot of every member under the ingest
// lock, ~10 ms at 16,384 ranks; issue #30, docs/benchmarks.md); the policy
// action is counted once.
#include "src/controller/migration/migration_service.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "pitstop/clock.h"
#include "src/controller/common/policy_actions.h"
#include "src/controller/store/fault_store.h"
#include "tests/controller/metric_reader.h"

namespace pitstop::controller {
namespace {

// Job "job1": rank 0 on node0, rank 1 on node1; its policy is ACT. Counts
// the reads of the communicators.
class CountingDetection final : public MigrationService::Detection {
 public:
  std::vector<v1::Communicator> Communicators() override {
    ++reads;
    v1::Communicator c;
    c.set_comm_hash(0x77);
    c.set_job_id("job1");
    c.set_n_ranks(2);
    for (int r = 0; r < 2; ++r) {
      v1::MemberLocation* m = c.add_members();
      m->set_comm_rank(r);
      m->set_global_rank(r);
      m->set_host(r == 0 ? "node0" : "node1");
    }
    return {c};
  }
  v1::JobPolicy JobPolicy(const std::string&) override {
    v1::JobPolicy p;
    p.set_mode(v1::POLICY_MODE_ACT);
    return p;
  }
  void RetireComms(const std::vector<uint64_t>&, const std::string&) override {}
  int reads = 0;
};

// node0, node1 and standby spare0, all connected, with a data plane.
class ThreeNodes final : public MigrationService::Nodes {
 public:
  std::vector<NodeFacts> ListFacts(bool standby_only) override {
    std::vector<NodeFacts> out;
    for (const char* host : {"node0", "node1", "spare0"}) {
      NodeFacts f;
      f.host = host;
      f.standby = std::string(host) == "spare0";
      f.gpus = 8;
      f.migration_data_plane = "emulated";
      f.connected = true;
      if (!standby_only || f.standby) out.push_back(f);
    }
    return out;
  }
  bool SendMigration(const std::string&,
                     const v1::MigrationDirective&) override {
    ++sent;
    return true;
  }
  void DrainMigrated(const std::string&, const std::string&) override {}
  int sent = 0;
};

// One open fault: F7, CONFIRMED, GPU 2 of node0 in job1.
class OneGpuFault final : public MigrationService::Faults {
 public:
  absl::StatusOr<std::vector<v1::Fault>> OpenFaults() override {
    return std::vector<v1::Fault>{F7()};
  }
  absl::StatusOr<v1::Fault> Fault(const std::string& id) override {
    if (id != "F7") return absl::NotFoundError(id);
    return F7();
  }
  void MarkMitigating(const v1::Fault&, const std::string&) override {}

 private:
  static v1::Fault F7() {
    v1::Fault f;
    f.set_fault_id("F7");
    f.set_job_id("job1");
    f.set_state(v1::FAULT_STATE_CONFIRMED);
    v1::Suspect* s = f.add_suspects();
    s->set_level(v1::SUSPECT_LEVEL_GPU);
    s->set_host("node0");
    s->set_gpu_index(2);
    return f;
  }
};

TEST(MigrationServiceTest, RunningPolicyMigrationDoesNotReadCommunicators) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("pitstop-migsvc-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    absl::StatusOr<std::unique_ptr<FaultStore>> store =
        FaultStore::Open((dir / "pitstop.db").string());
    ASSERT_TRUE(store.ok()) << store.status();
    FakeClock clock;
    CountingDetection detection;
    ThreeNodes nodes;
    OneGpuFault faults;
    MigrationService::Options o;
    o.clock = &clock;
    o.store = store->get();
    o.detection = &detection;
    o.nodes = &nodes;
    o.faults = &faults;
    prometheus::Registry registry;
    PolicyActionMetrics actions(&registry);
    o.policy_actions = &actions;
    const auto act_migrations = [&registry] {
      return testing::MetricValue(registry,
                                  "pitstop_controller_policy_actions_total",
                                  {{"policy", "act"}, {"action", "migrate"}});
    };
    EXPECT_EQ(act_migrations(), 0);
    MigrationService service(o);
    ASSERT_TRUE(service.Load().ok());
    for (const char* host : {"node0", "node1", "spare0"}) {
      service.OnHostUp(host);
    }

    service.RunCycle();  // policy ACT: F7's host migrates to spare0
    std::vector<v1::Migration> ms = service.ListMigrations("", true);
    ASSERT_EQ(ms.size(), 1u);
    EXPECT_EQ(ms[0].fault_id(), "F7");
    EXPECT_EQ(ms[0].joiner_host(), "spare0");
    EXPECT_EQ(ms[0].state(), v1::MIGRATION_STATE_PREPARING);
    EXPECT_GT(nodes.sent, 0);
    EXPECT_EQ(act_migrations(), 1);  // pitstop_controller_policy_actions_total
    const int reads = detection.reads;
    EXPECT_GE(reads, 1);

    // F7 stays CONFIRMED while its migration runs: nothing to do, so the
    // communicators are not read.
    for (int i = 0; i < 3; ++i) {
      clock.Advance(absl::Seconds(1));
      service.RunCycle();
    }
    EXPECT_EQ(detection.reads, reads);
    ms = service.ListMigrations("", true);
    ASSERT_EQ(ms.size(), 1u);
    EXPECT_EQ(ms[0].state(), v1::MIGRATION_STATE_PREPARING);
    EXPECT_EQ(act_migrations(), 1);  // one action per fault
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pitstop::controller
