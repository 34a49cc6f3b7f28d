// Several controllers on a real etcd: the fenced store, the election and
// the core's follower behaviour. Skips loudly without the etcd binary.
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pitstop/leader_hint.h"
#include "pitstop/v1/controller.grpc.pb.h"
#include "src/c4p/fabric_io.h"
#include "src/c4p/flows.h"
#include "src/c4p/plan_codec.h"
#include "src/c4p/planner.h"
#include "src/controller/api/controller_service.h"
#include "src/controller/controller.h"
#include "src/controller/ha/etcd_client.h"
#include "src/controller/ha/etcd_fault_store.h"
#include "src/controller/ha/ha_controller.h"
#include "src/controller/ha/leader_election.h"
#include "src/controller/migration/migration_manager.h"
#include "tests/controller/ha/etcd_fixture.h"
#include "tests/controller/ha/ha_fixture.h"
#include "tests/controller/test_agent.h"

namespace pitstop::controller::ha {
namespace {

using testing::EtcdProcess;
using ::testing::HasSubstr;
using testing::TestChannel;

v1::Fault MakeFault(const std::string& id, const std::string& job) {
  v1::Fault f;
  f.set_fault_id(id);
  f.set_job_id(job);
  f.set_state(v1::FAULT_STATE_SUSPECTED);
  f.set_summary("rank 3 slow");
  return f;
}

// The agents' side of migrations: records what each host was told; every
// host is connected.
class RecordingSender final : public MigrationSender {
 public:
  bool SendMigration(const std::string& host,
                     const v1::MigrationDirective& d) override {
    sent.emplace_back(host, d);
    return true;
  }
  std::vector<std::pair<std::string, v1::MigrationDirective>> sent;
};

// Job "j": node0 (ranks 0-1, leaving), node1 (2-3); `joiner` takes over.
MigrationPlan MakePlan(const std::string& job, const std::string& joiner) {
  MigrationPlan p;
  p.job_id = job;
  p.leaver_host = "node0";
  p.joiner_host = joiner;
  p.ranks_by_host = {{"node0", {0, 1}}, {"node1", {2, 3}}};
  p.comms = {{0xA1, "world"}};
  p.switch_comm_hash = 0xA1;
  p.requested_by = "test";
  return p;
}

TEST(LeaderHintTest, ParsesTheLeaderAndControllerLists) {
  EXPECT_EQ(LeaderFromMessage("controller a:1 is a follower; leader=b:2"),
            "b:2");
  EXPECT_EQ(LeaderFromMessage("fenced (x is held by b:2); leader=b:2; more"),
            "b:2");
  EXPECT_EQ(LeaderFromMessage("no leader elected yet; retry shortly"), "");
  EXPECT_EQ(SplitControllerList(" a:1, b:2 ,"),
            (std::vector<std::string>{"a:1", "b:2"}));
  EXPECT_EQ(SplitControllerList("unix:/run/c.sock"),
            (std::vector<std::string>{"unix:/run/c.sock"}));
}

TEST(HaOptionsTest, RefusesAnAddressFollowersCannotHandOut) {
  HaOptions o;
  EXPECT_TRUE(o.Validate("0.0.0.0:7070").ok());  // disabled: SQLite
  o.etcd_endpoints = "127.0.0.1:2379";
  EXPECT_TRUE(absl::IsInvalidArgument(o.Validate("0.0.0.0:7070")));
  EXPECT_TRUE(absl::IsInvalidArgument(o.Validate("127.0.0.1:0")));
  EXPECT_TRUE(o.Validate("10.0.0.1:7070").ok());
  o.advertise = "ctl1:7070";
  EXPECT_TRUE(o.Validate("0.0.0.0:7070").ok());
  o.lease_ttl_s = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(o.Validate("0.0.0.0:7070")));
  EXPECT_TRUE(absl::IsInvalidArgument(
      EtcdClient::Create(
          {.endpoints = "127.0.0.1:1,etcd-b:2379", .timeout = absl::Seconds(1)})
          .status()));
}

TEST_F(HaTest, StoreKeepsFaultsDrainsAndPoliciesWhileLeading) {
  auto client = Client();
  auto election = Election(client.get(), "a:1");
  election->Start();
  ASSERT_TRUE(WaitFor([&] { return election->IsLeader(); }));
  ElectionFence fence(election.get());
  EtcdFaultStore store(client.get(), &fence, prefix_);
  bool ignored = true;
  ASSERT_TRUE(store.Upsert(MakeFault("F7", "job1"), &ignored).ok());
  EXPECT_FALSE(ignored);
  ASSERT_TRUE(store.Upsert(MakeFault("F9", "job2"), &ignored).ok());
  auto acked = store.Acknowledge("F7", "ops", "looking", 5);
  ASSERT_TRUE(acked.ok()) << acked.status();
  EXPECT_EQ(acked->state(), v1::FAULT_STATE_ACKNOWLEDGED);
  // The engine reporting it again keeps the operator's acknowledgement.
  auto again = store.Upsert(MakeFault("F7", "job1"), &ignored);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->state(), v1::FAULT_STATE_ACKNOWLEDGED);
  ASSERT_TRUE(store.Resolve("F9", "ops", "", 6).ok());
  EXPECT_EQ(store.NextFaultNumber(), 10u);
  EXPECT_EQ(store.OpenCount(), 1u);
  auto all = store.List("", true, 0);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].fault_id(), "F9");  // newest first
  EXPECT_TRUE(absl::IsNotFound(store.Get("F1").status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(
      store.Acknowledge("F9", "ops", "", 7).status()));
  ASSERT_TRUE(store.SetDrain("n1", "bad NIC").ok());
  ASSERT_TRUE(store.SetDrain("n2", "bad GPU").ok());
  ASSERT_TRUE(store.ClearDrain("n2").ok());
  EXPECT_EQ(store.Drains(),
            (std::map<std::string, std::string>{{"n1", "bad NIC"}}));
  v1::JobPolicy p;
  p.set_window_ms(1234);
  ASSERT_TRUE(store.SavePolicy("job1", p).ok());
  EXPECT_EQ(store.Policies()["job1"].window_ms(), 1234u);
  EXPECT_EQ(store.fenced_writes_refused(), 0u);
}

