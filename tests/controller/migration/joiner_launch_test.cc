// A migration whose joiners the standby's agent cannot start, end to end in
// one process: the controller's migration state machine (FakeClock, SQLite)
// sends its directives to agents' migration planes — the standby's is the
// library relay with the operator's plain launcher, the other hosts answer
// at once (emulated) — and their answers go back to the state machine.
// A launch that fails aborts the migration at once with the launcher's
// reason, ABORT reaches every member (the job trains on, on its old
// communicators); no phase timeout is involved: the fake clock never moves.
// Without a launcher for the job, the same migration waits for joiners
// that nobody starts until its timeout (the behaviour before launchers).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <unistd.h>

#include <deque>
#include <filesystem>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "pitstop/clock.h"
#include "src/agent/agent_core.h"
#include "src/agent/joiner_config.h"
#include "src/agent/library_migration_plane.h"
#include "src/agent/migration_plane.h"
#include "src/controller/migration/migration_manager.h"
#include "src/controller/store/fault_store.h"

namespace pitstop::controller {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Phase = v1::MigrationDirective;

std::string JoinerUser() {
  if (geteuid() == 0) return "nobody";
  struct passwd* pw = getpwuid(geteuid());
  return pw != nullptr ? pw->pw_name : std::to_string(geteuid());
}

// Delivers each directive to the host's migration plane; their answers are
// queued and handed to the manager after the call that sent it (the
// manager is not re-entrant).
class Agents final : public MigrationSender {
 public:
  bool SendMigration(const std::string& host,
                     const v1::MigrationDirective& d) override {
    sent.emplace_back(host, d);
    auto it = planes.find(host);
    if (it == planes.end()) return false;
    it->second->OnDirective(d);
    return true;
  }
  agent::MigrationPlane::AckFn AckFrom(const std::string& host) {
    return
        [this, host](const v1::MigrationAck& a) { acks.emplace_back(host, a); };
  }
  void Pump(MigrationManager* mm) {
    while (!acks.empty()) {
      auto [host, ack] = acks.front();
      acks.pop_front();
      EXPECT_TRUE(mm->OnAck(host, ack).ok());
    }
  }
  int Count(Phase::Phase phase, const std::string& host) const {
    int n = 0;
    for (const auto& [h, d] : sent) n += d.phase() == phase && h == host;
    return n;
  }
  std::map<std::string, std::unique_ptr<agent::MigrationPlane>> planes;
  std::deque<std::pair<std::string, v1::MigrationAck>> acks;
  std::vector<std::pair<std::string, v1::MigrationDirective>> sent;
};

class JoinerLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("pitstop-joiner-launch-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    auto s = FaultStore::Open((dir_ / "pitstop.db").string());
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(*s);
    for (const char* h : {"node0", "node1"}) {
      agents_.planes[h] =
          std::make_unique<agent::EmulatedMigrationPlane>(agents_.AckFrom(h));
    }
    agent::AgentCoreOptions co;
    co.host = "spare0";
    core_ = std::make_unique<agent::AgentCore>(&clock_, co, nullptr);
    MigrationManager::Options o;
    o.clock = &clock_;
    o.prepare_timeout = absl::Seconds(60);
    auto m = MigrationManager::Create(o, store_.get(), &agents_);
    ASSERT_TRUE(m.ok()) << m.status();
    mm_ = std::move(*m);
  }
  void TearDown() override {
    mm_.reset();
    agents_.planes.clear();
    core_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  // The standby's agent: the library relay with the launchers of `yaml`.
  void Standby(const std::string& yaml) {
    agent::LibraryMigrationPlane::Launch launch;
    // The launcher watches a joiner's start on the real clock (it returns
    // as soon as the joiner ended); the migration's clock never moves.
    auto ls = agent::ParseJoinerLaunchers(yaml, "joiners.yaml", Clock::Real());
    ASSERT_TRUE(ls.ok()) << ls.status();
    launch.launchers = std::move(*ls);
    launch.host = "spare0";
    agents_.planes["spare0"] = std::make_unique<agent::LibraryMigrationPlane>(
        core_.get(), agents_.AckFrom("spare0"), std::move(launch));
  }
  static std::string Job(const std::string& command, const std::string& user) {
    return absl::StrCat(
        "jobs:\n  torch-job:\n    launcher: plain\n    user: ", user,
        "\n    command: ", command, "\n    start_grace_ms: 60000\n");
  }
  // node1's ranks 2, 3 move to spare0; the joiner's library makes the ids
  // (migration.data_plane library) unless `ids_from_joiner` is false.
  v1::Migration Migrate(bool ids_from_joiner = true) {
    MigrationPlan p;
    p.job_id = "torch-job";
    p.leaver_host = "node1";
    p.joiner_host = "spare0";
    p.ranks_by_host = {{"node0", {0, 1}}, {"node1", {2, 3}}};
    p.comms = {{0xA1, "world"}};
    p.switch_comm_hash = 0xA1;
    p.requested_by = "test";
    p.ids_from_joiner = ids_from_joiner;
    auto m = mm_->Start(p);
    EXPECT_TRUE(m.ok()) << m.status();
    agents_.Pump(mm_.get());
    auto now = mm_->Get(m->migration_id());
    EXPECT_TRUE(now.ok()) << now.status();
    return *now;
  }
  // Aborted by the launcher: at once (the fake clock never moved, no
  // timeout), with its reason, ABORT sent to every member.
  void ExpectAbortedByLauncher(const v1::Migration& m, const std::string& phase,
                               const std::string& reason) {
    EXPECT_EQ(m.state(), v1::MIGRATION_STATE_ABORTED);
    EXPECT_THAT(m.abort_reason(),
                HasSubstr(absl::StrCat("joiner spare0 failed ", phase,
                                       ": plain launcher: joiner of rank 2")));
    EXPECT_THAT(m.abort_reason(), HasSubstr(reason));
    EXPECT_THAT(m.abort_reason(), Not(HasSubstr("timed out")));
    EXPECT_EQ(m.finished_unix_ns(), m.created_unix_ns());
    for (const char* h : {"node0", "node1", "spare0"}) {
      EXPECT_EQ(agents_.Count(Phase::PHASE_ABORT, h), 1) << h;
    }
  }

  std::filesystem::path dir_;
  FakeClock clock_;
  Agents agents_;
  std::unique_ptr<FaultStore> store_;
  std::unique_ptr<agent::AgentCore> core_;
  std::unique_ptr<MigrationManager> mm_;
};

TEST_F(JoinerLaunchTest, MissingCommandAbortsAtMakeIdsWithTheLaunchersReason) {
  Standby(Job("[/nonexistent/bin/python3, train.py]", JoinerUser()));
  const v1::Migration m = Migrate();
  ExpectAbortedByLauncher(m, "MAKE_IDS",
                          "/nonexistent/bin/python3): execve: No such file or "
                          "directory");
  EXPECT_EQ(agents_.Count(Phase::PHASE_PREPARE, "node0"), 0);
}

TEST_F(JoinerLaunchTest,
       MissingCommandAbortsAtPrepareWhenTheControllerMakesIds) {
  Standby(Job("[/nonexistent/bin/python3, train.py]", JoinerUser()));
  const v1::Migration m = Migrate(/*ids_from_joiner=*/false);
  ExpectAbortedByLauncher(m, "PREPARE", "execve: No such file or directory");
}

TEST_F(JoinerLaunchTest, JoinerThatExitsAtOnceAbortsWithItsStatus) {
  Standby(Job("[/bin/sh, -c, \"exit 7\"]", JoinerUser()));
  const v1::Migration m = Migrate();
  ExpectAbortedByLauncher(m, "MAKE_IDS", "exited with status 7");
}

TEST_F(JoinerLaunchTest, UnknownUserAbortsNamingTheUser) {
  Standby(Job("[/bin/true]", "no-such-user-pitstop"));
  const v1::Migration m = Migrate();
  ExpectAbortedByLauncher(m, "MAKE_IDS",
                          "user 'no-such-user-pitstop' is unknown");
}

TEST_F(JoinerLaunchTest, RepeatedDirectiveIsAnsweredAgainNotRelaunched) {
  Standby(Job("[/bin/sh, -c, \"exit 7\"]", JoinerUser()));
  const v1::Migration m = Migrate();
  ASSERT_EQ(m.state(), v1::MIGRATION_STATE_ABORTED);
  v1::MigrationDirective again;
  for (const auto& [h, d] : agents_.sent) {
    if (h == "spare0" && d.phase() == Phase::PHASE_MAKE_IDS) again = d;
  }
  agents_.acks.clear();
  agents_.planes["spare0"]->OnDirective(again);
  ASSERT_EQ(agents_.acks.size(), 1u);
  EXPECT_FALSE(agents_.acks[0].second.ok());
  EXPECT_THAT(agents_.acks[0].second.error(),
              HasSubstr("exited with status 7"));
}

// Before launchers (and for a job the operator configured none for): the
// joiners are nobody's to start, so the migration waits in MAKE_IDS until
// the prepare timeout.
TEST_F(JoinerLaunchTest, WithoutALauncherTheMigrationWaitsForItsTimeout) {
  agents_.planes["spare0"] = std::make_unique<agent::LibraryMigrationPlane>(
      core_.get(), agents_.AckFrom("spare0"));
  v1::Migration m = Migrate();
  EXPECT_EQ(m.state(), v1::MIGRATION_STATE_PREPARING);
  clock_.Advance(absl::Seconds(61));
  mm_->Tick();
  m = *mm_->Get(m.migration_id());
  EXPECT_EQ(m.state(), v1::MIGRATION_STATE_ABORTED);
  EXPECT_THAT(m.abort_reason(), HasSubstr("MAKE_IDS timed out"));
}

}  // namespace
}  // namespace pitstop::controller
