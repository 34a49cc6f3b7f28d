// Actions on fault changes: the command runner (stdin, exit status,
// timeout, a command that ignores its input), hooks fired once per state
// change with the fault as JSON on stdin, the policy gate, the journal and
// metrics, and the Slurm helpers (reason, node names, hardware hosts).
// scontrol itself is exercised against a real Slurm by tests/deploy.
#include "src/controller/actions/fault_actions.h"

#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "prometheus/text_serializer.h"
#include "src/controller/actions/actions_config.h"
#include "src/controller/actions/command_runner.h"
#include "src/controller/actions/fault_metrics.h"

namespace pitstop::controller {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/pitstop-actions-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string Read(const std::string& name) const {
    std::ifstream in(path_ + "/" + name);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  std::string path_;
};

v1::Suspect At(v1::SuspectLevel level, const std::string& host,
               const std::string& peer = "") {
  v1::Suspect s;
  s.set_level(level);
  s.set_host(host);
  s.set_peer_host(peer);
  s.set_global_rank(0);
  s.set_gpu_index(0);
  return s;
}

v1::WatchFaultsResponse Change(v1::WatchFaultsResponse::Change c,
                               const std::string& id, const std::string& job,
                               v1::FaultState state, bool confirmed) {
  v1::WatchFaultsResponse r;
  r.set_change(c);
  v1::Fault* f = r.mutable_fault();
  f->set_fault_id(id);
  f->set_job_id(job);
  f->set_fault_class(v1::FAULT_CLASS_NON_COMM_SLOW);
  f->set_state(state);
  f->set_summary("rank 0 (node1 GPU 0) arrives late");
  if (confirmed) f->set_confirmed_unix_ns(1);
  *f->add_suspects() = At(v1::SUSPECT_LEVEL_GPU, "node1.cluster");
  *f->add_victims() = At(v1::SUSPECT_LEVEL_RANK, "node0");
  return r;
}

TEST(CommandRunnerTest, PassesStdinEnvAndExitStatus) {
  TempDir dir;
  CommandSpec spec;
  spec.argv = {"/bin/sh", "-c",
               "cat > " + dir.path() + "/in; echo \"$MY_VAR\"; exit 3"};
  spec.stdin_data = "hello\n";
  spec.env = {"MY_VAR=from-the-controller"};
  absl::StatusOr<CommandResult> r = RunCommand(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_FALSE(r->timed_out);
  EXPECT_FALSE(r->ok());
  EXPECT_EQ(dir.Read("in"), "hello\n");
  EXPECT_EQ(r->output, "from-the-controller\n");
  EXPECT_THAT(r->Describe(), HasSubstr("exit 3"));
}

TEST(CommandRunnerTest, TimeoutKillsTheProcessGroup) {
  CommandSpec spec;
  // A child of the shell holds the output open: the group must be killed.
  spec.argv = {"/bin/sh", "-c", "sleep 60 & sleep 60"};
  spec.timeout = absl::Milliseconds(200);
  absl::StatusOr<CommandResult> r = RunCommand(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->timed_out);
  EXPECT_EQ(r->term_signal, SIGTERM);
  EXPECT_FALSE(r->ok());
  EXPECT_THAT(r->Describe(), HasSubstr("after timeout"));
}

TEST(CommandRunnerTest, CommandThatIgnoresStdinIsNotBlockedOn) {
  CommandSpec spec;
  spec.argv = {"true"};
  spec.stdin_data = std::string(8 << 20, 'x');  // far beyond a socket buffer
  absl::StatusOr<CommandResult> r = RunCommand(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_TRUE(r->ok());
}

TEST(CommandRunnerTest, MissingProgramIsAnErrorNamingIt) {
  CommandSpec spec;
  spec.argv = {"/nonexistent/scontrol", "show", "node"};
  absl::StatusOr<CommandResult> r = RunCommand(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("/nonexistent/scontrol"));
}

TEST(ActionHelpersTest, HardwareHostsReasonAndNodeNames) {
  v1::Fault f = Change(v1::WatchFaultsResponse::CHANGE_UPDATED, "F12", "4711",
                       v1::FAULT_STATE_CONFIRMED, true)
                    .fault();
  *f.add_suspects() = At(v1::SUSPECT_LEVEL_LINK, "node3", "node2");
  *f.add_suspects() = At(v1::SUSPECT_LEVEL_RANK, "node9");
  EXPECT_THAT(HardwareHosts(f), ElementsAre("node1.cluster", "node2", "node3"));
  v1::Fault died;
  *died.add_suspects() = At(v1::SUSPECT_LEVEL_PROCESS, "node5");
  EXPECT_TRUE(HardwareHosts(died).empty());

  EXPECT_EQ(SlurmDrainReason(f),
            "pitstop F12: NON_COMM_SLOW job 4711: rank 0 (node1 GPU 0) "
            "arrives late");
  f.set_summary(std::string(500, 'y') + "\nsecond line");
  EXPECT_EQ(SlurmDrainReason(f).size(), 200u);

  SlurmOptions o;
  ASSERT_TRUE(ParseNodeMap({"node3=gpu-a03"}, &o.node_names).ok());
  SlurmNodes nodes(o);
  EXPECT_EQ(nodes.NodeName("node1.cluster"), "node1");
  EXPECT_EQ(nodes.NodeName("node3"), "gpu-a03");
  std::map<std::string, std::string> bad;
  EXPECT_THAT(ParseNodeMap({"node3"}, &bad).message(), HasSubstr("'node3'"));
}

class FaultActionsTest : public ::testing::Test {
 protected:
  std::unique_ptr<FaultActions> Make(HookOptions hooks) {
    FaultActions::Options o;
    o.hooks = std::move(hooks);
    o.journal_path = dir_.path() + "/actions.jsonl";
    o.may_act = [this](const std::string& job) {
      return acting_jobs_.count(job) > 0;
    };
    o.registry = &registry_;
    auto a = FaultActions::Create(std::move(o));
    EXPECT_TRUE(a.ok()) << a.status();
    return std::move(*a);
  }
  std::string Metrics() {
    return prometheus::TextSerializer().Serialize(registry_.Collect());
  }

  TempDir dir_;
  std::set<std::string> acting_jobs_ = {"job-act"};
  prometheus::Registry registry_;
};

TEST_F(FaultActionsTest, HooksFireOncePerChangeWithTheFaultOnStdin) {
  HookOptions h;
  // Each run appends its event, fault id and stdin to a file per event.
  h.on_confirmed = "cat >> " + dir_.path() + "/confirmed";
  h.on_resolved =
      "echo \"$PITSTOP_EVENT $PITSTOP_FAULT_ID $PITSTOP_HOSTS\" >> " +
      dir_.path() + "/resolved; exit 7";
  auto actions = Make(h);
  using C = v1::WatchFaultsResponse;
  actions->OnFaultChange(Change(C::CHANGE_OPENED, "F1", "job-act",
                                v1::FAULT_STATE_SUSPECTED, false));
  actions->OnFaultChange(Change(C::CHANGE_UPDATED, "F1", "job-act",
                                v1::FAULT_STATE_CONFIRMED, true));
  actions->OnFaultChange(Change(C::CHANGE_UPDATED, "F1", "job-act",
                                v1::FAULT_STATE_CONFIRMED, true));
  actions->OnFaultChange(Change(C::CHANGE_UPDATED, "F1", "job-act",
                                v1::FAULT_STATE_ACKNOWLEDGED, true));
  actions->OnFaultChange(Change(C::CHANGE_RESOLVED, "F1", "job-act",
                                v1::FAULT_STATE_RESOLVED, true));
  ASSERT_TRUE(actions->WaitIdle(absl::Seconds(30)));

  // One confirmed run; its stdin is one JSON document with zero values.
  const std::string confirmed = dir_.Read("confirmed");
  nlohmann::json doc = nlohmann::json::parse(confirmed, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << confirmed;
  EXPECT_EQ(doc["event"], "confirmed");
  EXPECT_EQ(doc["fault"]["fault_id"], "F1");
  EXPECT_EQ(doc["fault"]["state"], "FAULT_STATE_CONFIRMED");
  EXPECT_EQ(doc["fault"]["suspects"][0]["gpu_index"], 0);
  EXPECT_EQ(doc["hardware_hosts"], nlohmann::json::array({"node1.cluster"}));
  EXPECT_EQ(doc["policy_allows_acting"], true);
  EXPECT_EQ(dir_.Read("resolved"), "resolved F1 node1.cluster\n");

  std::vector<ActionRecord> records = actions->Records();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].event, "confirmed");
  EXPECT_EQ(records[0].result, "ok");
  EXPECT_EQ(records[0].exit_code, 0);
  EXPECT_EQ(records[1].event, "resolved");
  EXPECT_EQ(records[1].result, "failed");
  EXPECT_EQ(records[1].exit_code, 7);
  // The journal has the same, one JSON object per line.
  std::istringstream journal(dir_.Read("actions.jsonl"));
  std::string line;
  std::vector<nlohmann::json> lines;
  while (std::getline(journal, line))
    lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1]["fault_id"], "F1");
  EXPECT_EQ(lines[1]["exit_code"], 7);
  EXPECT_EQ(lines[1]["result"], "failed");
  EXPECT_THAT(Metrics(),
              HasSubstr("pitstop_controller_actions_total{action=\"hook\","
                        "event=\"resolved\",result=\"failed\"} 1"));
}