TEST_F(HaTest, DeposedLeaderWriteIsRefusedAndCounted) {
  auto client_a = Client();
  auto client_b = Client();
  auto a = Election(client_a.get(), "a:1");
  a->Start();
  ASSERT_TRUE(WaitFor([&] { return a->IsLeader(); }));
  const EtcdFence a_fence = a->Fence();
  StaleFence stale(a_fence);
  EtcdFaultStore store_a(client_a.get(), &stale, prefix_);
  bool ignored = false;
  ASSERT_TRUE(store_a.Upsert(MakeFault("F1", "job"), &ignored).ok());

  // A pauses (stops renewing) and its lease runs out in etcd; B wins.
  a->Stop(/*resign=*/false);
  ASSERT_TRUE(client_b->Revoke(a_fence.lease).ok());  // = expiry, sooner
  auto b = Election(client_b.get(), "b:2");
  b->Start();
  ASSERT_TRUE(WaitFor([&] { return b->IsLeader(); }));
  ElectionFence b_fence(b.get());
  EtcdFaultStore store_b(client_b.get(), &b_fence, prefix_);

  // A wakes up still believing it leads: etcd refuses every write.
  absl::Status s = store_a.Resolve("F1", "old-leader", "", 9).status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("leader=b:2"));
  EXPECT_TRUE(absl::IsUnavailable(store_a.SetDrain("n1", "x")));
  EXPECT_TRUE(absl::IsUnavailable(
      store_a.Upsert(MakeFault("F2", "job"), &ignored).status()));
  EXPECT_EQ(store_a.fenced_writes_refused(), 3u);
  EXPECT_EQ(stale.refused_, 3);
  // Nothing of it reached etcd; the new leader writes normally.
  auto f1 = store_b.Get("F1");
  ASSERT_TRUE(f1.ok());
  EXPECT_EQ(f1->state(), v1::FAULT_STATE_SUSPECTED);
  EXPECT_TRUE(absl::IsNotFound(store_b.Get("F2").status()));
  EXPECT_TRUE(store_b.Drains().empty());
  ASSERT_TRUE(store_b.Resolve("F1", "new-leader", "", 10).ok());
  EXPECT_EQ(store_b.fenced_writes_refused(), 0u);
}

