// A planner's plan through the store encoding: everything kept, bad bytes
// refused naming the field.
#include "src/c4p/plan_codec.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/c4p/fabric_io.h"
#include "src/c4p/flows.h"

namespace pitstop::c4p {
namespace {

using ::testing::HasSubstr;

FlowPlan RealPlan() {
  auto o = ParseGeneratorSpec("gen:leafspine,gpus=32,hosts_per_tor=2");
  EXPECT_TRUE(o.ok()) << o.status();
  auto fab = GenerateFabric(*o);
  EXPECT_TRUE(fab.ok()) << fab.status();
  auto place = PlaceJob(*fab, 32, Placement::kScattered, 7);
  EXPECT_TRUE(place.ok()) << place.status();
  int channels = 0;
  std::vector<Flow> flows = BuildRingFlows(*fab, *place, RingSpec(), &channels);
  Planner planner(&*fab, &flows, PlannerOptions());
  return planner.Plan(/*epoch=*/5);
}

void ExpectSame(const FlowPlan& a, const FlowPlan& b) {
  EXPECT_EQ(a.epoch, b.epoch);
  ASSERT_EQ(a.paths.size(), b.paths.size());
  for (size_t i = 0; i < a.paths.size(); ++i) {
    EXPECT_EQ(a.paths[i].links, b.paths[i].links) << i;
    EXPECT_EQ(a.paths[i].src_gpu, b.paths[i].src_gpu) << i;
    EXPECT_EQ(a.paths[i].dst_gpu, b.paths[i].dst_gpu) << i;
    EXPECT_EQ(a.paths[i].src_port, b.paths[i].src_port) << i;
    EXPECT_EQ(a.paths[i].split, b.paths[i].split) << i;
    EXPECT_EQ(a.paths[i].split_ports, b.paths[i].split_ports) << i;
  }
}

TEST(PlanCodecTest, APlannersPlanComesBackWhole) {
  FlowPlan plan = RealPlan();
  ASSERT_GT(plan.paths.size(), 100u);
  // What a re-plan and the port pinning add.
  plan.paths[3].src_port = 49153;
  plan.paths[3].split = {{1, 2, 3}, {4}};
  plan.paths[3].split_ports = {50000, 65535};
  const std::string bytes = EncodePlan(plan);
  auto back = DecodePlan(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSame(plan, *back);
  EXPECT_EQ(EncodePlan(*back), bytes);
  auto empty = DecodePlan(EncodePlan(FlowPlan()));
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->paths.empty());
}

TEST(PlanCodecTest, BadBytesAreRefusedNamingTheField) {
  auto why = [](const std::string& bytes) {
    auto p = DecodePlan(bytes);
    EXPECT_FALSE(p.ok()) << bytes;
    return std::string(p.status().message());
  };
  EXPECT_THAT(why(""), HasSubstr("not a JSON object"));
  EXPECT_THAT(why("{\"epoch\":1,\"paths\":[]"), HasSubstr("not a JSON"));
  EXPECT_THAT(why("{\"paths\":[]}"), HasSubstr("epoch"));
  EXPECT_THAT(why("{\"epoch\":-1,\"paths\":[]}"), HasSubstr("epoch"));
  EXPECT_THAT(why("{\"epoch\":1}"), HasSubstr("paths"));
  const std::string ok =
      "{\"links\":[1],\"src_gpu\":0,\"dst_gpu\":1,\"src_port\":0}";
  EXPECT_TRUE(DecodePlan("{\"epoch\":1,\"paths\":[" + ok + "]}").ok());
  EXPECT_THAT(why("{\"epoch\":1,\"paths\":[" + ok +
                  ",{\"links\":[1,-4],\"src_gpu\":0,\"dst_gpu\":1,"
                  "\"src_port\":0}]}"),
              HasSubstr("paths[1].links[1]"));
  EXPECT_THAT(why("{\"epoch\":1,\"paths\":[{\"links\":[],\"src_gpu\":0,"
                  "\"dst_gpu\":1,\"src_port\":70000}]}"),
              HasSubstr("paths[0].src_port"));
  EXPECT_THAT(why("{\"epoch\":1,\"paths\":[{\"links\":[],\"src_gpu\":0,"
                  "\"src_port\":1}]}"),
              HasSubstr("paths[0].dst_gpu"));
  EXPECT_THAT(why("{\"epoch\":1,\"paths\":[{\"links\":[],\"src_gpu\":0,"
                  "\"dst_gpu\":1,\"src_port\":1,\"split\":[[2],\"x\"]}]}"),
              HasSubstr("paths[0].split[1]"));
  EXPECT_THAT(why("{\"epoch\":1,\"paths\":[7]}"), HasSubstr("paths[0]"));
}

}  // namespace
}  // namespace pitstop::c4p