TEST_F(FaultActionsTest, ObservePolicySkipsAndSaysWhy) {
  HookOptions h;
  h.on_confirmed = "touch " + dir_.path() + "/ran";
  auto actions = Make(h);
  actions->OnFaultChange(Change(v1::WatchFaultsResponse::CHANGE_UPDATED, "F2",
                                "job-observe", v1::FAULT_STATE_CONFIRMED,
                                true));
  ASSERT_TRUE(actions->WaitIdle(absl::Seconds(30)));
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/ran"));
  std::vector<ActionRecord> records = actions->Records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].result, "skipped");
  EXPECT_THAT(records[0].detail, HasSubstr("not ACT"));

  // Hooks that do not need ACT (notifications) run for every job.
  h.require_act = false;
  auto notify = Make(h);
  notify->OnFaultChange(Change(v1::WatchFaultsResponse::CHANGE_UPDATED, "F2",
                               "job-observe", v1::FAULT_STATE_CONFIRMED, true));
  ASSERT_TRUE(notify->WaitIdle(absl::Seconds(30)));
  EXPECT_TRUE(std::filesystem::exists(dir_.path() + "/ran"));
}

TEST_F(FaultActionsTest, ExistingFaultsFireOnlyLaterChanges) {
  HookOptions h;
  h.on_confirmed = "echo c >> " + dir_.path() + "/log";
  h.on_resolved = "echo r >> " + dir_.path() + "/log";
  h.on_migrated = "echo m >> " + dir_.path() + "/log";
  auto actions = Make(h);
  using C = v1::WatchFaultsResponse;
  actions->OnFaultChange(Change(C::CHANGE_EXISTING, "F3", "job-act",
                                v1::FAULT_STATE_CONFIRMED, true));
  actions->OnFaultChange(Change(C::CHANGE_UPDATED, "F3", "job-act",
                                v1::FAULT_STATE_CONFIRMED, true));
  actions->OnFaultChange(Change(C::CHANGE_UPDATED, "F3", "job-act",
                                v1::FAULT_STATE_MITIGATING, true));
  // Suspected and resolved without being confirmed: nothing to undo.
  actions->OnFaultChange(Change(C::CHANGE_RESOLVED, "F4", "job-act",
                                v1::FAULT_STATE_RESOLVED, false));
  actions->OnFaultChange(Change(C::CHANGE_RESOLVED, "F3", "job-act",
                                v1::FAULT_STATE_RESOLVED, true));
  ASSERT_TRUE(actions->WaitIdle(absl::Seconds(30)));
  EXPECT_EQ(dir_.Read("log"), "m\nr\n");
}

