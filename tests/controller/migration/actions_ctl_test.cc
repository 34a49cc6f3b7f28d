// What operators see of the controller's own actions, against a real
// controller on loopback: `pitstopctl actions` (a committed migration and
// the drain it made, an aborted one with its reason, a sync-policy switch,
// the hooks and Slurm calls of an action journal; newest first, `--job`,
// `-o json`) and the migration and policy-action metrics read from the
// registry after the same events.
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/controller/common/policy_actions.h"
#include "src/controller/migration/migration_metrics.h"
#include "tests/controller/metric_reader.h"
#include "tests/controller/migration/migration_api_fixture.h"
#include "tests/controller/subprocess.h"
#include "tests/controller/trainers/trainer_batches.h"

namespace pitstop::controller::testing {
namespace {

using ::testing::HasSubstr;

class NullSink final : public CommandSink {
 public:
  void Send(const v1::ConnectResponse&) override {}
};

class ActionsCtlTest : public MigrationApiFixture {
 protected:
  void Configure(Controller::Options* o) override {
    o->migrate.events = &migration_metrics_;
    o->policy_actions = &policy_metrics_;
    o->sync.defaults.set_slow_persist_s(3);
  }
  // pitstopctl ARGS against the controller; its exit code, output in *out.
  int Ctl(std::vector<std::string> args, std::string* out) {
    std::vector<std::string> argv = {PITSTOP_PITSTOPCTL_BIN, "--controller",
                                     target_};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProcess(argv, ::testing::TempDir() + "/actions.out", out);
  }
  double Metric(const std::string& name,
                const std::map<std::string, std::string>& labels) {
    return MetricValue(registry_, name, labels);
  }
  // cpu-job's two trainers on gloo-node, rank 1 slow, under sync policy
  // AUTO: the policy switches it to local SGD (a decision sent).
  void SwitchCpuJobToLocalSgd() {
    v1::NodeRegistration reg;
    reg.set_host("gloo-node");
    auto session = core_->AgentConnected(reg, &sink_);
    ASSERT_TRUE(session.ok()) << session.status();
    v1::SyncSettings auto_policy;
    auto_policy.set_policy(v1::SYNC_POLICY_AUTO);
    auto_policy.set_local_mode(v1::SYNC_MODE_LOCAL_SGD);
    ASSERT_TRUE(core_->trainers().SetSyncPolicy("cpu-job", auto_policy).ok());
    for (uint64_t sec = 0, step = 0; sec < 8; ++sec, step += 5) {
      const v1::ConnectRequest batch = SlowRankOneBatch("cpu-job", step);
      ASSERT_TRUE(core_->AgentBatch(*session, batch).ok());
      clock_.Advance(absl::Seconds(1));
      core_->RunCycle();
    }
  }