TEST_F(HaTest, FollowerTakesOverWhenTheLeaderStopsRenewing) {
  auto client_a = Client();
  auto client_b = Client();
  auto a = Election(client_a.get(), "a:1");
  auto b = Election(client_b.get(), "b:2");
  a->Start();
  ASSERT_TRUE(WaitFor([&] { return a->IsLeader(); }));
  b->Start();
  ASSERT_TRUE(WaitFor([&] { return b->Leader() == "a:1"; }));
  EXPECT_FALSE(b->IsLeader());
  // A crashes: no resignation, its lease expires after the TTL.
  a->Stop(/*resign=*/false);
  ASSERT_TRUE(WaitFor([&] { return b->IsLeader(); }));
  EXPECT_EQ(b->Leader(), "b:2");
  EXPECT_EQ(b->terms_won(), 1u);
  // A graceful stop resigns: a restarted A takes over at once.
  auto a2 = Election(client_a.get(), "a:1");
  a2->Start();
  b->Stop(/*resign=*/true);
  ASSERT_TRUE(WaitFor([&] { return a2->IsLeader(); }));
}

// Two cores on one etcd: the follower refuses agents and writes naming the
// leader, the new leader loads durable state.
TEST_F(HaTest, CoresFollowTheLeaderAndTakeOverDurableState) {
  HaOptions ho;
  ho.etcd_endpoints = endpoint();
  ho.etcd_prefix = prefix_;
  auto ha_a = HaController::Create(ho, "127.0.0.1:7001");
  auto ha_b = HaController::Create(ho, "127.0.0.1:7002");
  ASSERT_TRUE(ha_a.ok() && ha_b.ok());
  auto make_core = [](HaController* ha) {
    Controller::Options o;
    o.open_store = [ha] { return ha->OpenStore(); };
    o.leadership = ha;
    auto core = Controller::Create(o);
    EXPECT_TRUE(core.ok()) << core.status();
    return std::move(*core);
  };
  auto core_a = make_core(ha_a->get());
  auto core_b = make_core(ha_b->get());
  (*ha_a)->Start(core_a.get());
  ASSERT_TRUE(WaitFor(
      [&] { return core_a->Status().role() == v1::CONTROLLER_ROLE_LEADER; }));
  (*ha_b)->Start(core_b.get());
  ASSERT_TRUE(
      WaitFor([&] { return core_b->Status().leader() == "127.0.0.1:7001"; }));
  EXPECT_EQ(core_b->Status().role(), v1::CONTROLLER_ROLE_FOLLOWER);

  v1::JobPolicy p;
  p.set_window_ms(2500);
  ASSERT_TRUE(core_a->ingest().SetPolicy("job1", p).ok());
  absl::Status s = core_b->ingest().SetPolicy("job1", p).status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(LeaderFromMessage(s.message()), "127.0.0.1:7001");
  v1::NodeRegistration reg;
  reg.set_host("n1");
  reg.set_agent_id("agent-n1");
  s = core_b->AgentConnected(reg, nullptr).status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(LeaderFromMessage(s.message()), "127.0.0.1:7001");
  EXPECT_TRUE(absl::IsUnavailable(
      core_b->faults().Acknowledge("F1", "ops", "").status()));

  // A resigns (graceful stop): B leads with A's policy from etcd.
  (*ha_a)->Stop();
  ASSERT_TRUE(WaitFor(
      [&] { return core_b->Status().role() == v1::CONTROLLER_ROLE_LEADER; }));
  auto got = core_b->ingest().GetPolicy("job1");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->window_ms(), 2500u);
  EXPECT_EQ(core_a->Status().role(), v1::CONTROLLER_ROLE_FOLLOWER);
  EXPECT_TRUE(
      absl::IsUnavailable(core_a->ingest().SetPolicy("job1", p).status()));
  (*ha_b)->Stop();
}