TEST_F(FaultActionsTest, HookTimeoutIsRecordedAndStopIsPrompt) {
  HookOptions h;
  h.on_confirmed = "sleep 60";
  h.timeout = absl::Milliseconds(200);
  auto actions = Make(h);
  actions->OnFaultChange(Change(v1::WatchFaultsResponse::CHANGE_UPDATED, "F5",
                                "job-act", v1::FAULT_STATE_CONFIRMED, true));
  ASSERT_TRUE(actions->WaitIdle(absl::Seconds(30)));
  std::vector<ActionRecord> records = actions->Records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].result, "timeout");
  EXPECT_EQ(records[0].term_signal, SIGTERM);

  // Stop() ends a running hook instead of waiting for its timeout.
  h.on_confirmed = "touch " + dir_.path() + "/started; sleep 600";
  h.timeout = absl::Seconds(600);
  auto stopping = Make(h);
  stopping->OnFaultChange(Change(v1::WatchFaultsResponse::CHANGE_UPDATED, "F6",
                                 "job-act", v1::FAULT_STATE_CONFIRMED, true));
  for (int i = 0;
       i < 3000 && !std::filesystem::exists(dir_.path() + "/started"); ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(std::filesystem::exists(dir_.path() + "/started"));
  stopping->Stop();  // the ctest timeout (120 s) catches a wait of 600 s
  records = stopping->Records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].result, "timeout");
}

