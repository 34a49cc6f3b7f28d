// Two-phase rebuild and state transfer in the library (docs/migration.md
// "Two-phase rebuild and state transfer (library)"), end to end over real
// processes: three ranks of the deterministic trainer and one joiner over
// the CPU NCCL backend, libnccl-profiler-pitstop.so LD_PRELOADed with
// PITSTOP_VIRTUALIZE_COMMS=1. The test is the agent and the controller: its
// telemetry receiver sends RankMigrationDirectives on each process's stream
// and reads the acks. In the main test the joiner's library makes the new
// communicators' ids (PHASE_MAKE_IDS), as it must with real NCCL, whose ids
// hold their maker's address; the others make them in the test with the
// backend's ncclGetUniqueId, as a controller may for the CPU backend.
//
// Nothing is timed: every wait is for an answer, and the ranks' deadline
// (RunRanks) kills whatever is stuck. The switch point lies a margin of
// steps past the progress the ranks reported; a rank that passed it anyway
// refuses the switch (its ack says so) and the test fails with that text.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/plugin/migration_fixture.h"

namespace pitstop::testing {
namespace {

// The joiner's library makes the new ids (PHASE_MAKE_IDS) and PREPARE
// brings them to every member, as with real NCCL.
TEST_F(MigrationTest,
       JoinerTakesTheLeaversRankAndWeightsMatchAnUndisturbedRun) {
  const std::string reference = ReferenceWeights();
  ASSERT_EQ(reference.size(), 577 * sizeof(float));
  Start("mig", "32");
  std::map<std::string, v1::RankMigrationAck> ready, switched, again, committed;
  uint64_t switch_seq = 0;
  auto drive = [&]() -> ::testing::AssertionResult {
    if (!FindStreams()) return ::testing::AssertionFailure() << "no hellos";
    if (auto made = MakeIdsAtJoiner(); !made) return made;
    Send(Directive::PHASE_PREPARE, kAll);
    if (!WaitAcks(Directive::PHASE_PREPARE, kAll, 1, &ready) || !AllOk(ready)) {
      return ::testing::AssertionFailure() << "READY:\n" << AllAcks();
    }
    for (const auto& [who, a] : ready) {
      switch_seq = std::max(switch_seq, a.progress_seq() + kSwitchMargin);
    }
    Send(Directive::PHASE_SWITCH_AT, kAll, switch_seq);
    if (!WaitAcks(Directive::PHASE_SWITCH_AT, kAll, 1, &switched) ||
        !AllOk(switched)) {
      return ::testing::AssertionFailure() << "SWITCHED:\n" << AllAcks();
    }
    // Repeats are answered again, not redone (a second PREPARE would init
    // the new communicator again and never connect; a second swap would
    // be refused).
    Send(Directive::PHASE_PREPARE, kStayers);
    Send(Directive::PHASE_SWITCH_AT, kStayers, switch_seq);
    if (!WaitAcks(Directive::PHASE_PREPARE, kStayers, 2, &again) ||
        !WaitAcks(Directive::PHASE_SWITCH_AT, kStayers, 2, &again) ||
        !AllOk(again)) {
      return ::testing::AssertionFailure() << "repeats:\n" << AckText(again);
    }
    Send(Directive::PHASE_COMMIT, kAll);  // the leaver may be gone: fine
    if (!WaitAcks(Directive::PHASE_COMMIT, kStayers, 1, &committed) ||
        !AllOk(committed)) {
      return ::testing::AssertionFailure() << "COMMIT:\n" << AckText(committed);
    }
    return ::testing::AssertionSuccess();
  };
  const auto driven = drive();
  Finish();
  ASSERT_TRUE(driven) << Describe(results_);
  ASSERT_TRUE(AllExitedZero(results_)) << Describe(results_);

  // Byte-identical weights on every final rank.
  for (const char* who : {"r0", "r1", "joiner"}) {
    EXPECT_TRUE(Read(Path("mig", who, "bin")) == reference)
        << who << "'s weights differ from the undisturbed run";
  }
  EXPECT_TRUE(Read(Path("mig", "r2", "bin")).empty()) << "the leaver wrote";
  // Every step exactly once per final rank: the leaver ran [0, switch),
  // the joiner [switch, end).
  const auto r0 = StepLog(Path("mig", "r0", "steps"));
  const auto leaver = StepLog(Path("mig", "r2", "steps"));
  const auto joiner = StepLog(Path("mig", "joiner", "steps"));
  auto rank2 = leaver;
  rank2.insert(rank2.end(), joiner.begin(), joiner.end());
  const std::vector<std::pair<int, double>>* logs[] = {&r0, &rank2};
  for (const auto* log : logs) {
    ASSERT_EQ(log->size(), static_cast<size_t>(kSteps));
    for (int s = 0; s < kSteps; ++s) EXPECT_EQ((*log)[s].first, s);
  }
  ASSERT_EQ(leaver.size(), switch_seq) << "the switch is not at its point";
  EXPECT_EQ(StepLog(Path("mig", "r1", "steps")).size(),
            static_cast<size_t>(kSteps));
  // The new communicator was made once per member despite the repeat.
  const uint64_t new_hash = HashOf(new_world_);
  for (const char* who : {"r0", "r1", "joiner"}) {
    EXPECT_EQ(Inits(who, new_hash), 1) << who;
  }
  // Measured, not asserted: the longest step around the switch (it waits
  // for the state transfer and the joiner's first all-reduce) less the
  // median step.
  std::vector<double> ms;
  for (const auto& [step, t] : r0) ms.push_back(t);
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  double longest = 0;
  for (uint64_t s = switch_seq - 2; s <= switch_seq + 2 && s < ms.size(); ++s) {
    longest = std::max(longest, ms[s]);
  }
  std::printf(
      "migration downtime: %.3f ms (longest step around the switch at step "
      "%llu: %.3f ms, median step %.3f ms)\n",
      longest - median, static_cast<unsigned long long>(switch_seq), longest,
      median);
}

TEST_F(MigrationTest, AbortAfterPrepareKeepsTrainingOnTheOldCommunicators) {
  const std::string reference = ReferenceWeights();
  ASSERT_FALSE(reference.empty());
  Start("abort", "32");
  std::map<std::string, v1::RankMigrationAck> ready, aborted;
  auto drive = [&]() -> ::testing::AssertionResult {
    if (!FindStreams()) return ::testing::AssertionFailure() << "no hellos";
    Send(Directive::PHASE_PREPARE, kAll);
    if (!WaitAcks(Directive::PHASE_PREPARE, kAll, 1, &ready) || !AllOk(ready)) {
      return ::testing::AssertionFailure() << "READY:\n" << AllAcks();
    }
    Send(Directive::PHASE_ABORT, kAll, 0, "operator changed its mind");
    if (!WaitAcks(Directive::PHASE_ABORT, kAll, 1, &aborted) ||
        !AllOk(aborted)) {
      return ::testing::AssertionFailure() << "ABORT:\n" << AckText(aborted);
    }
    return ::testing::AssertionSuccess();
  };
  const auto driven = drive();
  Finish();
  ASSERT_TRUE(driven) << Describe(results_);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(results_[r].status, 0) << Describe(results_);
    EXPECT_TRUE(Read(Path("abort", kProcs[r].name, "bin")) == reference)
        << kProcs[r].name << "'s weights differ from the undisturbed run";
    EXPECT_EQ(StepLog(Path("abort", kProcs[r].name, "steps")).size(),
              static_cast<size_t>(kSteps));
  }
  EXPECT_NE(results_[3].status, 0);
  EXPECT_NE(results_[3].stderr_text.find(
                "join failed: migration aborted: operator changed its mind"),
            std::string::npos)
      << results_[3].stderr_text;
}

// A joiner whose state is shaped differently (another --hidden) refuses
// the leaver's header before any buffer moves, with the sizes in its
// error; the leaver stays (its SWITCH_AT is answered !ok) and, the stayers
// never having switched, an ABORT lets the job end as if nothing happened.
TEST_F(MigrationTest, JoinerWhoseStateDiffersGetsAClearError) {
  const std::string reference = ReferenceWeights();
  ASSERT_FALSE(reference.empty());
  Start("differ", "16");
  std::map<std::string, v1::RankMigrationAck> ready, switched, aborted;
  const std::vector<std::string> pair = {"r2", "joiner"};
  auto drive = [&]() -> ::testing::AssertionResult {
    if (!FindStreams()) return ::testing::AssertionFailure() << "no hellos";
    Send(Directive::PHASE_PREPARE, kAll);
    if (!WaitAcks(Directive::PHASE_PREPARE, kAll, 1, &ready) || !AllOk(ready)) {
      return ::testing::AssertionFailure() << "READY:\n" << AllAcks();
    }
    uint64_t switch_seq = 0;
    for (const auto& [who, a] : ready) {
      switch_seq = std::max(switch_seq, a.progress_seq() + kSwitchMargin);
    }
    Send(Directive::PHASE_SWITCH_AT, pair, switch_seq);
    if (!WaitAcks(Directive::PHASE_SWITCH_AT, pair, 1, &switched)) {
      return ::testing::AssertionFailure() << "SWITCHED:\n" << AllAcks();
    }
    Send(Directive::PHASE_ABORT, kAll, 0, "state differs");
    if (!WaitAcks(Directive::PHASE_ABORT, kStayers, 1, &aborted) ||
        !AllOk(aborted)) {
      return ::testing::AssertionFailure() << "ABORT:\n" << AckText(aborted);
    }
    return ::testing::AssertionSuccess();
  };
  const auto driven = drive();
  Finish();
  ASSERT_TRUE(driven) << Describe(results_);
  const std::string want =
      "state does not match the leaver's: state buffer 'params' is 1156 "
      "bytes here, 2308 bytes on the leaver";
  EXPECT_FALSE(switched["joiner"].ok());
  EXPECT_EQ(switched["joiner"].error(), want);
  EXPECT_FALSE(switched["r2"].ok());
  EXPECT_NE(switched["r2"].error().find("the joiner refused the state"),
            std::string::npos)
      << switched["r2"].error();
  EXPECT_NE(results_[3].stderr_text.find("join failed: " + want),
            std::string::npos)
      << results_[3].stderr_text;
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(results_[r].status, 0) << Describe(results_);
    EXPECT_TRUE(Read(Path("differ", kProcs[r].name, "bin")) == reference)
        << kProcs[r].name << "'s weights differ from the undisturbed run";
  }
}

}  // namespace
}  // namespace pitstop::testing