// The trainer policies' settings (SetSyncPolicy, SetLoraPolicy) are
// durable writes like the fault policies: a new leader has them, and a
// deposed leader that has not noticed cannot write them (etcd refuses,
// nothing changes, not even in its own memory).
TEST_F(HaTest, TrainerPoliciesLiveInEtcdAndADeposedLeaderCannotWriteThem) {
  auto client_a = Client();
  auto a = Election(client_a.get(), "a:1");
  a->Start();
  ASSERT_TRUE(WaitFor([&] { return a->IsLeader(); }));
  const EtcdFence a_fence = a->Fence();
  // Core A writes through A's fence as it was: once A is deposed, it is a
  // leader that still believes it leads.
  StaleFence stale(a_fence);
  Controller::Options oa;
  oa.open_store = [&]() -> absl::StatusOr<std::unique_ptr<FaultStore>> {
    return std::make_unique<EtcdFaultStore>(client_a.get(), &stale, prefix_);
  };
  auto core_a = Controller::Create(oa);
  ASSERT_TRUE(core_a.ok()) << core_a.status();
  v1::SyncSettings sync;
  sync.set_policy(v1::SYNC_POLICY_AUTO);
  sync.set_slow_persist_s(7);
  v1::LoraSettings lora;
  lora.set_policy(v1::LORA_POLICY_AUTO);
  lora.set_min_gain(3);
  ASSERT_TRUE((*core_a)->trainers().SetSyncPolicy("tjob", sync).ok());
  ASSERT_TRUE((*core_a)->trainers().SetLoraPolicy("tjob", lora).ok());

  // A pauses past its lease; B is elected and takes over from etcd.
  a->Stop(/*resign=*/false);
  ASSERT_TRUE(client_a->Revoke(a_fence.lease).ok());  // = expiry, sooner
  HaOptions ho;
  ho.etcd_endpoints = endpoint();
  ho.etcd_prefix = prefix_;
  auto ha_b = HaController::Create(ho, "127.0.0.1:7002");
  ASSERT_TRUE(ha_b.ok()) << ha_b.status();
  Controller::Options ob;
  HaController* hb = ha_b->get();
  ob.open_store = [hb] { return hb->OpenStore(); };
  ob.leadership = hb;
  auto core_b = Controller::Create(ob);
  ASSERT_TRUE(core_b.ok()) << core_b.status();
  (*ha_b)->Start(core_b->get());
  ASSERT_TRUE(WaitFor([&] {
    return (*core_b)->Status().role() == v1::CONTROLLER_ROLE_LEADER;
  }));
  auto got = (*core_b)->trainers().JobSync("tjob");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->settings().policy(), v1::SYNC_POLICY_AUTO);
  EXPECT_EQ(got->settings().slow_persist_s(), 7u);
  auto stored = (*hb->OpenStore())->LoraPolicies();
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->count("tjob"), 1u);
  EXPECT_EQ(stored->at("tjob").min_gain(), 3);

  // The deposed A switches the job off: etcd refuses, naming B.
  v1::SyncSettings off;
  off.set_policy(v1::SYNC_POLICY_OFF);
  absl::Status s = (*core_a)->trainers().SetSyncPolicy("tjob", off).status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(LeaderFromMessage(s.message()), "127.0.0.1:7002");
  v1::LoraSettings lora_off;
  lora_off.set_policy(v1::LORA_POLICY_OFF);
  s = (*core_a)->trainers().SetLoraPolicy("tjob", lora_off).status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(stale.refused_, 2);
  // Nothing changed: not in etcd, not in A's memory.
  auto a_view = (*core_a)->trainers().JobSync("tjob");
  ASSERT_TRUE(a_view.ok()) << a_view.status();
  EXPECT_EQ(a_view->settings().policy(), v1::SYNC_POLICY_AUTO);
  auto sync_stored = (*hb->OpenStore())->SyncPolicies();
  ASSERT_TRUE(sync_stored.ok()) << sync_stored.status();
  EXPECT_EQ(sync_stored->at("tjob").policy(), v1::SYNC_POLICY_AUTO);
  stored = (*hb->OpenStore())->LoraPolicies();
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->at("tjob").policy(), v1::LORA_POLICY_AUTO);
  // The leader changes them normally.
  ASSERT_TRUE((*core_b)->trainers().SetSyncPolicy("tjob", off).ok());
  got = (*core_b)->trainers().JobSync("tjob");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->settings().policy(), v1::SYNC_POLICY_OFF);
  (*ha_b)->Stop();
}

