// The agent's side of a flow plan: PathDirectives become tuner-table
// entries (degraded communicators only), newest epoch per job, written to
// a table the tuner's reader sees.
#include "src/agent/path_steering.h"

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "pitstop/nic_plan.h"
#include "pitstop/tuner_table.h"

namespace pitstop::agent {
namespace {

// A directory of this process's own: the tuners trust a table (and the
// interposer a NIC plan) only from root or the owner of its directory, and
// ::testing::TempDir() is /tmp (root's).
const std::string& OwnDir() {
  static const std::string* dir = [] {
    char tmpl[] = "/tmp/pitstop-path-steering-XXXXXX";
    return new std::string(mkdtemp(tmpl) != nullptr ? tmpl : "/tmp");
  }();
  return *dir;
}

v1::PathDirective Directive(const std::string& job, uint64_t epoch,
                            bool degraded) {
  v1::PathDirective d;
  d.set_job_id(job);
  d.set_epoch(epoch);
  v1::CommSteering* a = d.add_comms();
  a->set_comm_hash(0x11);
  a->set_n_ranks(16);
  a->set_n_nodes(4);
  a->set_degraded(degraded);
  a->set_max_channels(degraded ? 2 : 0);
  a->set_algorithm(degraded ? v1::ALGORITHM_RING : v1::ALGORITHM_UNSPECIFIED);
  v1::CommSteering* b = d.add_comms();  // healthy: never in the table
  b->set_comm_hash(0x22);
  b->set_n_ranks(4);
  b->set_n_nodes(1);
  return d;
}

TEST(SteeringOfTest, DegradedCommunicatorsOnlyWithShapeAndMasks) {
  std::map<std::string, v1::PathDirective> ds;
  ds["j1"] = Directive("j1", 3, true);
  std::vector<tuner::Steering> e = SteeringOf(ds);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].comm_id, 0x11u);
  EXPECT_EQ(e[0].plan_epoch, 3u);
  EXPECT_EQ(e[0].max_channels, 2);
  EXPECT_EQ(e[0].algo_mask, 1u << tuner::kAlgoRing);
  EXPECT_EQ(e[0].n_ranks, 16u);
  EXPECT_TRUE(e[0].flags & tuner::kFlagShapeUnique);
  // A second job with a communicator of the same shape: not unique.
  v1::PathDirective other = Directive("j2", 1, false);
  other.mutable_comms(0)->set_comm_hash(0x33);
  ds["j2"] = other;
  e = SteeringOf(ds);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_FALSE(e[0].flags & tuner::kFlagShapeUnique);
}

TEST(PathSteeringTest, WritesTheTableNewestEpochFirst) {
  const std::string path = absl::StrCat(OwnDir(), "/tuner-", getpid());
  unlink(path.c_str());
  PathSteering s(path);
  EXPECT_EQ(s.table_path(), path);
  ASSERT_TRUE(s.OnDirective(Directive("j1", 2, true)).ok());
  EXPECT_EQ(s.epoch("j1"), 2u);
  std::string error;
  auto reader = tuner::TunerTableReader::Open(path, &error);
  ASSERT_NE(reader, nullptr) << error;
  tuner::Steering got;
  ASSERT_EQ(reader->Lookup(0x11, &got),
            tuner::TunerTableReader::Result::kFound);
  EXPECT_EQ(got.plan_epoch, 2u);
  EXPECT_EQ(reader->Lookup(0x22, &got),
            tuner::TunerTableReader::Result::kAbsent);
  // An older or repeated epoch changes nothing (a resend after a
  // reconnect); a newer healthy one empties the table.
  const uint64_t gen = reader->generation();
  ASSERT_TRUE(s.OnDirective(Directive("j1", 1, false)).ok());
  ASSERT_TRUE(s.OnDirective(Directive("j1", 2, false)).ok());
  EXPECT_EQ(reader->generation(), gen);
  EXPECT_EQ(s.epoch("j1"), 2u);
  ASSERT_TRUE(s.OnDirective(Directive("j1", 3, false)).ok());
  EXPECT_EQ(reader->Lookup(0x11, &got),
            tuner::TunerTableReader::Result::kAbsent);
  EXPECT_EQ(s.epoch("j1"), 3u);
  unlink(path.c_str());
}

// Every communicator with planned NICs goes into the NIC plan beside the
// table (healthy ones too: the NIC set applies at the next creation
// whatever the path's health), newest epoch per job, read back as the
// interposer reads it.
TEST(PathSteeringTest, WritesTheNicPlanBesideTheTable) {
  const std::string path = absl::StrCat(OwnDir(), "/tuner-nics-", getpid());
  unlink(path.c_str());
  PathSteering s(path);
  EXPECT_EQ(s.nic_plan_path(), path + ".nics");
  v1::PathDirective d = Directive("j1", 4, false);
  d.mutable_comms(0)->add_nic_indices(3);
  d.mutable_comms(0)->add_nic_indices(1);
  d.mutable_comms(0)->add_nic_indices(3);
  ASSERT_TRUE(s.OnDirective(d).ok());
  std::vector<nicplan::NicPlanEntry> got;
  std::string error;
  ASSERT_TRUE(nicplan::ReadNicPlan(path + ".nics", &got, &error)) << error;
  ASSERT_EQ(got.size(), 1u);  // 0x22 has no planned NICs
  EXPECT_EQ(got[0].comm_id, 0x11u);
  EXPECT_EQ(got[0].job, "j1");
  EXPECT_EQ(got[0].epoch, 4u);
  EXPECT_EQ(got[0].n_ranks, 16);
  EXPECT_TRUE(got[0].unique_shape);
  EXPECT_EQ(got[0].nics, (std::vector<int>{1, 3}));
  EXPECT_EQ(nicplan::MatchNicPlan(got, "j1", 0, 16), &got[0]);
  // A newer epoch moves the communicator to NIC 0.
  d.set_epoch(5);
  d.mutable_comms(0)->clear_nic_indices();
  d.mutable_comms(0)->add_nic_indices(0);
  ASSERT_TRUE(s.OnDirective(d).ok());
  ASSERT_TRUE(nicplan::ReadNicPlan(path + ".nics", &got, &error)) << error;
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].epoch, 5u);
  EXPECT_EQ(got[0].nics, (std::vector<int>{0}));
  unlink(path.c_str());
  unlink((path + ".nics").c_str());
}

TEST(PathSteeringTest, UnwritablePathIsAnError) {
  PathSteering s("/proc/no-such-dir/table");
  absl::Status st = s.OnDirective(Directive("j1", 1, true));
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
  EXPECT_NE(st.message().find("/proc/no-such-dir/table"), std::string::npos);
  EXPECT_EQ(s.epoch("j1"), 0u);
}

}  // namespace
}  // namespace pitstop::agent
