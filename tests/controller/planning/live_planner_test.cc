// LivePlanner: flows learned from agent batches, the plan per job with
// epochs saved in the store, re-plans on operator marks, COMM_SLOW verdicts
// and Cora's NIC estimates, the directives for the agents, and the queries.
#include "src/controller/planning/live_planner.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pitstop/clock.h"
#include "src/c4p/plan_codec.h"
#include "src/controller/store/fault_store.h"

namespace pitstop::controller {
namespace {

using ::testing::HasSubstr;

// 4 hosts x 4 GPUs, one ToR per rail per host, 2 spines: every
// inter-host flow has two paths.
constexpr char kFabric[] =
    "gen:leafspine,gpus=16,gpus_per_host=4,hosts_per_tor=1,tor_uplinks=2,"
    "nic_gbps=200";
constexpr uint64_t kComm = 0xc0ffee;
constexpr int kRanks = 16;
constexpr int kChannels = 2;

class LivePlannerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = FaultStore::Open(":memory:");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }
  std::unique_ptr<LivePlanner> Make(LivePlanner::Options o = {}) {
    o.fabric = kFabric;
    o.clock = &clock_;
    o.store = store_.get();
    auto p = LivePlanner::Create(o);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? std::move(*p) : nullptr;
  }
  static std::string Host(int rank) { return absl::StrCat("node", rank / 4); }
  // One batch per host: membership, and one ring all-reduce whose send
  // connections (rank -> rank + 1, both channels) took `ns` each; ranks on
  // `slow_host`'s GPU 0 take `slow_ns`.
  void Feed(LivePlanner* p, uint64_t ns = 2'000'000, int slow_rank = -1,
            uint64_t slow_ns = 0, int slow_channel = -1) {
    for (int h = 0; h < 4; ++h) {
      v1::ConnectRequest batch;
      for (int r = h * 4; r < h * 4 + 4; ++r) {
        v1::CommunicatorInfo* c = batch.add_communicators();
        c->set_comm_hash(kComm);
        c->set_rank(r);
        c->set_n_ranks(kRanks);
        c->set_n_nodes(4);
        c->set_host(Host(r));
        c->set_cuda_device(r % 4);
        c->set_job_id("job1");
        v1::CollectiveSummary* s = batch.add_summaries();
        s->set_comm_hash(kComm);
        s->set_rank(r);
        s->set_n_channels(kChannels);
        for (int ch = 0; ch < kChannels; ++ch) {
          v1::ConnectionSummary* cs = s->add_connections();
          cs->set_peer_rank((r + 1) % kRanks);
          cs->set_channel_id(ch);
          cs->set_is_send(true);
          cs->set_bytes(feed_bytes_);
          const bool slow =
              r == slow_rank && (slow_channel < 0 || ch == slow_channel);
          const uint64_t d = slow ? slow_ns : ns;
          cs->set_duration_ns(d);
          cs->set_throughput_bps(feed_bytes_ * 1e9 / d);
        }
      }
      p->ObserveBatch(absl::StrCat("node", h), batch);
    }
  }
  // Feeds, lets the connections settle and plans: epoch 1.
  std::unique_ptr<LivePlanner> Planned(LivePlanner::Options o = {}) {
    auto p = Make(o);
    if (p == nullptr) return p;
    Feed(p.get());
    clock_.Advance(absl::Seconds(3));
    LivePlanner::RunResult r = p->Run();
    EXPECT_EQ(r.planned.count("job1"), 1u);
    return p;
  }
  // The first switch-to-switch link of a planned flow.
  static std::string SpineLink(const v1::FlowPlan& plan) {
    for (const v1::PlannedFlow& f : plan.planned_flows()) {
      for (const std::string& l : f.path()) {
        if (l.find("->spine") != std::string::npos) return l;
      }
    }
    return "";
  }
  static std::vector<v1::LinkStatus> Links(LivePlanner* p,
                                           const v1::ListLinksRequest& r) {
    const v1::ListLinksResponse resp = p->ListLinks(r);
    return {resp.links().begin(), resp.links().end()};
  }
  static int Crossing(const v1::FlowPlan& plan, const std::string& link) {
    int n = 0;
    for (const v1::PlannedFlow& f : plan.planned_flows()) {
      for (const std::string& l : f.path()) n += l == link;
    }
    return n;
  }