// Migrations and their epochs on etcd: the state machine writes every
// change there, a new leader's manager resumes the unfinished ones from
// it, and a deposed leader's migration writes are refused.
TEST_F(HaTest, MigrationsLiveInEtcdAndADeposedLeaderCannotWriteThem) {
  auto client_a = Client();
  auto client_b = Client();
  auto a = Election(client_a.get(), "a:1");
  a->Start();
  ASSERT_TRUE(WaitFor([&] { return a->IsLeader(); }));
  const EtcdFence a_fence = a->Fence();
  StaleFence stale(a_fence);  // A keeps believing it leads
  EtcdFaultStore store_a(client_a.get(), &stale, prefix_);
  RecordingSender sender_a;
  MigrationManager::Options mo;
  auto mm_a = MigrationManager::Create(mo, &store_a, &sender_a);
  ASSERT_TRUE(mm_a.ok()) << mm_a.status();
  auto m1 = (*mm_a)->Start(MakePlan("j", "spare0"));
  ASSERT_TRUE(m1.ok()) << m1.status();
  auto m2 = (*mm_a)->Start(MakePlan("j", "spare1"));  // queued behind M1
  ASSERT_TRUE(m2.ok()) << m2.status();
  // A record numbered 10 sorts after 2 (numbers, not strings).
  v1::Migration m10;
  m10.set_migration_id("M10");
  m10.set_job_id("k");
  m10.set_state(v1::MIGRATION_STATE_COMMITTED);
  m10.set_epoch(7);
  ASSERT_TRUE(store_a.SaveMigration(m10).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(store_a.SaveMigration(v1::Migration())));

  auto stored = store_a.Migrations();
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->size(), 3u);
  EXPECT_EQ((*stored)[0].migration_id(), m1->migration_id());
  EXPECT_EQ((*stored)[0].state(), v1::MIGRATION_STATE_PREPARING);
  EXPECT_EQ((*stored)[0].epoch(), 1u);
  EXPECT_EQ((*stored)[0].members_size(), 3);  // 2 hosts + the joiner
  EXPECT_EQ((*stored)[1].migration_id(), m2->migration_id());
  EXPECT_EQ((*stored)[1].state(), v1::MIGRATION_STATE_QUEUED);
  EXPECT_EQ((*stored)[1].epoch(), 2u);
  EXPECT_EQ((*stored)[2].migration_id(), "M10");

  // A pauses; its lease runs out (revoked: the same, sooner); B leads.
  a->Stop(/*resign=*/false);
  ASSERT_TRUE(client_b->Revoke(a_fence.lease).ok());
  auto b = Election(client_b.get(), "b:2");
  b->Start();
  ASSERT_TRUE(WaitFor([&] { return b->IsLeader(); }));
  ElectionFence b_fence(b.get());
  EtcdFaultStore store_b(client_b.get(), &b_fence, prefix_);

  // A wakes up: a new migration and an abort of M1 reach nobody.
  auto m3 = (*mm_a)->Start(MakePlan("other", "spare2"));
  EXPECT_TRUE(absl::IsUnavailable(m3.status())) << m3.status();
  EXPECT_EQ(LeaderFromMessage(m3.status().message()), "b:2");
  (void)(*mm_a)->Abort(m1->migration_id(), "operator on the old leader");
  absl::Status direct = store_a.SaveMigration(*m1);
  EXPECT_TRUE(absl::IsUnavailable(direct)) << direct;
  EXPECT_GE(store_a.fenced_writes_refused(), 3u);
  EXPECT_EQ(stale.refused_, static_cast<int>(store_a.fenced_writes_refused()));

  // The new leader finds M1 as A last wrote it while leading, resumes it
  // (same epoch) and keeps M2 queued; the resumption is written to etcd.
  RecordingSender sender_b;
  auto mm_b = MigrationManager::Create(mo, &store_b, &sender_b);
  ASSERT_TRUE(mm_b.ok()) << mm_b.status();
  auto resumed = (*mm_b)->Get(m1->migration_id());
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->state(), v1::MIGRATION_STATE_PREPARING);
  EXPECT_EQ(resumed->epoch(), 1u);
  EXPECT_EQ(resumed->resumed(), 1u);
  stored = store_b.Migrations();
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->size(), 3u);  // A's third migration never landed
  EXPECT_EQ((*stored)[0].state(), v1::MIGRATION_STATE_PREPARING);
  EXPECT_EQ((*stored)[0].resumed(), 1u);
  EXPECT_EQ((*stored)[1].state(), v1::MIGRATION_STATE_QUEUED);
  // B's next migration of the job takes the next epoch.
  auto m4 = (*mm_b)->Start(MakePlan("j", "spare3"));
  ASSERT_TRUE(m4.ok()) << m4.status();
  EXPECT_EQ(m4->epoch(), 3u);
  EXPECT_EQ(m4->migration_id(), "M11");
  EXPECT_EQ(store_b.fenced_writes_refused(), 0u);
  b->Stop(/*resign=*/true);
}

