// End to end, standby migration (docs/migration.md "The standby-migration
// scenario") and node-failure migration at CI size: a real controller, three
// agents with the library relay and a standby, 3 trainer ranks over the CPU
// NCCL backend with the pitstop library preloaded. node1's rank moves to the
// standby mid-run: the joiner's library makes the new ids (MAKE_IDS), every
// member prepares, the switch happens at one sequence number, the leaver hands
// its state over and leaves. The run must commit, end byte-identical to an
// undisturbed run, and run every step exactly once per rank.
#include <iostream>

#include "gtest/gtest.h"
#include "src/sim/migration_scenario.h"

namespace pitstop::sim {
namespace {

TEST(SimMigration, NodeMovesToTheStandbyAndTheModelIsBitIdentical) {
  MigrationScenarioOptions o;
  o.nodes = 3;
  o.ranks_per_node = 1;
  // The switch lands at the progress READY reported + the margin: on a
  // loaded machine READY came 1.6 s late once (progress ~540) and a
  // 900-step job ended before its switch point; 2400 leaves room.
  o.steps = 2400;
  o.migrate_after_step = 100;
  // Collectives of a few ms each: 400 of them leave SWITCH_AT a second or
  // more to reach every rank on a loaded machine.
  o.switch_margin = 400;
  o.progress = [](const std::string& line) { std::cerr << line << "\n"; };
  auto r = RunMigrationScenario(o);
  ASSERT_TRUE(r.ok()) << r.status();
  PrintMigrationReport(*r, std::cerr);
  for (const std::string& f : r->failures) ADD_FAILURE() << f;
  EXPECT_TRUE(r->passed);
  EXPECT_EQ(r->migration.state(), v1::MIGRATION_STATE_COMMITTED);
  // The joiner's library made the ids (real NCCL ids need their maker).
  EXPECT_TRUE(r->migration.ids_from_joiner());
  EXPECT_NE(r->migration.ids_unix_ns(), 0u);
  EXPECT_EQ(r->migration.comms_size(), 1);
  EXPECT_EQ(r->migration.transfers_size(), 1);
  EXPECT_EQ(static_cast<uint64_t>(r->switch_step), r->migration.switch_seq());
}

// Node failure at CI size: node1's trainer is SIGKILLed; the others'
// all-reduce fails and they wait in pitstop_trainer_recover; the migration
// (from_replica) brings the joiner in with rank 0's state (a data-parallel
// replica) and every rank redoes the failed step.
TEST(SimMigration, KilledNodeIsReplacedFromAReplicaAndTheModelIsBitIdentical) {
  MigrationScenarioOptions o;
  o.nodes = 3;
  o.ranks_per_node = 1;
  o.steps = 600;
  o.migrate_after_step = 100;
  o.node_failure = true;
  o.progress = [](const std::string& line) { std::cerr << line << "\n"; };
  auto r = RunMigrationScenario(o);
  ASSERT_TRUE(r.ok()) << r.status();
  PrintMigrationReport(*r, std::cerr);
  for (const std::string& f : r->failures) ADD_FAILURE() << f;
  EXPECT_TRUE(r->passed);
  EXPECT_EQ(r->migration.state(), v1::MIGRATION_STATE_COMMITTED);
  EXPECT_TRUE(r->migration.from_replica());
  ASSERT_EQ(r->migration.transfers_size(), 1);
  // The replica is a stayer rank, not the dead one.
  EXPECT_NE(r->migration.transfers(0).source_global_rank(), 1);
  // Every rank redid the step the joiner started at.
  EXPECT_EQ(static_cast<uint64_t>(r->switch_step), r->migration.switch_seq());
  EXPECT_GE(r->switch_step, 100);
}

}  // namespace
}  // namespace pitstop::sim
