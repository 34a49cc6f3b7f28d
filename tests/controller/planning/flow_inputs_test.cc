// The live planner's inputs on the fabric: agents' hosts onto fabric hosts
// (on a fabric read from each format of ../shared/data/topology) and the
// bytes per collective of connections that no proxy step measured.
#include "src/controller/planning/flow_inputs.h"

#include <string>

#include "gtest/gtest.h"
#include "src/c4p/fabric_io.h"
#include "tests/c4p/shared_topology.h"

namespace pitstop::controller {
namespace {

using c4p::SharedTopology;
using c4p::SharedTopologyText;

// The fabric in ../shared/data/topology/`name`; skips when absent.
#define LOAD_SHARED(f, name)                                                   \
  if (SharedTopologyText(name).empty()) {                                      \
    GTEST_SKIP() << "../shared/data/topology is absent (no " << (name) << ")"; \
  }                                                                            \
  auto f = c4p::LoadFabric(SharedTopology(name).string(), {});                 \
  ASSERT_TRUE(f.ok()) << f.status()

TEST(FabricHostIndexTest, GeneratedFabricByNameThenHostN) {
  auto f = c4p::LoadFabric("gen:leafspine,gpus=8,gpus_per_host=2", {});
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->hosts().size(), 4u);
  const FabricHostIndex index(*f);
  EXPECT_EQ(index.Find("host2"), 2);
  EXPECT_EQ(index.Find("node2"), 2);  // node2 = host2
  EXPECT_EQ(index.Find("gpu-node-3"), 3);
  EXPECT_EQ(index.Find("node4"), -1);  // past the fabric's hosts
  EXPECT_EQ(index.Find("node"), -1);   // no number
  EXPECT_EQ(index.Find(""), -1);
  EXPECT_EQ(index.Find("node0000001"), -1);  // more than 6 digits
}

// Alibaba's published three-tier data: hosts are hashed ids, so "nodeN" is
// the Nth data row.
TEST(FabricHostIndexTest, PublishedHashedIdsByTheReadersOrder) {
  LOAD_SHARED(f, "lingjun_topo_slice.csv");
  ASSERT_EQ(f->hosts().size(), 239u);
  const FabricHostIndex index(*f);
  // Rows 2 and 4 of the file.
  EXPECT_EQ(
      index.Find(
          "525c32e31f7143b79af15f2bf2ec59f53aa1eae7ea72a4a1e41696912ef8cdda"),
      0);
  EXPECT_EQ(
      index.Find(
          "ed37c5d601a8fe92474a0038ab8451900454d0f783466f99fad8922762dbe9c6"),
      2);
  EXPECT_EQ(index.Find("node0"), 0);
  EXPECT_EQ(index.Find("node2"), 2);
  EXPECT_EQ(index.Find("node238"), 238);
  EXPECT_EQ(index.Find("node239"), -1);
}

// ibnetdiscover: hosts by node description. A name of the fabric wins;
// other "nodeN" are the Nth host, whatever the fabric's own numbering
// ("node18" is not "node018").
TEST(FabricHostIndexTest, IbnetdiscoverNamesFirstThenTheReadersOrder) {
  LOAD_SHARED(f, "ibnetdiscover_edr96.topo");
  const FabricHostIndex index(*f);
  const int n = static_cast<int>(f->hosts().size());
  ASSERT_GT(n, 18);
  int node018 = -1;
  for (int h = 0; h < n; ++h) {
    if (f->hosts()[h].name == "node018") node018 = h;
  }
  ASSERT_GE(node018, 0);
  EXPECT_EQ(index.Find("node018"), node018);
  EXPECT_EQ(f->hosts()[0].name, "bee01");
  EXPECT_EQ(index.Find("bee01"), 0);
  EXPECT_EQ(index.Find("node0"), 0);
  EXPECT_EQ(index.Find("node18"), 18);
  EXPECT_EQ(index.Find("node" + std::to_string(n - 1)), n - 1);
  EXPECT_EQ(index.Find("node" + std::to_string(n)), -1);
}

// SimAI's files name hosts host0..: "nodeN" is hostN by name.
TEST(FabricHostIndexTest, SimAiDualPlaneHostN) {
  LOAD_SHARED(f, "AlibabaHPN_64g_8gps_DualToR_DualPlane_200Gbps_H100.txt");
  const FabricHostIndex index(*f);
  ASSERT_EQ(f->hosts().size(), 8u);
  EXPECT_EQ(f->hosts()[index.Find("node5")].name, "host5");
  EXPECT_EQ(index.Find("node8"), -1);
}

v1::CollectiveSummary Summary(v1::CollFunc func, uint64_t bytes) {
  v1::CollectiveSummary s;
  s.set_kind(v1::OP_KIND_COLLECTIVE);
  s.set_func(func);
  s.set_bytes(bytes);
  return s;
}

v1::ConnectionSummary* AddConn(v1::CollectiveSummary* s, bool send,
                               uint32_t steps, uint64_t bytes = 0) {
  v1::ConnectionSummary* c = s->add_connections();
  c->set_is_send(send);
  c->set_peer_rank(1);
  c->set_steps(steps);
  c->set_bytes(bytes);
  return c;
}

TEST(ConnectionBytesTest, UnmeasuredRingAllReduceCarriesTheBusBytes) {
  // 8 ranks, 32 MiB, one channel: the rank sends 2 x 7/8 x 32 MiB = 56 MiB
  // (what proxy steps measure in `pitstop sim`).
  v1::CollectiveSummary s = Summary(v1::COLL_FUNC_ALL_REDUCE, 32 << 20);
  AddConn(&s, true, 2);
  AddConn(&s, false, 2);
  const std::vector<double> b = ConnectionBytes(s, 8);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_DOUBLE_EQ(b[0], 56.0 * (1 << 20));
  EXPECT_EQ(b[1], 0);  // receive side
}

TEST(ConnectionBytesTest, SplitBySteps) {
  v1::CollectiveSummary s = Summary(v1::COLL_FUNC_ALL_GATHER, 4000);
  AddConn(&s, true, 3);
  AddConn(&s, true, 1);
  const std::vector<double> b = ConnectionBytes(s, 4);  // 3/4 x 4000
  EXPECT_DOUBLE_EQ(b[0], 2250);
  EXPECT_DOUBLE_EQ(b[1], 750);
  // No steps known: evenly.
  v1::CollectiveSummary p = Summary(v1::COLL_FUNC_SEND, 1000);
  p.set_kind(v1::OP_KIND_P2P);
  AddConn(&p, true, 0);
  AddConn(&p, true, 0);
  const std::vector<double> e = ConnectionBytes(p, 2);
  EXPECT_DOUBLE_EQ(e[0], 500);
  EXPECT_DOUBLE_EQ(e[1], 500);
}

TEST(ConnectionBytesTest, MeasuredBytesWin) {
  v1::CollectiveSummary s = Summary(v1::COLL_FUNC_ALL_REDUCE, 1 << 20);
  AddConn(&s, true, 2, 12345);
  AddConn(&s, true, 2);
  const std::vector<double> b = ConnectionBytes(s, 2);
  EXPECT_EQ(b[0], 12345);
  EXPECT_DOUBLE_EQ(b[1], 0.5 * (1 << 20));  // half of 2 x 1/2 x 1 MiB
}

TEST(ConnectionBytesTest, OneRankSendsNothing) {
  v1::CollectiveSummary s = Summary(v1::COLL_FUNC_ALL_REDUCE, 1 << 20);
  AddConn(&s, true, 2);
  EXPECT_EQ(ConnectionBytes(s, 1)[0], 0);
}

}  // namespace
}  // namespace pitstop::controller
