// The migration metrics (docs/migration.md, "Metrics") read from the
// registry, driven through the state machine on a FakeClock: a commit's
// phase durations and downtime, and one abort of each reason class.
#include "src/controller/migration/migration_metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "pitstop/clock.h"
#include "src/controller/migration/migration_manager.h"
#include "src/controller/store/fault_store.h"
#include "tests/controller/metric_reader.h"

namespace pitstop::controller {
namespace {

using Phase = v1::MigrationDirective;
using testing::MetricValue;
using testing::Read;

// Every host's agent is connected but those in `down`.
class Agents final : public MigrationSender {
 public:
  bool SendMigration(const std::string& host,
                     const v1::MigrationDirective&) override {
    return !down.count(host);
  }
  std::set<std::string> down;
};

class MigrationMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = std::filesystem::temp_directory_path() /
          ("pitstop-migmetrics-" + std::to_string(::getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name() +
           ".db");
    std::filesystem::remove(db_);
    Open(/*resume=*/true);
  }
  void TearDown() override {
    mm_.reset();
    store_.reset();
    std::filesystem::remove(db_);
  }
  // A controller (re)start on the same database, the same metrics.
  void Open(bool resume) {
    mm_.reset();
    store_.reset();
    auto s = FaultStore::Open(db_.string());
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(*s);
    MigrationManager::Options o;
    o.clock = &clock_;
    o.prepare_timeout = absl::Seconds(30);
    o.switch_timeout = absl::Seconds(10);
    o.resume = resume;
    o.events = &metrics_;
    auto m = MigrationManager::Create(o, store_.get(), &agents_);
    ASSERT_TRUE(m.ok()) << m.status();
    mm_ = std::move(*m);
  }
  // Job "j": node0 (leaving), node1, node2; joiner spare0.
  v1::Migration Start(bool from_replica = false) {
    MigrationPlan p;
    p.job_id = "j";
    p.leaver_host = "node0";
    p.joiner_host = "spare0";
    p.ranks_by_host = {{"node0", {0, 1}}, {"node1", {2, 3}}, {"node2", {4}}};
    p.comms = {{0xA1, "world"}};
    p.switch_comm_hash = 0xA1;
    p.requested_by = "alice";
    p.from_replica = from_replica;
    absl::StatusOr<v1::Migration> m = mm_->Start(p);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *m : v1::Migration();
  }
  void Answer(const v1::Migration& m, Phase::Phase phase,
              std::initializer_list<const char*> hosts, bool ok = true) {
    for (const char* h : hosts) {
      v1::MigrationAck a;
      a.set_migration_id(m.migration_id());
      a.set_epoch(m.epoch());
      a.set_phase(phase);
      a.set_ok(ok);
      a.set_progress_seq(10);
      ASSERT_TRUE(mm_->OnAck(h, a).ok()) << h;
    }
  }
  v1::MigrationState State(const v1::Migration& m) {
    absl::StatusOr<v1::Migration> got = mm_->Get(m.migration_id());
    return got.ok() ? got->state() : v1::MIGRATION_STATE_UNSPECIFIED;
  }
  double Value(const std::string& name,
               const std::map<std::string, std::string>& labels,
               Read what = Read::kValue) {
    return MetricValue(registry_, name, labels, what);
  }
  double Aborted(const std::string& reason) {
    return Value("pitstop_controller_migrations_aborted_total",
                 {{"reason", reason}});
  }

