#include "src/c4p/planner.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/c4p/ecmp.h"
#include "src/c4p/evaluate.h"
#include "src/c4p/fabric_io.h"
#include "src/c4p/flow_sim.h"
#include "tests/c4p/generated_fabric.h"

namespace pitstop::c4p {
namespace {

TEST(FlowsTest, RingFlowsFollowRailsAndCarryNcclBytes) {
  Fabric fab = Gen("gen:leafspine,gpus=32,hosts_per_tor=2");
  auto place = PlaceJob(fab, 32, Placement::kPacked, 1);
  ASSERT_TRUE(place.ok());
  RingSpec spec;
  spec.bytes = 1000;
  int channels = 0;
  std::vector<Flow> flows = BuildRingFlows(fab, *place, spec, &channels);
  EXPECT_EQ(channels, 16);  // two per NIC
  int network = 0;
  for (const Flow& f : flows) {
    EXPECT_DOUBLE_EQ(f.bytes, 2.0 * 31 / 32 * 1000 / 16);
    if (!f.network) continue;
    ++network;
    // Rail-aligned: same local GPU (rail) on both ends, rail = channel % 8.
    EXPECT_EQ(fab.node(f.src_gpu).local, f.channel % 8);
    EXPECT_EQ(fab.node(f.dst_gpu).local, f.channel % 8);
  }
  // 4 hosts: each channel's ring has 4 network hops and 4 x 7 NVLink hops.
  EXPECT_EQ(network, 16 * 4);
  EXPECT_EQ(static_cast<int>(flows.size()), 16 * (4 + 4 * 7));
}

TEST(FlowsTest, TreeFlowsAreADoubleBinaryTreeOverHosts) {
  Fabric fab = Gen("gen:leafspine,gpus=64,hosts_per_tor=2");
  auto place = PlaceJob(fab, 64, Placement::kPacked, 1);
  ASSERT_TRUE(place.ok());
  RingSpec spec;
  spec.bytes = 1600;
  spec.channels = 2;
  int channels = 0;
  std::vector<Flow> flows = BuildTreeFlows(fab, *place, spec, &channels);
  EXPECT_EQ(channels, 2);
  // 8 hosts: 7 tree edges and 8 x 7 chain hops per channel, both ways.
  EXPECT_EQ(static_cast<int>(flows.size()), 2 * 2 * (7 + 8 * 7));
  std::map<int, int> degree[2];  // host -> network edges, per tree
  for (const Flow& f : flows) {
    EXPECT_DOUBLE_EQ(f.bytes, 800);
    if (f.network) ++degree[f.channel][fab.node(f.src_gpu).host];
  }
  // Host 0 is the root of tree 0 (two children) and a leaf of tree 1.
  EXPECT_EQ(degree[0][0], 2);
  EXPECT_EQ(degree[1][0], 1);
  EXPECT_EQ(degree[1][7], 2);
}

TEST(FlowsTest, QpsSplitConnectionsAndPlacementIsChecked) {
  Fabric fab = Gen("gen:leafspine,gpus=16,hosts_per_tor=1");
  auto place = PlaceJob(fab, 16, Placement::kScattered, 3);
  ASSERT_TRUE(place.ok());
  RingSpec spec;
  spec.qps_per_connection = 4;
  spec.channels = 8;
  std::vector<Flow> flows = BuildRingFlows(fab, *place, spec, nullptr);
  std::map<int, int> per_conn;
  for (const Flow& f : flows) {
    if (f.network) ++per_conn[f.conn];
  }
  ASSERT_FALSE(per_conn.empty());
  for (const auto& [c, n] : per_conn) EXPECT_EQ(n, 4);
  EXPECT_FALSE(PlaceJob(fab, 17, Placement::kPacked, 1).ok());
}

TEST(EcmpTest, HashesDifferAndSeedsChangePaths) {
  for (const char* name : {"crc32", "xor", "murmur"}) {
    auto h = MakeHash(name);
    ASSERT_TRUE(h.ok());
    FiveTuple t;
    t.src_ip = 1;
    t.dst_ip = 2;
    std::set<uint32_t> seen;
    for (int port = 0; port < 64; ++port) {
      t.src_port = static_cast<uint16_t>(kFirstSourcePort + port);
      seen.insert((*h)->Hash(t, 7) % 8);
    }
    EXPECT_GE(seen.size(), 4u) << name << " spreads source ports";
  }
  EXPECT_FALSE(MakeHash("md5").ok());

  Fabric fab = Gen("gen:leafspine,gpus=256,hosts_per_tor=8");
  auto place = PlaceJob(fab, 256, Placement::kScattered, 1);
  ASSERT_TRUE(place.ok());
  std::vector<Flow> flows = BuildRingFlows(fab, *place, RingSpec{}, nullptr);
  auto h = MakeHash("crc32");
  EcmpRouter a(&fab, h->get(), 1), b(&fab, h->get(), 2);
  int differ = 0, network = 0;
  for (const Flow& f : flows) {
    if (!f.network) continue;
    ++network;
    RoutedPath pa = a.Route(f), pb = b.Route(f);
    ASSERT_FALSE(pa.links.empty());
    // Paths start at the source NIC and end at the destination NIC.
    EXPECT_EQ(fab.link(pa.links.front()).src, f.src_gpu);
    EXPECT_EQ(fab.link(pa.links.back()).dst, f.dst_gpu);
    if (pa.links != pb.links) ++differ;
    EXPECT_EQ(a.Route(f).links, pa.links) << "deterministic per seed";
  }
  EXPECT_GT(differ, network / 4);
}

TEST(FlowSimTest, MaxMinSharesAndFinishesInWaves) {
  // Links 0 (10 Gbps) and 1 (20 Gbps). A and B share link 0; C alone on 1.
  std::vector<int> p0 = {0}, p01 = {0, 1}, p1 = {1};
  std::vector<double> cap = {10, 20};
  const double gb = 1e9 / 8;  // bytes per Gbit
  std::vector<SimFlow> flows = {
      {&p0, 10 * gb, 0}, {&p01, 10 * gb, 1}, {&p1, 10 * gb, 2}};
  SimResult r = SimulateMaxMin(flows, cap, SimMode::kEvents);
  // A and B get 5 Gbps each on link 0; C gets the 15 Gbps B leaves on
  // link 1 and finishes its 10 Gbit at 0.667 s; A and B end at 2 s.
  EXPECT_NEAR(r.channel_done_s[2], 10.0 / 15, 1e-9);
  EXPECT_NEAR(r.channel_done_s[0], 2.0, 1e-9);
  EXPECT_NEAR(r.completion_s, 2.0, 1e-9);
  // Steady state: the same rates to the end.
  SimResult s = SimulateMaxMin(flows, cap, SimMode::kSteady);
  EXPECT_NEAR(s.channel_done_s[2], 10.0 / 15, 1e-9);
  EXPECT_NEAR(s.completion_s, 2.0, 1e-9);
  // When A finishes first in event mode, B speeds up on link 0: give A
  // less to move.
  flows[0].bytes = 5 * gb;  // A done at 1 s; B then gets 10 Gbps
  EXPECT_NEAR(SimulateMaxMin(flows, cap, SimMode::kEvents).completion_s, 1.5,
              1e-9);
  EXPECT_NEAR(SimulateMaxMin(flows, cap, SimMode::kSteady).completion_s, 2.0,
              1e-9);
  // A dead link stalls its flow.
  std::vector<double> dead = {0, 20};
  EXPECT_TRUE(SimulateMaxMin(flows, dead, SimMode::kEvents).stuck);
  EXPECT_TRUE(SimulateMaxMin(flows, dead, SimMode::kSteady).stuck);
}

TEST(PlannerTest, PlanBalancesUplinksWhereEcmpCollides) {
  Fabric fab = Gen("gen:leafspine,gpus=512,hosts_per_tor=8");
  auto place = PlaceJob(fab, 512, Placement::kScattered, 5);
  ASSERT_TRUE(place.ok());
  std::vector<Flow> flows = BuildRingFlows(fab, *place, RingSpec{}, nullptr);
  auto h = MakeHash("crc32");
  PlannerOptions po;
  po.hash = h->get();
  Planner planner(&fab, &flows, po);
  FlowPlan plan = planner.Plan(1);
  const int pinned_count = planner.PinAll(&plan);
  std::vector<double> bytes = Planner::LinkBytes(fab, flows, plan);
  // Every flow has a path from its NIC to its peer's NIC.
  for (const Flow& f : flows) {
    const PlannedPath& p = plan.paths[f.id];
    ASSERT_FALSE(p.links.empty()) << f.id;
    EXPECT_EQ(fab.link(p.links.front()).src, f.src_gpu);
    EXPECT_EQ(fab.link(p.links.back()).dst, f.dst_gpu);
    for (size_t k = 1; k < p.links.size(); ++k) {
      EXPECT_EQ(fab.link(p.links[k - 1]).dst, fab.link(p.links[k]).src);
    }
  }
  // No fabric link carries more than the bound's per-link share: the most
  // loaded link takes no longer than the cut bound.
  double worst = 0;
  for (size_t l = 0; l < bytes.size(); ++l) {
    worst = std::max(worst, bytes[l] * 8 / (fab.link(l).gbps * 1e9));
  }
  const double bound = CutBound(fab, flows, 0.95);
  EXPECT_LE(worst, bound * 1.05);
  // ECMP on the same flows: the most loaded link of a typical seed is worse.
  EcmpRouter router(&fab, h->get(), 11);
  std::vector<double> eb(fab.links().size(), 0);
  for (const Flow& f : flows) {
    const std::vector<int> links =
        f.network ? router.Route(f).links : plan.paths[f.id].links;
    for (int l : links) eb[l] += f.bytes;
  }
  double ecmp_worst = 0;
  for (size_t l = 0; l < eb.size(); ++l) {
    ecmp_worst = std::max(ecmp_worst, eb[l] * 8 / (fab.link(l).gbps * 1e9));
  }
  EXPECT_GT(ecmp_worst, worst * 1.3);
  // Most planned paths are pinned to a source port that ECMP reproduces.
  int pinned = 0, network = 0;
  EcmpRouter real(&fab, h->get(), po.fabric_seed);
  for (const Flow& f : flows) {
    if (!f.network) continue;
    ++network;
    const PlannedPath& p = plan.paths[f.id];
    if (p.src_port == 0) continue;
    ++pinned;
    EXPECT_EQ(real.Route(f, p.src_port).links, p.links);
  }
  EXPECT_GT(pinned, network * 9 / 10);
  EXPECT_EQ(pinned, pinned_count);
}

TEST(PlannerTest, ReplanMovesOnlyFlowsOnTheDegradedLink) {
  Fabric fab = Gen("gen:3tier,gpus=1024,hosts_per_tor=8,tors_per_pod=8");
  auto place = PlaceJob(fab, 1024, Placement::kScattered, 2);
  ASSERT_TRUE(place.ok());
  std::vector<Flow> flows = BuildRingFlows(fab, *place, RingSpec{}, nullptr);
  Planner planner(&fab, &flows, PlannerOptions{});
  FlowPlan plan = planner.Plan(1);
  // Degrade the busiest ToR uplink to a quarter.
  std::vector<double> bytes = Planner::LinkBytes(fab, flows, plan);
  int busiest = -1;
  for (size_t l = 0; l < bytes.size(); ++l) {
    if (fab.link(l).kind != LinkKind::kFabric) continue;
    if (busiest < 0 || bytes[l] > bytes[busiest]) busiest = int(l);
  }
  ASSERT_GE(busiest, 0);
  ASSERT_GT(bytes[busiest], 0);
  fab.SetCapacity(busiest, fab.link(busiest).nominal_gbps / 4);
  Planner::ReplanStats stats;
  FlowPlan re = planner.Replan(plan, {busiest}, 2, &stats);
  EXPECT_EQ(re.epoch, 2u);
  EXPECT_GT(stats.crossing, 0);
  EXPECT_GT(stats.moved, 0);
  int changed = 0;
  for (const Flow& f : flows) {
    if (re.paths[f.id].links == plan.paths[f.id].links &&
        re.paths[f.id].split.empty()) {
      continue;
    }
    ++changed;
    // Only flows that crossed the degraded link moved.
    bool crossed = false;
    for (int l : plan.paths[f.id].links) crossed |= l == busiest;
    EXPECT_TRUE(crossed) << "flow " << f.id << " moved without cause";
  }
  EXPECT_EQ(changed, stats.moved);
  // The re-plan leaves the degraded link no busier than a quarter link can
  // carry in the healthy bound's time.
  std::vector<double> after = Planner::LinkBytes(fab, flows, re);
  EXPECT_LT(after[busiest], bytes[busiest]);
}

TEST(PlannerTest, DegradedNicMovesItsFlowsToOtherNics) {
  Fabric fab = Gen("gen:leafspine,gpus=64,hosts_per_tor=4");
  auto place = PlaceJob(fab, 64, Placement::kPacked, 1);
  ASSERT_TRUE(place.ok());
  std::vector<Flow> flows = BuildRingFlows(fab, *place, RingSpec{}, nullptr);
  Planner planner(&fab, &flows, PlannerOptions{});
  FlowPlan plan = planner.Plan(1);
  auto nic = fab.FindLinks("host2/nic3");
  ASSERT_TRUE(nic.ok()) << nic.status();
  for (int l : *nic) fab.SetCapacity(l, fab.link(l).nominal_gbps * 0.1);
  Planner::ReplanStats stats;
  FlowPlan re = planner.Replan(plan, *nic, 2, &stats);
  EXPECT_GT(stats.moved, 0);
  const int gpu = fab.FindNode("host2/gpu3");
  for (const Flow& f : flows) {
    if (!f.network) continue;
    EXPECT_NE(re.paths[f.id].src_gpu, gpu) << "flow " << f.id;
    EXPECT_NE(re.paths[f.id].dst_gpu, gpu) << "flow " << f.id;
  }
}

TEST(EvaluateTest, PlanNeverWorseThanEcmpMedianAndAboveTheBound) {
  Fabric fab = Gen("gen:leafspine,gpus=256,hosts_per_tor=4");
  EvalOptions o;
  o.seeds = 20;
  o.placement = Placement::kScattered;
  auto r = Evaluate(&fab, o);
  ASSERT_TRUE(r.ok()) << r.status();
  const Evaluation& e = r->healthy;
  EXPECT_GE(e.planned.completion_s, e.bound.completion_s * (1 - 1e-9));
  EXPECT_LE(e.planned.completion_s, e.ecmp.completion_s_p50);
  EXPECT_LE(e.ecmp.completion_s_p50, e.ecmp.completion_s_p99);
  EXPECT_GT(e.ecmp.max_link_util, e.planned.max_link_util);
  EXPECT_FALSE(r->degraded);

  EvalOptions d = o;
  d.degrade = {{"spine3", 0.5}};
  fab.ResetCapacities();
  auto rd = Evaluate(&fab, d);
  ASSERT_TRUE(rd.ok()) << rd.status();
  EXPECT_TRUE(rd->degraded);
  EXPECT_GT(rd->moved, 0);
  EXPECT_LE(rd->after.planned.completion_s,
            rd->after.ecmp.completion_s_p50 * (1 + 1e-9));
  d.degrade = {{"nosuch-link", 0.5}};
  EXPECT_FALSE(Evaluate(&fab, d).ok());
  d.degrade = {{"spine3", 1.5}};
  EXPECT_FALSE(Evaluate(&fab, d).ok());
}

// Values no job or benchmark means are refused naming the flag, not run
// as something else: a negative rank count (was: every GPU) and a busiest
// link degraded to more than its capacity or below 0 (was: run, or
// silently not degraded).
TEST(EvaluateTest, OutOfRangeRanksAndBusiestShareAreRefused) {
  Fabric fab = Gen("gen:leafspine,gpus=64,hosts_per_tor=2");
  EvalOptions o;
  o.seeds = 2;
  o.ranks = -3;
  auto r = Evaluate(&fab, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--ranks -3"), std::string::npos)
      << r.status();
  o.ranks = 0;
  for (double share : {1.5, -0.5}) {
    fab.ResetCapacities();
    o.degrade_busiest = share;
    r = Evaluate(&fab, o);
    ASSERT_FALSE(r.ok()) << share;
    EXPECT_NE(r.status().message().find("--degrade-busiest"), std::string::npos)
        << r.status();
  }
}

// Values no run means are refused naming the flag and the value. Before,
// --bytes nan planned every time as 0, --bytes inf gave null completions in
// -o json, --channels -1 silently meant the default and --channels 100000
// ran for minutes.
TEST(EvaluateTest, OddBytesChannelsAndSeedsAreRefusedNamingTheFlag) {
  Fabric fab = Gen("gen:leafspine,gpus=64,hosts_per_tor=2");
  struct Case {
    std::function<void(EvalOptions*)> set;
    std::string want;
  };
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<Case> cases = {
      {[](EvalOptions* o) { o->ring.bytes = std::nan(""); }, "--bytes nan"},
      {[&](EvalOptions* o) { o->ring.bytes = inf; }, "--bytes inf"},
      {[](EvalOptions* o) { o->ring.channels = -1; }, "--channels -1"},
      {[](EvalOptions* o) { o->ring.channels = 100000; }, "--channels 100000"},
      {[](EvalOptions* o) { o->seeds = 0; }, "--seeds 0"},
      // Before, no upper bound: --seeds 100000000 ran for days.
      {[](EvalOptions* o) { o->seeds = kMaxEcmpSeeds + 1; },
       "--seeds 10001: draw 1..10000 ECMP seeds"},
  };
  for (const Case& c : cases) {
    EvalOptions o;
    o.seeds = 2;
    c.set(&o);
    auto r = Evaluate(&fab, o);
    ASSERT_FALSE(r.ok()) << c.want;
    EXPECT_NE(r.status().message().find(c.want), std::string::npos)
        << r.status();
  }
}

// Before, hosts with more than 32 NICs got two channels per NIC by default
// (66 at 33 NICs, 128 at 64), over NCCL's MAXCHANNELS that --channels
// itself refuses; one rank's all-reduce printed NaN ratios.
TEST(EvaluateTest, DefaultChannelsStayWithinNcclsLimitAndOneRankIsRefused) {
  Fabric fab = Gen("gen:leafspine,gpus=256,gpus_per_host=64");
  EvalOptions o;
  o.seeds = 1;
  auto r = Evaluate(&fab, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->channels, kNcclMaxChannels);
  o.ranks = 1;
  auto one = Evaluate(&fab, o);
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.status().message().find("--ranks 1"), std::string::npos)
      << one.status();
}

// Before, --degrade-busiest on a job that crosses no switch-to-switch link
// (hosts under one ToR) re-planned nothing and said nothing.
TEST(EvaluateTest, DegradeBusiestWithNoSwitchLinkInUseIsWarned) {
  Fabric fab = Gen("gen:leafspine,gpus=64,hosts_per_tor=2");
  EvalOptions o;
  o.seeds = 1;
  o.ranks = 16;  // the two hosts of the first ToR
  o.degrade_busiest = 0.25;
  auto r = Evaluate(&fab, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->degraded);
  bool warned = false;
  for (const std::string& w : r->warnings) {
    warned |= w.find("--degrade-busiest 0.25: no switch-to-switch link") !=
              std::string::npos;
  }
  EXPECT_TRUE(warned) << "no warning that nothing was degraded";
}

// A link down (degraded to 0) is gone from the switches' ECMP groups and a
// port down from its NIC's bond: ECMP routes around it, as a real fabric
// does within milliseconds of a link-down. Before, ECMP kept hashing flows
// onto the dead link: its completions were infinite (`null` in -o json),
// its max link utilisation ~1e32 and the ratios `infx`, for a cable or a
// plane's ToR that is down: the commonest thing an operator marks.
TEST(EvaluateTest, EcmpRoutesAroundLinksAndPortsThatAreDown) {
  struct Case {
    const char* fabric;
    const char* down;
  };
  for (const Case& c :
       {Case{"gen:leafspine,gpus=64,hosts_per_tor=2", "tor0.0-spine0"},
        Case{"gen:leafspine,gpus=64,hosts_per_tor=2,planes=2",
             "host0/nic0-tor0.0p0"},
        Case{"gen:3tier,gpus=256,hosts_per_tor=2,tors_per_pod=4,planes=2",
             "tor0.0p0"}}) {
    Fabric fab = Gen(c.fabric);
    EvalOptions o;
    o.seeds = 20;
    o.ring.qps_per_connection = 1;
    o.placement = Placement::kScattered;
    o.degrade = {{c.down, 0.0}};
    auto r = Evaluate(&fab, o);
    ASSERT_TRUE(r.ok()) << c.down << ": " << r.status();
    const StrategyResult& e = r->after.ecmp;
    EXPECT_TRUE(std::isfinite(e.completion_s_p99)) << c.down;
    EXPECT_TRUE(std::isfinite(e.max_link_util)) << c.down;
    EXPECT_LT(e.max_link_util, 100) << c.down;
    // The plan is never slower than ECMP's median, degraded too.
    EXPECT_LE(r->after.planned.completion_s, e.completion_s_p50 * 1.0001)
        << c.down;
    // No seed's ECMP route crosses a link that is down, and the ports the
    // re-plan pinned reproduce its paths on the degraded fabric.
    auto hash = MakeHash("crc32");
    ASSERT_TRUE(hash.ok());
    for (int s = 0; s < o.seeds; ++s) {
      EcmpRouter router(&fab, hash->get(), o.first_seed + s);
      for (const Flow& f : r->flow_list) {
        if (!f.network) continue;
        const RoutedPath p = router.Route(f);
        ASSERT_FALSE(p.links.empty()) << c.down;
        for (int l : p.links) {
          ASSERT_GT(fab.link(l).gbps, 0) << c.down << ": " << fab.LinkName(l);
        }
      }
    }
    EcmpRouter pinned(&fab, hash->get(), o.fabric_seed);
    int checked = 0;
    for (const Flow& f : r->flow_list) {
      const PlannedPath& pp = r->plan.paths[f.id];
      if (!f.network || pp.src_port == 0 || !pp.split.empty()) continue;
      Flow g = f;
      g.src_gpu = pp.src_gpu;
      g.dst_gpu = pp.dst_gpu;
      EXPECT_EQ(pinned.Route(g, pp.src_port).links, pp.links) << c.down;
      ++checked;
    }
    EXPECT_GT(checked, 0) << c.down;
  }
}

// A degrade that leaves a host of the job without any network capacity
// (its NIC, or its ToR, at 0) leaves no path for its flows: the job cannot
// run there. Evaluate says so, naming the flow and the link, instead of
// reporting infinite completions and a bound of 1e30 s. A link at 0 that
// the re-plan can route around is fine.
TEST(EvaluateTest, ADegradeThatCutsAHostOffIsRefusedNamingIt) {
  // Hosts of one NIC (a NIC down cuts its host off) and of eight NICs on
  // one ToR (the ToR down cuts both its hosts off).
  Fabric one_nic = Gen("gen:leafspine,gpus=16,gpus_per_host=1,hosts_per_tor=2");
  Fabric fab = Gen("gen:leafspine,gpus=64,hosts_per_tor=2,rail=0");
  EvalOptions o;
  o.seeds = 5;
  for (auto [f, spec] :
       {std::pair{&one_nic, "host1/nic0"}, std::pair{&fab, "tor0"}}) {
    o.degrade = {{spec, 0.0}};
    auto r = Evaluate(f, o);
    ASSERT_FALSE(r.ok()) << spec << ": completion "
                         << r->after.planned.completion_s;
    EXPECT_NE(r.status().message().find("no path with capacity"),
              std::string::npos)
        << r.status();
    EXPECT_NE(r.status().message().find("at 0 Gbps"), std::string::npos)
        << r.status();
  }
  fab.ResetCapacities();
  o.degrade = {{"tor0-spine0", 0.0}};
  auto ok = Evaluate(&fab, o);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_LT(ok->after.planned.completion_s, 1);
}

}  // namespace
}  // namespace pitstop::c4p