  FakeClock clock_;
  std::unique_ptr<FaultStore> store_;
  uint64_t feed_bytes_ = 64 << 20;  // per connection and collective
};

TEST_F(LivePlannerTest, BadFabricIsAnError) {
  LivePlanner::Options o;
  o.fabric = "gen:leafspine,gpus=banana";
  auto p = LivePlanner::Create(o);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("gpus"));
  o.fabric = "";
  EXPECT_FALSE(LivePlanner::Create(o).ok());
}

TEST_F(LivePlannerTest, PlansOnceConnectionsSettleAndSavesTheEpoch) {
  auto p = Make();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->GetFlowPlan("", false).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p->GetFlowPlan("job1", false).status().message(),
              HasSubstr("no connections learned"));
  Feed(p.get());
  EXPECT_TRUE(p->Run().planned.empty());  // not settled yet
  absl::StatusOr<v1::FlowPlan> none = p->GetFlowPlan("job1", false);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(), HasSubstr("32 connections learned"));

  clock_.Advance(absl::Seconds(3));
  LivePlanner::RunResult r = p->Run();
  ASSERT_EQ(r.planned.at("job1"), 1u);
  absl::StatusOr<v1::FlowPlan> plan = p->GetFlowPlan("job1", false);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->epoch(), 1u);
  EXPECT_EQ(plan->flows(), 32u);
  // The ring crosses hosts 4 times per channel.
  EXPECT_EQ(plan->network_flows(), 8u);
  EXPECT_EQ(plan->planned_flows_size(), 8);
  EXPECT_FALSE(SpineLink(*plan).empty());
  EXPECT_THAT(plan->reason(), HasSubstr("32 connections"));
  // Durable: the store holds the same epoch and it decodes.
  absl::StatusOr<std::vector<StoredPlan>> stored = store_->Plans();
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ((*stored)[0].epoch, 1u);
  EXPECT_TRUE(c4p::DecodePlan((*stored)[0].data).ok());
  // One directive per host of the job, epoch 1, the communicator healthy.
  ASSERT_EQ(r.directives.size(), 4u);
  for (const LivePlanner::Directive& d : r.directives) {
    EXPECT_EQ(d.directive.epoch(), 1u);
    ASSERT_EQ(d.directive.comms_size(), 1);
    EXPECT_EQ(d.directive.comms(0).comm_hash(), kComm);
    EXPECT_FALSE(d.directive.comms(0).degraded());
    EXPECT_EQ(d.directive.comms(0).n_ranks(), kRanks);
    // Each host's last rank (GPU 3) sends the ring out on both channels.
    EXPECT_THAT(d.directive.comms(0).nic_indices(), ::testing::ElementsAre(3));
  }
  // Nothing changed: no new epoch.
  EXPECT_TRUE(p->Run().planned.empty());
}

TEST_F(LivePlannerTest, EpochsContinueAboveTheStoredPlan) {
  ASSERT_TRUE(store_->SavePlan(StoredPlan{"job1", 7, "{}"}).ok());
  auto p = Planned();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->GetFlowPlan("job1", true)->epoch(), 8u);
}