// Flow plans on etcd: the newest epoch per job, fenced like every write.
TEST_F(HaTest, PlansLiveInEtcdAndADeposedLeaderCannotWriteThem) {
  auto client_a = Client();
  auto client_b = Client();
  auto a = Election(client_a.get(), "a:1");
  a->Start();
  ASSERT_TRUE(WaitFor([&] { return a->IsLeader(); }));
  const EtcdFence a_fence = a->Fence();
  StaleFence stale(a_fence);
  EtcdFaultStore store_a(client_a.get(), &stale, prefix_);
  c4p::FlowPlan p;
  p.epoch = 3;
  p.paths.resize(2);
  p.paths[0].links = {4, 9, 17};
  p.paths[0].src_gpu = 0;
  p.paths[0].dst_gpu = 8;
  p.paths[0].src_port = 49153;
  p.paths[1].links = {5, 10};
  p.paths[1].split = {{6, 11}};
  p.paths[1].split_ports = {50001};
  ASSERT_TRUE(store_a.SavePlan({"job1", 3, c4p::EncodePlan(p)}).ok());
  ASSERT_TRUE(store_a.SavePlan({"job0", 1, c4p::EncodePlan({})}).ok());
  absl::Status s = store_a.SavePlan({"job1", 2, "{}"});
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;  // older epoch
  EXPECT_TRUE(absl::IsInvalidArgument(store_a.SavePlan({"", 1, "{}"})));
  auto plans = store_a.Plans();
  ASSERT_TRUE(plans.ok()) << plans.status();
  ASSERT_EQ(plans->size(), 2u);
  EXPECT_EQ((*plans)[0].job_id, "job0");
  EXPECT_EQ((*plans)[1].job_id, "job1");
  EXPECT_EQ((*plans)[1].epoch, 3u);
  auto back = c4p::DecodePlan((*plans)[1].data);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->paths[0].links, p.paths[0].links);
  EXPECT_EQ(back->paths[1].split, p.paths[1].split);

  a->Stop(/*resign=*/false);
  ASSERT_TRUE(client_b->Revoke(a_fence.lease).ok());
  auto b = Election(client_b.get(), "b:2");
  b->Start();
  ASSERT_TRUE(WaitFor([&] { return b->IsLeader(); }));
  ElectionFence b_fence(b.get());
  EtcdFaultStore store_b(client_b.get(), &b_fence, prefix_);
  // The deposed leader's newer plan is refused by etcd, naming B.
  p.epoch = 4;
  s = store_a.SavePlan({"job1", 4, c4p::EncodePlan(p)});
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(LeaderFromMessage(s.message()), "b:2");
  EXPECT_EQ(store_a.fenced_writes_refused(), 1u);
  plans = store_b.Plans();
  ASSERT_TRUE(plans.ok()) << plans.status();
  EXPECT_EQ((*plans)[1].epoch, 3u);
  ASSERT_TRUE(store_b.SavePlan({"job1", 5, c4p::EncodePlan(p)}).ok());
  EXPECT_EQ(store_b.fenced_writes_refused(), 0u);
  b->Stop(/*resign=*/true);
}

// A follower serves a job's flow plan from etcd (plans/JOB), as it serves
// faults: the plan the leader saved, read against the follower's own
// --fabric (paths by link name). Before the fix it answered NotFound (a
// follower's planner learns no connections).
TEST_F(HaTest, FollowerServesTheFlowPlanTheLeaderSaved) {
  const std::string spec = "gen:leafspine,gpus=32,gpus_per_host=8";
  auto fabric = c4p::LoadFabric(spec, {});
  ASSERT_TRUE(fabric.ok()) << fabric.status();
  auto gpus = c4p::PlaceJob(*fabric, 32, c4p::Placement::kPacked, 1);
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  int channels = 0;
  const std::vector<c4p::Flow> flows =
      c4p::BuildRingFlows(*fabric, *gpus, {}, &channels);
  c4p::Planner planner(&*fabric, &flows, {});
  const c4p::FlowPlan made = planner.Plan(7);
  size_t network = 0;
  std::string first_path;  // of the first network flow, by name
  for (const c4p::Flow& f : flows) {
    if (!f.network) continue;
    if (network++ == 0) {
      for (int l : made.paths[f.id].links) {
        absl::StrAppend(&first_path, first_path.empty() ? "" : " ",
                        fabric->LinkName(l));
      }
    }
  }
  ASSERT_GT(network, 0u);

  HaOptions ho;
  ho.etcd_endpoints = endpoint();
  ho.etcd_prefix = prefix_;
  auto ha_a = HaController::Create(ho, "127.0.0.1:7001");
  auto ha_b = HaController::Create(ho, "127.0.0.1:7002");
  ASSERT_TRUE(ha_a.ok() && ha_b.ok());
  auto make_core = [&](HaController* ha) {
    Controller::Options o;
    o.open_store = [ha] { return ha->OpenStore(); };
    o.leadership = ha;
    o.planning.fabric = spec;
    auto core = Controller::Create(o);
    EXPECT_TRUE(core.ok()) << core.status();
    return std::move(*core);
  };
  auto core_a = make_core(ha_a->get());
  auto core_b = make_core(ha_b->get());
  (*ha_a)->Start(core_a.get());
  ASSERT_TRUE(WaitFor(
      [&] { return core_a->Status().role() == v1::CONTROLLER_ROLE_LEADER; }));
  (*ha_b)->Start(core_b.get());
  ASSERT_TRUE(
      WaitFor([&] { return core_b->Status().leader() == "127.0.0.1:7001"; }));

  v1::GetFlowPlanRequest req;
  req.set_job_id("job7");
  // Nothing saved yet: NotFound naming the store.
  absl::Status s = core_b->planning().GetFlowPlan(req).status();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("plans/job7"));

  // The leader saves the plan (as its live planner does, fenced).
  {
    auto store = (*ha_a)->OpenStore();
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->SavePlan({"job7", 7, c4p::EncodePlan(made)}).ok());
  }
  auto got = core_b->planning().GetFlowPlan(req);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->epoch(), 7u);
  EXPECT_EQ(got->flows(), flows.size());
  EXPECT_EQ(got->network_flows(), network);
  ASSERT_EQ(static_cast<size_t>(got->planned_flows_size()), network);
  const v1::PlannedFlow& pf = got->planned_flows(0);
  std::string path;
  for (const std::string& l : pf.path()) {
    absl::StrAppend(&path, path.empty() ? "" : " ", l);
  }
  EXPECT_EQ(path, first_path);
  EXPECT_THAT(pf.src_nic(), HasSubstr("/nic"));
  EXPECT_NE(pf.src_host(), pf.dst_host());
  EXPECT_THAT(got->reason(), HasSubstr("follower"));
  req.set_summary_only(true);
  got = core_b->planning().GetFlowPlan(req);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->planned_flows_size(), 0);
  EXPECT_EQ(got->network_flows(), network);

  (*ha_b)->Stop();
  (*ha_a)->Stop();
}