  prometheus::Registry registry_;
  MigrationMetrics migration_metrics_{&registry_};
  PolicyActionMetrics policy_metrics_{&registry_};
  NullSink sink_;
};

TEST_F(ActionsCtlTest, ListsMigrationsDrainsAndSwitchesNewestFirst) {
  StartController();
  StartJob(/*standbys=*/2);
  v1::MigrateNodeResponse r;
  ASSERT_TRUE(Migrate("node0", "spare0", &r).ok());
  const std::string m1 = r.migration().migration_id();
  for (const char* host : {"node0", "node1", "spare0"}) {
    Answer(host, v1::MigrationDirective::PHASE_PREPARE);
  }
  WaitState(m1, v1::MIGRATION_STATE_SWITCHING);
  clock_.Advance(absl::Seconds(2));
  Answer("node1", v1::MigrationDirective::PHASE_SWITCH_AT);
  Answer("spare0", v1::MigrationDirective::PHASE_SWITCH_AT);
  WaitState(m1, v1::MIGRATION_STATE_COMMITTED);
  clock_.Advance(absl::Seconds(10));
  ASSERT_TRUE(Migrate("node1", "spare1", &r).ok());
  const std::string m2 = r.migration().migration_id();
  ASSERT_TRUE(agents_["spare1"]->Close().ok());
  WaitState(m2, v1::MIGRATION_STATE_ABORTED);
  clock_.Advance(absl::Seconds(10));
  SwitchCpuJobToLocalSgd();

  // The same events in the registry.
  EXPECT_EQ(Metric("pitstop_controller_migrations_started_total",
                   {{"origin", "operator"}}),
            2);
  EXPECT_EQ(Metric("pitstop_controller_migrations_committed_total", {}), 1);
  EXPECT_EQ(Metric("pitstop_controller_migrations_aborted_total",
                   {{"reason", "joiner_died"}}),
            1);
  EXPECT_EQ(Metric("pitstop_controller_policy_actions_total",
                   {{"policy", "migration"}, {"action", "drain"}}),
            1);
  EXPECT_EQ(Metric("pitstop_controller_policy_actions_total",
                   {{"policy", "sync"}, {"action", "local_sgd"}}),
            1);

  std::string out;
  ASSERT_EQ(Ctl({"-o", "json", "actions"}, &out), 0) << out;
  const nlohmann::json doc = nlohmann::json::parse(out);
  const nlohmann::json& a = doc.at("actions");
  ASSERT_EQ(a.size(), 4u) << out;
  // Newest first: the switch, the abort, then the commit and its drain.
  EXPECT_EQ(a[0]["kind"], "sync");
  EXPECT_EQ(a[0]["job_id"], "cpu-job");
  EXPECT_EQ(a[0]["what"], "switch sync -> local_sgd");
  EXPECT_EQ(a[0]["outcome"], "sent");
  EXPECT_EQ(a[0]["by"], "sync policy auto");
  EXPECT_THAT(a[0]["why"].get<std::string>(), HasSubstr("slow for"));
  EXPECT_EQ(a[1]["ref"], m2);
  EXPECT_EQ(a[1]["kind"], "migration");
  EXPECT_EQ(a[1]["what"], "migrate node1 -> spare1");
  EXPECT_EQ(a[1]["outcome"], "aborted");
  EXPECT_THAT(a[1]["why"].get<std::string>(),
              HasSubstr("aborted: joiner spare1 died"));
  EXPECT_EQ(a[2]["kind"], "drain");
  EXPECT_EQ(a[2]["what"], "drain node0");
  EXPECT_EQ(a[2]["why"], "migrated off by " + m1 + " (job job1) to spare0");
  EXPECT_EQ(a[3]["ref"], m1);
  EXPECT_EQ(a[3]["outcome"], "committed");
  EXPECT_EQ(a[3]["by"], "test");
  EXPECT_EQ(a[3]["time_unix_ns"], a[2]["time_unix_ns"]);
  EXPECT_GT(a[1]["time_unix_ns"], a[2]["time_unix_ns"]);
  EXPECT_GT(a[0]["time_unix_ns"], a[1]["time_unix_ns"]);
  // Every field, in a stable order.
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(out);
  std::vector<std::string> keys;
  for (const auto& [k, v] : ordered["actions"][0].items()) keys.push_back(k);
  EXPECT_THAT(keys,
              ::testing::ElementsAre("time_unix_ns", "time", "job_id", "kind",
                                     "what", "outcome", "by", "why", "ref"));
  EXPECT_EQ(a[3]["time"], "2023-11-14T22:13:22.000Z");

  ASSERT_EQ(Ctl({"-o", "json", "actions", "--job", "job1"}, &out), 0) << out;
  EXPECT_EQ(nlohmann::json::parse(out).at("actions").size(), 3u) << out;
  ASSERT_EQ(Ctl({"actions", "--job", "job1"}, &out), 0) << out;
  std::cout << "pitstopctl actions --job job1\n" << out;  // docs/migration.md
  EXPECT_THAT(out, HasSubstr("TIME"));
  EXPECT_THAT(out, HasSubstr("migrate node1 -> spare1"));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("cpu-job")));
  // With the action journal: the controller's hooks and Slurm calls too
  // (lines as FaultActions writes them), --job applied.
  const std::string journal = ::testing::TempDir() + "/actions.jsonl";
  {
    std::ofstream j(journal);
    j << R"({"time_unix_ns":1700000030000000000,"action":"slurm_drain",)"
      << R"("event":"confirmed","fault_id":"F1","job_id":"job1",)"
      << R"("target":"node1","command":"scontrol update ...","result":"ok",)"
      << R"("exit_code":0,"term_signal":0,"duration_ms":3,"detail":""})"
      << "\n\n"
      << R"({"time_unix_ns":1700000040000000000,"action":"hook",)"
      << R"("event":"confirmed","fault_id":"F2","job_id":"other",)"
      << R"("target":"","command":"/bin/page","result":"skipped",)"
      << R"("exit_code":-1,"term_signal":0,"duration_ms":0,)"
      << R"("detail":"policy of job other is not ACT"})"
      << "\n";
  }
  ASSERT_EQ(
      Ctl({"-o", "json", "actions", "--job", "job1", "--journal", journal},
          &out),
      0)
      << out;
  const nlohmann::json with = nlohmann::json::parse(out).at("actions");
  ASSERT_EQ(with.size(), 4u) << out;
  EXPECT_EQ(with[0]["kind"], "slurm_drain");  // the newest (t0 + 30 s)
  EXPECT_EQ(with[0]["what"], "slurm_drain node1 on confirmed of F1");
  EXPECT_EQ(with[0]["outcome"], "ok");
  EXPECT_EQ(with[0]["why"], "scontrol update ...");
  {
    std::ofstream j(journal, std::ios::app);
    j << "not json\n";
  }
  EXPECT_EQ(Ctl({"actions", "--journal", journal}, &out), 2);
  EXPECT_THAT(out, HasSubstr(journal + ":4: not an action journal record"));

  ASSERT_EQ(Ctl({"actions", "--help"}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("newest first"));
}

}  // namespace
}  // namespace pitstop::controller::testing
