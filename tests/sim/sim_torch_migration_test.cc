// The torch-migration scenario at CI size (docs/pytorch.md "The
// torch-migration scenario"): the demo DDP job (tools/torch-job/train_lm.py)
// on 2 nodes x 2 ranks under torchrun, the pitstop library LD_PRELOADed
// with communicators virtualised, real agents (one a standby) and a real
// controller. node1 is moved to the standby mid-run; its ranks' joiners
// build their process group and DDP in the sandbox, warm up on shadow
// steps, receive the model, optimizer and RNG state and train on. Checks:
// COMMITTED, every process exited 0, every rank's final weights identical
// to an undisturbed run, every step once. The downtime is printed by the
// scenario, not asserted.
#include <iostream>

#include "gtest/gtest.h"
#include "src/sim/torch_migration_scenario.h"

namespace pitstop::sim {
namespace {

TEST(SimTorchMigration, NodeMovesToTheStandbyAndTheWeightsStayBitIdentical) {
  TorchMigrationOptions o;
  o.progress = [](const std::string& line) { std::cerr << line << "\n"; };
  absl::StatusOr<TorchMigrationResult> r = RunTorchMigrationScenario(o);
  ASSERT_TRUE(r.ok()) << r.status();
  PrintTorchMigrationReport(*r, std::cerr);
  std::string failures;
  for (const std::string& f : r->failures) failures += f + "\n";
  EXPECT_TRUE(r->passed) << failures;
  EXPECT_EQ(r->migration.state(), v1::MIGRATION_STATE_COMMITTED);
  EXPECT_EQ(r->joiners, 2);  // node1's two ranks
  EXPECT_EQ(r->weights_compared, 4);
  EXPECT_EQ(r->weights_identical, 4);
  // The joiners continued after the migration was asked for, before the end.
  EXPECT_GT(r->switch_step, o.migrate_after_step);
  EXPECT_LT(r->switch_step, o.steps);
}

TEST(SimTorchMigration, OptionsThatCannotMoveANodeAreRefused) {
  TorchMigrationOptions o;
  o.nodes = 1;
  EXPECT_FALSE(ValidateTorchMigrationOptions(o).ok());
  o = TorchMigrationOptions();
  o.migrate_after_step = 1;  // before the joiners' shadow steps
  EXPECT_FALSE(ValidateTorchMigrationOptions(o).ok());
  o = TorchMigrationOptions();
  o.steps = o.migrate_after_step + o.switch_margin;  // no room to switch
  absl::Status st = ValidateTorchMigrationOptions(o);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--steps"), std::string::npos) << st;
}

}  // namespace
}  // namespace pitstop::sim