// A leader's client watch streams (WatchFaults, WatchMigrations) end with
// UNAVAILABLE naming the new leader when it is deposed; a follower refuses
// new ones the same way. Real gRPC servers in front of both cores.
TEST_F(HaTest, WatchStreamsOfADeposedLeaderEndNamingTheNewLeader) {
  // Durable state the leader will announce as existing: one open fault
  // and one unfinished migration, written under a first leader that
  // resigns.
  {
    auto client = Client();
    auto seed = Election(client.get(), "seed:1");
    seed->Start();
    ASSERT_TRUE(WaitFor([&] { return seed->IsLeader(); }));
    ElectionFence fence(seed.get());
    EtcdFaultStore store(client.get(), &fence, prefix_);
    bool ignored = false;
    ASSERT_TRUE(store.Upsert(MakeFault("F1", "j"), &ignored).ok());
    RecordingSender sender;
    auto mm = MigrationManager::Create({}, &store, &sender);
    ASSERT_TRUE(mm.ok()) << mm.status();
    ASSERT_TRUE((*mm)->Start(MakePlan("j", "spare0")).ok());
    seed->Stop(/*resign=*/true);
  }
  HaOptions ho;
  ho.etcd_endpoints = endpoint();
  ho.etcd_prefix = prefix_;
  auto ha_a = HaController::Create(ho, "127.0.0.1:7001");
  auto ha_b = HaController::Create(ho, "127.0.0.1:7002");
  ASSERT_TRUE(ha_a.ok() && ha_b.ok());
  auto make_core = [](HaController* ha) {
    Controller::Options o;
    o.open_store = [ha] { return ha->OpenStore(); };
    o.leadership = ha;
    o.cycle_period = absl::Milliseconds(100);
    auto core = Controller::Create(o);
    EXPECT_TRUE(core.ok()) << core.status();
    return std::move(*core);
  };
  auto core_a = make_core(ha_a->get());
  auto core_b = make_core(ha_b->get());
  core_a->Start();
  core_b->Start();
  auto server_a = ControllerServer::Start(core_a.get(), "127.0.0.1:0");
  auto server_b = ControllerServer::Start(core_b.get(), "127.0.0.1:0");
  ASSERT_TRUE(server_a.ok() && server_b.ok());
  auto stub_a = v1::Controller::NewStub(
      TestChannel(absl::StrCat("127.0.0.1:", (*server_a)->port())));
  auto stub_b = v1::Controller::NewStub(
      TestChannel(absl::StrCat("127.0.0.1:", (*server_b)->port())));
  (*ha_a)->Start(core_a.get());
  ASSERT_TRUE(WaitFor(
      [&] { return core_a->Status().role() == v1::CONTROLLER_ROLE_LEADER; }));
  (*ha_b)->Start(core_b.get());
  ASSERT_TRUE(
      WaitFor([&] { return core_b->Status().leader() == "127.0.0.1:7001"; }));

  // Watches on the leader: each first gets the existing record (so the
  // subscription is in place before the leader is deposed).
  auto deadline = [](grpc::ClientContext* ctx) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(60));
  };
  grpc::ClientContext fctx;
  deadline(&fctx);
  v1::WatchFaultsRequest freq;
  freq.set_include_existing(true);
  auto faults = stub_a->WatchFaults(&fctx, freq);
  v1::WatchFaultsResponse fr;
  ASSERT_TRUE(faults->Read(&fr));
  EXPECT_EQ(fr.change(), v1::WatchFaultsResponse::CHANGE_EXISTING);
  EXPECT_EQ(fr.fault().fault_id(), "F1");
  grpc::ClientContext mctx;
  deadline(&mctx);
  v1::WatchMigrationsRequest mreq;
  mreq.set_include_existing(true);
  auto migrations = stub_a->WatchMigrations(&mctx, mreq);
  v1::WatchMigrationsResponse mr;
  ASSERT_TRUE(migrations->Read(&mr));
  EXPECT_EQ(mr.change(), v1::WatchMigrationsResponse::CHANGE_EXISTING);
  EXPECT_EQ(mr.migration().migration_id(), "M1");

  // A follower refuses a watch, naming the leader.
  {
    grpc::ClientContext ctx;
    deadline(&ctx);
    auto w = stub_b->WatchFaults(&ctx, freq);
    EXPECT_FALSE(w->Read(&fr));
    const grpc::Status s = w->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE)
        << s.error_message();
    EXPECT_EQ(LeaderFromMessage(s.error_message()), "127.0.0.1:7001");
  }

  // A's lease ends in etcd (what a pause past the TTL does): A steps down
  // and campaigns again. B normally wins (it polls every 100 ms, A only
  // once its keep-alive saw the loss); on a loaded machine A may win the
  // new term itself, and then the streams must name A.
  auto client = Client();
  ASSERT_TRUE(client->Revoke((*ha_a)->election()->Fence().lease).ok());
  std::string leader;
  ASSERT_TRUE(WaitFor([&] {
    if (core_b->Status().role() == v1::CONTROLLER_ROLE_LEADER) {
      leader = "127.0.0.1:7002";
    } else if (core_a->Status().role() == v1::CONTROLLER_ROLE_LEADER &&
               (*ha_a)->election()->terms_won() >= 2) {
      leader = "127.0.0.1:7001";
    }
    return !leader.empty();
  }));
  const bool b_leads = leader == "127.0.0.1:7002";
  v1::Controller::Stub* at_leader = b_leads ? stub_b.get() : stub_a.get();
  v1::Controller::Stub* at_follower = b_leads ? stub_a.get() : stub_b.get();

  // Both streams on A end (not silent) with UNAVAILABLE naming the leader.
  while (faults->Read(&fr)) {
  }
  grpc::Status s = faults->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_EQ(LeaderFromMessage(s.error_message()), leader) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("stepped down"));
  while (migrations->Read(&mr)) {
  }
  s = migrations->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_EQ(LeaderFromMessage(s.error_message()), leader) << s.error_message();

  // Watching again at the named leader works: it announces what it loaded.
  {
    grpc::ClientContext ctx;
    deadline(&ctx);
    auto w = at_leader->WatchMigrations(&ctx, mreq);
    ASSERT_TRUE(w->Read(&mr));
    EXPECT_EQ(mr.migration().migration_id(), "M1");
    EXPECT_EQ(mr.migration().state(), v1::MIGRATION_STATE_PREPARING);
    EXPECT_GE(mr.migration().resumed(), 2u);  // by each term that led
    ctx.TryCancel();
    while (w->Read(&mr)) {
    }
    (void)w->Finish();
  }
  // The other controller, a follower, refuses new watches naming it.
  {
    grpc::ClientContext ctx;
    deadline(&ctx);
    auto w = at_follower->WatchMigrations(&ctx, mreq);
    EXPECT_FALSE(w->Read(&mr));
    s = w->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_EQ(LeaderFromMessage(s.error_message()), leader);
  }
  (*server_a)->Shutdown(absl::Seconds(1));
  (*server_b)->Shutdown(absl::Seconds(1));
  (*ha_b)->Stop();
  (*ha_a)->Stop();
  core_a->Stop();
  core_b->Stop();
}

}  // namespace
}  // namespace pitstop::controller::ha
