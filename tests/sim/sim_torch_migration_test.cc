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

// A migration that meets a failure (docs/pytorch.md "When a migration
// meets a failure"): one process SIGKILLed at the fault's moment. Each run
// judges itself (TorchMigrationResult::failures); the checks here name the
// outcome the fault must have.
TorchMigrationResult RunWithFault(TorchMigrationFault fault) {
  TorchMigrationOptions o;
  o.fault = fault;
  o.progress = [](const std::string& line) { std::cerr << line << "\n"; };
  absl::StatusOr<TorchMigrationResult> r = RunTorchMigrationScenario(o);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return TorchMigrationResult();
  PrintTorchMigrationReport(*r, std::cerr);
  std::string failures;
  for (const std::string& f : r->failures) failures += f + "\n";
  EXPECT_TRUE(r->passed) << failures;
  EXPECT_EQ(r->victim_rank, 3);  // node1's second rank
  return *r;
}

// Killed in the sandbox: the migration aborts naming the joiner, the other
// joiner's join is woken by the abort, and the job trains on exactly as
// if nothing happened.
TEST(SimTorchMigration, JoinerDyingInTheSandboxAbortsAndTheJobTrainsOn) {
  const TorchMigrationResult r =
      RunWithFault(TorchMigrationFault::kJoinerDiesInSandbox);
  EXPECT_EQ(r.migration.state(), v1::MIGRATION_STATE_ABORTED);
  EXPECT_NE(r.migration.abort_reason().find("joiner spare0 died"),
            std::string::npos)
      << r.migration.abort_reason();
  EXPECT_EQ(r.weights_compared, 4);
  EXPECT_EQ(r.weights_identical, 4);
}

// Killed after SWITCH_AT, before it sent its state: the migration aborts
// naming the leaver (not the stayers that die of it later), and nobody
// waits on the dead rank: every process ends within kEndBound and the
// stayers' errors name a rank of node1.
TEST(SimTorchMigration, LeaverDyingBeforeItsStateWentAbortsAndNothingHangs) {
  const TorchMigrationResult r =
      RunWithFault(TorchMigrationFault::kLeaverDiesInTransfer);
  EXPECT_EQ(r.migration.state(), v1::MIGRATION_STATE_ABORTED);
  EXPECT_NE(r.migration.abort_reason().find("leaver node1 died"),
            std::string::npos)
      << r.migration.abort_reason();
  EXPECT_FALSE(r.stayer_errors.empty());
}

// Killed right after its join: the stayers are on the new communicator
// with a dead member. They must not block on it: every process ends within
// kEndBound, and every stayer's error names rank 3 (also the stayer that
// learned of it from a live neighbour).
TEST(SimTorchMigration, JoinerDyingAfterTheSwitchEndsTheJobNamingIt) {
  const TorchMigrationResult r =
      RunWithFault(TorchMigrationFault::kJoinerDiesAfterSwitch);
  EXPECT_GE(r.ended_after_kill_s, 0);
  EXPECT_EQ(r.stayer_errors.size(), 2u);  // ranks 0 and 1
  for (const std::string& e : r.stayer_errors) {
    EXPECT_NE(e.find("rank 3"), std::string::npos) << e;
  }
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