TEST_F(LivePlannerTest, ANewerEpochInTheStoreIsNotUndone) {
  auto p = Planned();
  ASSERT_NE(p, nullptr);
  // Another controller (it led meanwhile) saved epoch 50.
  ASSERT_TRUE(store_->SavePlan(StoredPlan{"job1", 50, "{}"}).ok());
  v1::SetLinkHealthRequest mark;
  mark.set_link("spine0");
  mark.set_degraded(true);
  ASSERT_TRUE(p->SetLinkHealth(mark).ok());
  // Epoch 2 is refused by the store: neither served nor sent.
  LivePlanner::RunResult r = p->Run();
  EXPECT_TRUE(r.planned.empty());
  EXPECT_TRUE(r.directives.empty());
  EXPECT_EQ(p->GetFlowPlan("job1", true)->epoch(), 1u);
  // The next pass plans in full above the stored epoch.
  r = p->Run();
  ASSERT_EQ(r.planned.at("job1"), 51u);
  EXPECT_EQ(store_->Plans()->at(0).epoch, 51u);
}

TEST_F(LivePlannerTest, OperatorMarkReplansOnlyTheCrossingFlows) {
  auto p = Planned();
  ASSERT_NE(p, nullptr);
  const v1::FlowPlan before = *p->GetFlowPlan("job1", false);
  const std::string link = SpineLink(before);
  ASSERT_GT(Crossing(before, link), 0);

  v1::SetLinkHealthRequest bad;
  bad.set_link("no-such-switch");
  bad.set_degraded(true);
  EXPECT_EQ(p->SetLinkHealth(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad.set_link(link);
  bad.set_capacity_share(1.5);
  EXPECT_THAT(p->SetLinkHealth(bad).status().message(),
              HasSubstr("capacity_share"));

  v1::SetLinkHealthRequest mark;
  mark.set_link(link);
  mark.set_degraded(true);
  mark.set_who("alice");
  mark.set_reason("CRC errors");
  absl::StatusOr<std::vector<v1::LinkStatus>> marked = p->SetLinkHealth(mark);
  ASSERT_TRUE(marked.ok()) << marked.status();
  ASSERT_EQ(marked->size(), 1u);
  EXPECT_EQ((*marked)[0].health(), v1::LINK_HEALTH_DEGRADED);
  EXPECT_THAT((*marked)[0].reason(), HasSubstr("alice: CRC errors"));

  LivePlanner::RunResult r = p->Run();
  ASSERT_EQ(r.planned.at("job1"), 2u);
  const v1::FlowPlan after = *p->GetFlowPlan("job1", false);
  EXPECT_EQ(after.epoch(), 2u);
  EXPECT_EQ(after.crossing_flows(),
            static_cast<uint32_t>(Crossing(before, link)));
  EXPECT_EQ(after.moved_flows(), after.crossing_flows());
  EXPECT_EQ(Crossing(after, link), 0);
  EXPECT_THAT(after.reason(), HasSubstr(link));
  EXPECT_THAT(after.degraded_links(), ::testing::Contains(link));
  // Only the crossing flows moved; the others kept their paths.
  int moved = 0;
  for (int i = 0; i < after.planned_flows_size(); ++i) {
    const bool same =
        std::vector<std::string>(after.planned_flows(i).path().begin(),
                                 after.planned_flows(i).path().end()) ==
        std::vector<std::string>(before.planned_flows(i).path().begin(),
                                 before.planned_flows(i).path().end());
    EXPECT_EQ(after.planned_flows(i).moved(), !same) << i;
    moved += !same;
  }
  EXPECT_EQ(moved, static_cast<int>(after.moved_flows()));
  EXPECT_EQ(store_->Plans()->at(0).epoch, 2u);

  // Healthy again: capacity back, nothing crosses it, so no new epoch.
  mark.set_degraded(false);
  ASSERT_TRUE(p->SetLinkHealth(mark).ok());
  EXPECT_TRUE(p->Run().planned.empty());
  v1::ListLinksRequest all;
  all.set_all(true);
  for (const v1::LinkStatus& l : Links(p.get(), all)) {
    EXPECT_EQ(l.health(), v1::LINK_HEALTH_HEALTHY) << l.name();
  }
}

TEST_F(LivePlannerTest, NoPathAroundMarksTheCommunicatorDegraded) {
  auto p = Planned();
  ASSERT_NE(p, nullptr);
  for (const char* spine : {"spine0", "spine1"}) {
    v1::SetLinkHealthRequest mark;
    mark.set_link(spine);
    mark.set_degraded(true);
    mark.set_capacity_share(0.25);
    ASSERT_TRUE(p->SetLinkHealth(mark).ok()) << spine;
  }
  LivePlanner::RunResult r = p->Run();
  ASSERT_EQ(r.planned.at("job1"), 2u);
  ASSERT_FALSE(r.directives.empty());
  for (const LivePlanner::Directive& d : r.directives) {
    const v1::CommSteering& c = d.directive.comms(0);
    EXPECT_TRUE(c.degraded()) << d.host;
    EXPECT_DOUBLE_EQ(c.path_capacity_share(), 0.25);
    EXPECT_EQ(c.channels_seen(), static_cast<uint32_t>(kChannels));
    EXPECT_EQ(c.max_channels(), 1u);  // ceil(2 x 0.25)
  }
}

TEST_F(LivePlannerTest, CommSlowVerdictMarksTheConnectionsPathSuspect) {
  auto p = Planned();
  ASSERT_NE(p, nullptr);
  const v1::FlowPlan before = *p->GetFlowPlan("job1", false);
  // Rank 3 (node0) -> rank 4 (node1) is slow on channel 1 only (its path;
  // channel 0 takes the other spine). Its NIC stays within Cora's 5%.
  Feed(p.get(), 2'000'000, 3, 8'000'000, 1);
  std::string slow_path;
  for (const v1::PlannedFlow& fl : before.planned_flows()) {
    if (fl.src_rank() == 3 && fl.channel() == 1) slow_path = fl.path(1);
  }
  ASSERT_NE(slow_path, "");
  v1::Fault f;
  f.set_fault_id("F9");
  f.set_fault_class(v1::FAULT_CLASS_COMM_SLOW);
  f.set_state(v1::FAULT_STATE_CONFIRMED);
  f.set_job_id("job1");
  f.set_comm_hash(kComm);
  f.set_summary("connection node0 -> node1 slow");
  v1::Suspect* s = f.add_suspects();
  s->set_level(v1::SUSPECT_LEVEL_LINK);
  s->set_comm_rank(3);
  s->set_peer_comm_rank(4);
  s->set_host("node0");
  s->set_peer_host("node1");
  p->ObserveFault(f);
  LivePlanner::RunResult r = p->Run();
  ASSERT_EQ(r.planned.at("job1"), 2u);
  const v1::FlowPlan after = *p->GetFlowPlan("job1", false);
  EXPECT_GT(after.crossing_flows(), 0u);
  EXPECT_GT(after.moved_flows(), 0u);
  EXPECT_EQ(Crossing(after, slow_path), 0) << slow_path;
  int suspect = 0;
  for (const v1::LinkStatus& l : Links(p.get(), {})) {
    if (l.health() != v1::LINK_HEALTH_SUSPECT) continue;
    ++suspect;
    EXPECT_THAT(l.reason(), HasSubstr("fault F9"));
    EXPECT_EQ(l.gbps(), l.nominal_gbps() * 0.25);
  }
  EXPECT_GT(suspect, 0);
  // The same fault updated again re-marks nothing.
  p->ObserveFault(f);
  EXPECT_TRUE(p->Run().planned.empty());
  // Resolved: the links are healthy again.
  f.set_state(v1::FAULT_STATE_RESOLVED);
  p->ObserveFault(f);
  p->Run();
  for (const v1::LinkStatus& l : Links(p.get(), {})) {
    EXPECT_NE(l.health(), v1::LINK_HEALTH_SUSPECT) << l.name();
  }
}

// QP advice: 8 one-GPU hosts on two ToRs of four uplinks each, the ring
// alternating between the ToRs, so each ToR's uplinks carry exactly one
// 200 Gbps connection each. With one uplink at a quarter, whole
// connections recover at most half the healthy time (two share an
// uplink); with 4 QPs per connection a plan spreads the QPs (80%). The
// re-plan says which launch setting would get that.
TEST_F(LivePlannerTest, ReplanBelowNinetyPercentRecommendsMoreQps) {
  LivePlanner::Options o;
  o.fabric =
      "gen:leafspine,gpus=8,gpus_per_host=1,rail=0,hosts_per_tor=4,"
      "tor_uplinks=4,nic_gbps=200";
  o.clock = &clock_;
  o.store = store_.get();
  o.measure_nics = false;
  auto made = LivePlanner::Create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  LivePlanner* p = made->get();
  const int order[8] = {0, 4, 1, 5, 2, 6, 3, 7};  // rank -> host
  for (int r = 0; r < 8; ++r) {
    v1::ConnectRequest batch;
    v1::CommunicatorInfo* c = batch.add_communicators();
    c->set_comm_hash(kComm);
    c->set_rank(r);
    c->set_n_ranks(8);
    c->set_n_nodes(8);
    c->set_host(absl::StrCat("node", order[r]));
    c->set_cuda_device(0);
    c->set_job_id("job1");
    v1::CollectiveSummary* s = batch.add_summaries();
    s->set_comm_hash(kComm);
    s->set_rank(r);
    s->set_n_channels(1);
    v1::ConnectionSummary* cs = s->add_connections();
    cs->set_peer_rank((r + 1) % 8);
    cs->set_is_send(true);
    cs->set_bytes(64 << 20);
    cs->set_duration_ns(4'000'000);
    cs->set_throughput_bps((64 << 20) * 1e9 / 4'000'000);
    p->ObserveBatch(absl::StrCat("node", order[r]), batch);
  }
  clock_.Advance(absl::Seconds(3));
  ASSERT_EQ(p->Run().planned.count("job1"), 1u);
  auto first = p->GetFlowPlan("job1", false);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->recommended_qps(), 0u);  // healthy: no advice
  EXPECT_EQ(first->qps_advice(), "");
  const std::string up = SpineLink(*first);
  ASSERT_NE(up, "");
  v1::SetLinkHealthRequest mark;
  mark.set_link(up);
  mark.set_degraded(true);
  mark.set_capacity_share(0.25);
  ASSERT_TRUE(p->SetLinkHealth(mark).ok());
  ASSERT_EQ(p->Run().planned.at("job1"), 2u);
  auto after = p->GetFlowPlan("job1", true);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_GT(after->crossing_flows(), 0u);
  EXPECT_GT(after->recommended_qps(), 1u) << after->qps_advice();
  EXPECT_THAT(after->qps_advice(),
              HasSubstr(absl::StrCat("NCCL_IB_QPS_PER_CONNECTION=",
                                     after->recommended_qps())));
}

// As in `pitstop sim ci-replan`: the first summaries of the job carry no
// bytes (its proxy ops not sized yet). The plan made then sees no load; it
// is re-made once the bytes are known, and the COMM_SLOW verdict's re-plan
// moves the slow connection off the suspect links (before, every flow kept
// its path: zero bytes fit any bound).
TEST_F(LivePlannerTest,
       ConnectionsSizedLateAreReplannedAndTheVerdictMovesThem) {
  auto p = Make();
  ASSERT_NE(p, nullptr);
  feed_bytes_ = 0;
  Feed(p.get());
  clock_.Advance(absl::Seconds(3));
  ASSERT_EQ(p->Run().planned.at("job1"), 1u);
  EXPECT_EQ(p->GetFlowPlan("job1", true)->busiest_link_s(), 0);
  feed_bytes_ = 64 << 20;
  Feed(p.get());
  clock_.Advance(absl::Seconds(3));
  ASSERT_EQ(p->Run().planned.at("job1"), 2u);  // re-made with the bytes
  const v1::FlowPlan before = *p->GetFlowPlan("job1", false);
  EXPECT_GT(before.busiest_link_s(), 0);
  Feed(p.get(), 2'000'000, 3, 8'000'000, 1);
  std::string slow_path;
  for (const v1::PlannedFlow& fl : before.planned_flows()) {
    if (fl.src_rank() == 3 && fl.channel() == 1) slow_path = fl.path(1);
  }
  ASSERT_NE(slow_path, "");
  v1::Fault f;
  f.set_fault_id("F3");
  f.set_fault_class(v1::FAULT_CLASS_COMM_SLOW);
  f.set_state(v1::FAULT_STATE_CONFIRMED);
  f.set_job_id("job1");
  f.set_comm_hash(kComm);
  v1::Suspect* s = f.add_suspects();
  s->set_level(v1::SUSPECT_LEVEL_LINK);
  s->set_comm_rank(3);
  s->set_peer_comm_rank(4);
  p->ObserveFault(f);
  ASSERT_EQ(p->Run().planned.at("job1"), 3u);
  const v1::FlowPlan after = *p->GetFlowPlan("job1", false);
  EXPECT_GT(after.crossing_flows(), 0u);
  EXPECT_GT(after.moved_flows(), 0u);
  EXPECT_EQ(Crossing(after, slow_path), 0) << slow_path;
}

// A plan made before its connections were sized is re-planned with the
// bytes measured since (Planner::Replan on zero-byte flows keeps them all).
TEST_F(LivePlannerTest, ReplanUsesTheBytesMeasuredSinceThePlan) {
  auto p = Make();
  ASSERT_NE(p, nullptr);
  feed_bytes_ = 0;
  Feed(p.get());
  clock_.Advance(absl::Seconds(3));
  ASSERT_EQ(p->Run().planned.at("job1"), 1u);
  // Bytes arrive, and before the job settles again an operator marks the
  // busiest spine link of channel 1's rank 3 -> 4 connection.
  const v1::FlowPlan before = *p->GetFlowPlan("job1", false);
  std::string link;
  for (const v1::PlannedFlow& fl : before.planned_flows()) {
    if (fl.src_rank() == 3 && fl.channel() == 1) link = fl.path(1);
  }
  ASSERT_NE(link, "");
  feed_bytes_ = 64 << 20;
  Feed(p.get());
  v1::SetLinkHealthRequest mark;
  mark.set_link(link);
  mark.set_degraded(true);
  mark.set_capacity_share(0.25);
  ASSERT_TRUE(p->SetLinkHealth(mark).ok());
  ASSERT_EQ(p->Run().planned.at("job1"), 2u);
  const v1::FlowPlan after = *p->GetFlowPlan("job1", false);
  EXPECT_GT(after.crossing_flows(), 0u);
  EXPECT_GT(after.moved_flows(), 0u);
  EXPECT_GT(after.busiest_link_s(), 0);
}

TEST_F(LivePlannerTest, CoraMovesFlowsOffANicMeasuredSlow) {
  auto p = Planned();
  ASSERT_NE(p, nullptr);
  // Rank 7 is the last GPU of node1: its ring flow leaves host1/nic3. It
  // moves 64 MiB x 2 in 50 ms instead of 2 ms: ~21 Gbps of 200.
  for (int i = 0; i < 20; ++i) Feed(p.get(), 2'000'000, 7, 50'000'000);
  LivePlanner::RunResult r = p->Run();
  ASSERT_EQ(r.planned.count("job1"), 1u);
  const v1::FlowPlan after = *p->GetFlowPlan("job1", false);
  EXPECT_GT(after.moved_flows(), 0u);
  for (const v1::PlannedFlow& f : after.planned_flows()) {
    EXPECT_NE(f.src_nic(), "host1/nic3") << "flow " << f.src_rank();
  }
  bool slow = false;
  for (const v1::LinkStatus& l : Links(p.get(), {})) {
    if (l.name() == "host1/nic3->tor1.3") {
      slow = l.health() == v1::LINK_HEALTH_SLOW;
      EXPECT_LT(l.gbps(), 40);
    }
  }
  EXPECT_TRUE(slow);
}

TEST_F(LivePlannerTest, AcksAreCountedPerHost) {
  auto p = Make();
  ASSERT_NE(p, nullptr);
  Feed(p.get());
  clock_.Advance(absl::Seconds(3));
  LivePlanner::RunResult r = p->Run();
  ASSERT_FALSE(r.directives.empty());
  uint64_t id = 100;
  for (const LivePlanner::Directive& d : r.directives) {
    p->Sent(d.host, ++id, d.directive);
  }
  p->Acked("node0", 101);
  p->Acked("node0", 999);  // unknown: ignored
  const v1::FlowPlan plan = *p->GetFlowPlan("job1", true);
  EXPECT_EQ(plan.planned_flows_size(), 0);  // summary only
  ASSERT_EQ(plan.hosts_size(), 4);
  for (const v1::FlowPlanHost& h : plan.hosts()) {
    EXPECT_EQ(h.epoch_sent(), 1u);
    EXPECT_EQ(h.epoch_acked(), h.host() == r.directives[0].host ? 1u : 0u);
  }
}

// The directive is on the agent's stream before Sent() runs, so a quick
// agent's ack can be joined first (CI stop 39: a host's epoch stayed
// unacked forever). The ack still counts once Sent() comes.
TEST_F(LivePlannerTest, AnAckThatOvertakesItsSentStillCounts) {
  auto p = Make();
  ASSERT_NE(p, nullptr);
  Feed(p.get());
  clock_.Advance(absl::Seconds(3));
  LivePlanner::RunResult r = p->Run();
  ASSERT_FALSE(r.directives.empty());
  const LivePlanner::Directive& d = r.directives[0];
  p->Acked(d.host, 7);
  p->Acked("elsewhere", 8);  // another host's id 8 acks nothing of d.host
  p->Sent(d.host, 7, d.directive);
  p->Sent(d.host, 8, d.directive);
  const v1::FlowPlan plan = *p->GetFlowPlan("job1", true);
  for (const v1::FlowPlanHost& h : plan.hosts()) {
    if (h.host() != d.host) continue;
    EXPECT_EQ(h.epoch_sent(), d.directive.epoch());
    EXPECT_EQ(h.epoch_acked(), d.directive.epoch());
  }
  // The early ack was used once: a resend under the same id is unacked.
  v1::PathDirective next = d.directive;
  next.set_epoch(d.directive.epoch() + 1);
  p->Sent(d.host, 7, next);
  const v1::FlowPlan resent = *p->GetFlowPlan("job1", true);
  for (const v1::FlowPlanHost& h : resent.hosts()) {
    if (h.host() != d.host) continue;
    EXPECT_EQ(h.epoch_sent(), next.epoch());
    EXPECT_EQ(h.epoch_acked(), d.directive.epoch());
  }
}

TEST_F(LivePlannerTest, HostsOffTheFabricAreNotPlanned) {
  LivePlanner::Options o;
  o.fabric =
      "gen:leafspine,gpus=8,gpus_per_host=4,hosts_per_tor=1,"
      "tor_uplinks=2";  // host0, host1 only
  o.clock = &clock_;
  auto p = LivePlanner::Create(o);
  ASSERT_TRUE(p.ok());
  Feed(p->get());
  clock_.Advance(absl::Seconds(3));
  LivePlanner::RunResult r = (*p)->Run();
  // node0 and node1 are on it, node2 and node3 not: their connections are
  // left out and the rest is planned.
  ASSERT_EQ(r.planned.count("job1"), 1u);
  const v1::FlowPlan plan = *(*p)->GetFlowPlan("job1", false);
  EXPECT_LT(plan.flows(), 32u);
  for (const v1::PlannedFlow& f : plan.planned_flows()) {
    EXPECT_NE(f.src_host(), "node2");
    EXPECT_NE(f.dst_host(), "node3");
  }
}

}  // namespace
}  // namespace pitstop::controller