namespace pitstop::c4p {
namespace {

TEST(FlowsTest, LiveConnectionsBecomeFlows) {
  Fabric fab = Gen("gen:leafspine,gpus=16,hosts_per_tor=1");
  // Ranks 0..3 on host0 gpu0..3 and host1 gpu0..3 (rank_gpu by node id).
  std::vector<int> rank_gpu;
  for (const char* n :
       {"host0/gpu0", "host0/gpu1", "host1/gpu0", "host1/gpu1"}) {
    rank_gpu.push_back(fab.FindNode(n));
  }
  std::vector<LiveConnection> conns = {
      {0, 1, 0, 1e6},  // inside host0: NVLink
      {1, 2, 0, 1e6},  // host0 -> host1: network
      {2, 3, 1, 2e6},
  };
  auto flows = FlowsFromConnections(fab, rank_gpu, conns, 2);
  ASSERT_TRUE(flows.ok()) << flows.status();
  ASSERT_EQ(flows->size(), 4u);  // the network one has two QPs
  EXPECT_FALSE((*flows)[0].network);
  EXPECT_TRUE((*flows)[1].network);
  EXPECT_TRUE((*flows)[2].network);
  EXPECT_DOUBLE_EQ((*flows)[1].bytes, 5e5);
  EXPECT_EQ((*flows)[1].conn, (*flows)[2].conn);
  Planner planner(&fab, &*flows, PlannerOptions{});
  FlowPlan plan = planner.Plan(7);
  EXPECT_EQ(plan.epoch, 7u);
  EXPECT_EQ(fab.link(plan.paths[1].links.front()).src, rank_gpu[1]);
  conns.push_back({3, 9, 0, 1});
  EXPECT_FALSE(FlowsFromConnections(fab, rank_gpu, conns, 1).ok());
}

}  // namespace
}  // namespace pitstop::c4p