  std::filesystem::path db_;
  FakeClock clock_;
  Agents agents_;
  prometheus::Registry registry_;
  MigrationMetrics metrics_{&registry_};
  std::unique_ptr<FaultStore> store_;
  std::unique_ptr<MigrationManager> mm_;
};

TEST_F(MigrationMetricsTest, EverySeriesExistsBeforeTheFirstMigration) {
  EXPECT_EQ(Value("pitstop_controller_migrations_committed_total", {}), 0);
  for (const char* origin : {"policy", "operator"}) {
    EXPECT_EQ(Value("pitstop_controller_migrations_started_total",
                    {{"origin", origin}}),
              0);
  }
  for (AbortCause c : kAbortCauses) EXPECT_EQ(Aborted(AbortCauseName(c)), 0);
  for (const char* p : {"queued", "make_ids", "prepare", "switch"}) {
    EXPECT_EQ(Value("pitstop_controller_migration_phase_seconds",
                    {{"phase", p}}, Read::kCount),
              0)
        << p;
  }
  EXPECT_EQ(Value("pitstop_controller_migration_downtime_seconds",
                  {{"kind", "expected"}}, Read::kCount),
            0);
}

TEST_F(MigrationMetricsTest, CommitObservesItsPhasesAndDowntime) {
  const v1::Migration m = Start();
  clock_.Advance(absl::Seconds(2));
  Answer(m, Phase::PHASE_PREPARE, {"node0", "node1", "node2", "spare0"});
  clock_.Advance(absl::Seconds(3));
  Answer(m, Phase::PHASE_SWITCH_AT, {"node1", "node2", "spare0"});
  ASSERT_EQ(State(m), v1::MIGRATION_STATE_COMMITTED);

  EXPECT_EQ(Value("pitstop_controller_migrations_started_total",
                  {{"origin", "operator"}}),
            1);
  EXPECT_EQ(Value("pitstop_controller_migrations_committed_total", {}), 1);
  const std::string phase = "pitstop_controller_migration_phase_seconds";
  EXPECT_EQ(Value(phase, {{"phase", "queued"}}, Read::kCount), 1);
  EXPECT_EQ(Value(phase, {{"phase", "queued"}}, Read::kSum), 0);
  EXPECT_EQ(Value(phase, {{"phase", "make_ids"}}, Read::kCount), 0);
  EXPECT_EQ(Value(phase, {{"phase", "prepare"}}, Read::kSum), 2);
  EXPECT_EQ(Value(phase, {{"phase", "switch"}}, Read::kSum), 3);
  const std::string down = "pitstop_controller_migration_downtime_seconds";
  EXPECT_EQ(Value(down, {{"kind", "expected"}}, Read::kCount), 1);
  EXPECT_EQ(Value(down, {{"kind", "expected"}}, Read::kSum), 3);
  EXPECT_EQ(Value(down, {{"kind", "from_replica"}}, Read::kCount), 0);

  // From a replica the job stood still from the request to the switch.
  const v1::Migration r = Start(/*from_replica=*/true);
  clock_.Advance(absl::Seconds(4));
  Answer(r, Phase::PHASE_PREPARE, {"node1", "node2", "spare0"});
  clock_.Advance(absl::Seconds(1));
  Answer(r, Phase::PHASE_SWITCH_AT, {"node1", "node2", "spare0"});
  ASSERT_EQ(State(r), v1::MIGRATION_STATE_COMMITTED);
  EXPECT_EQ(Value(down, {{"kind", "from_replica"}}, Read::kSum), 5);
  EXPECT_EQ(Value("pitstop_controller_migrations_committed_total", {}), 2);
}

TEST_F(MigrationMetricsTest, AbortsAreCountedByReasonClass) {
  v1::Migration m = Start();
  ASSERT_TRUE(mm_->Abort(m.migration_id(), "operator changed their mind").ok());
  EXPECT_EQ(Aborted("operator"), 1);

  m = Start();
  clock_.Advance(absl::Seconds(31));
  mm_->Tick();
  EXPECT_EQ(Aborted("prepare_timeout"), 1);

  m = Start();
  Answer(m, Phase::PHASE_PREPARE, {"node0", "node1", "node2", "spare0"});
  clock_.Advance(absl::Seconds(11));
  mm_->Tick();
  EXPECT_EQ(Aborted("switch_timeout"), 1);

  m = Start();
  Answer(m, Phase::PHASE_PREPARE, {"node1"}, /*ok=*/false);
  EXPECT_EQ(Aborted("member_failed"), 1);

  const std::pair<const char*, const char*> deaths[] = {
      {"spare0", "joiner_died"},
      {"node0", "leaver_died"},
      {"node1", "member_died"}};
  for (const auto& [host, reason] : deaths) {
    m = Start();
    mm_->OnHostDown(host, "", "agent stream lost");
    EXPECT_EQ(State(m), v1::MIGRATION_STATE_ABORTED) << host;
    EXPECT_EQ(Aborted(reason), 1) << reason;
  }

  agents_.down = {"node2"};
  m = Start();
  EXPECT_EQ(Aborted("unreachable"), 1);
  agents_.down.clear();

  m = Start();
  Open(/*resume=*/false);
  EXPECT_EQ(Aborted("restart"), 1);

  EXPECT_EQ(Value("pitstop_controller_migrations_started_total",
                  {{"origin", "operator"}}),
            9);
  EXPECT_EQ(Value("pitstop_controller_migrations_committed_total", {}), 0);
  // The phases they completed: the switch timeout's PREPARE only.
  EXPECT_EQ(Value("pitstop_controller_migration_phase_seconds",
                  {{"phase", "prepare"}}, Read::kCount),
            1);
}

}  // namespace
}  // namespace pitstop::controller