TEST_F(FaultActionsTest, SlurmDrainNeedsActAndRecordsWhatScontrolDid) {
  FaultActions::Options o;
  o.slurm.enabled = true;
  o.slurm.scontrol = "/nonexistent/scontrol";  // never found: "error"
  o.may_act = [this](const std::string& job) {
    return acting_jobs_.count(job) > 0;
  };
  auto a = FaultActions::Create(std::move(o));
  ASSERT_TRUE(a.ok()) << a.status();
  using C = v1::WatchFaultsResponse;
  // Observe: nothing runs, the skip says why.
  (*a)->OnFaultChange(Change(C::CHANGE_UPDATED, "F7", "job-observe",
                             v1::FAULT_STATE_CONFIRMED, true));
  // Act: scontrol is run (and cannot be started here).
  (*a)->OnFaultChange(Change(C::CHANGE_UPDATED, "F8", "job-act",
                             v1::FAULT_STATE_CONFIRMED, true));
  // A dead process is not a hardware fault: no drain at all.
  v1::WatchFaultsResponse died = Change(C::CHANGE_UPDATED, "F9", "job-act",
                                        v1::FAULT_STATE_CONFIRMED, true);
  died.mutable_fault()->clear_suspects();
  *died.mutable_fault()->add_suspects() =
      At(v1::SUSPECT_LEVEL_PROCESS, "node2");
  (*a)->OnFaultChange(died);
  ASSERT_TRUE((*a)->WaitIdle(absl::Seconds(30)));
  std::vector<ActionRecord> r = (*a)->Records();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].fault_id, "F7");
  EXPECT_EQ(r[0].action, "slurm_drain");
  EXPECT_EQ(r[0].result, "skipped");
  EXPECT_THAT(r[0].detail, HasSubstr("not ACT"));
  EXPECT_EQ(r[1].fault_id, "F8");
  EXPECT_EQ(r[1].result, "error");
  EXPECT_EQ(r[1].target, "node1");  // node1.cluster, domain stripped
  EXPECT_THAT(r[1].detail, HasSubstr("/nonexistent/scontrol"));
  EXPECT_THAT(r[1].command, HasSubstr("NodeName=node1 State=DRAIN "
                                      "Reason=pitstop F8: NON_COMM_SLOW"));
}

TEST(FaultMetricsTest, OpenFaultsAndSuspectsFollowTheWatchStream) {
  prometheus::Registry registry;
  FaultMetrics m(&registry);
  auto text = [&] {
    return prometheus::TextSerializer().Serialize(registry.Collect());
  };
  using C = v1::WatchFaultsResponse;
  m.OnFaultChange(
      Change(C::CHANGE_EXISTING, "F1", "j", v1::FAULT_STATE_CONFIRMED, true));
  m.OnFaultChange(
      Change(C::CHANGE_OPENED, "F2", "j", v1::FAULT_STATE_CONFIRMED, true));
  EXPECT_THAT(text(), HasSubstr("pitstop_controller_open_faults{class=\"non_"
                                "comm_slow\",state=\"confirmed\"} 2"));
  EXPECT_THAT(text(), HasSubstr("fault_id=\"F2\",global_rank=\"0\",gpu=\"0\","
                                "host=\"node1.cluster\",level=\"gpu\"} 1"));
  m.OnFaultChange(
      Change(C::CHANGE_UPDATED, "F2", "j", v1::FAULT_STATE_ACKNOWLEDGED, true));
  m.OnFaultChange(
      Change(C::CHANGE_RESOLVED, "F1", "j", v1::FAULT_STATE_RESOLVED, true));
  const std::string after = text();
  EXPECT_THAT(after, HasSubstr("state=\"acknowledged\"} 1"));
  EXPECT_THAT(after, Not(HasSubstr("state=\"confirmed\"")));
  EXPECT_THAT(after, Not(HasSubstr("fault_id=\"F1\"")));
}

TEST(ActionsConfigTest, BadValuesNameTheKey) {
  ActionsConfig c;
  c.timeout_ms = 0;
  EXPECT_THAT(c.ToOptions("/var/lib/pitstop/controller.db").status().message(),
              HasSubstr("actions.timeout_ms"));
  c.timeout_ms = 1000;
  c.node_map = {"=x"};
  EXPECT_THAT(c.ToOptions("/tmp/c.db").status().message(),
              HasSubstr("slurm.node_map"));
  c.node_map = {};
  auto o = c.ToOptions("/var/lib/pitstop/controller.db");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->journal_path, "/var/lib/pitstop/actions.jsonl");
  EXPECT_FALSE(c.Enabled());
  c.slurm_enabled = true;
  EXPECT_TRUE(c.Enabled());
}

}  // namespace
}  // namespace pitstop::controller
