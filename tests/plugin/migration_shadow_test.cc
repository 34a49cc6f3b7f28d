// Shadow iterations end to end (docs/migration.md "Shadow iterations"):
// rank 0 records the first collectives of the job's communicator
// (PITSTOP_SHADOW_RECORD), the joiner runs --shadow-steps 8 in its sandbox
// answered from them (PITSTOP_SHADOW_DIR), then the standby migration of
// migration_test.cc takes it in. The warm-up must compute what the job
// computed in those steps and must not change the final weights.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "plugin/shadow_record.h"
#include "src/trainer/dp_trainer.h"
#include "tests/plugin/migration_fixture.h"

namespace pitstop::testing {
namespace {

constexpr int kShadowSteps = 8;
constexpr int kRecorded = 16;             // PITSTOP_SHADOW_COLLECTIVES' default
constexpr uint64_t kGradCount = 577 + 1;  // gradients and the loss

std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') names.push_back(e->d_name);
    }
    closedir(d);
  }
  return names;
}

// The joiner's "shadow: N steps in the sandbox (T ms), fingerprint=F" line.
bool ShadowLine(const std::string& text, int* steps, double* ms,
                std::string* fingerprint) {
  const size_t at = text.find("shadow: ");
  char fp[17] = {};
  return at != std::string::npos &&
         std::sscanf(text.c_str() + at,
                     "shadow: %d steps in the sandbox (%lf ms), "
                     "fingerprint=%16s",
                     steps, ms, fp) == 3 &&
         (*fingerprint = fp, true);
}

class ShadowMigrationTest : public MigrationTest {
 protected:
  // Standby migration of rank 2 to the joiner with the test's ids.
  ::testing::AssertionResult Drive(uint64_t* switch_seq) {
    std::map<std::string, v1::RankMigrationAck> ready, switched, committed;
    if (!FindStreams()) return ::testing::AssertionFailure() << "no hellos";
    Send(Directive::PHASE_PREPARE, kAll);
    if (!WaitAcks(Directive::PHASE_PREPARE, kAll, 1, &ready) || !AllOk(ready)) {
      return ::testing::AssertionFailure() << "READY:\n" << AllAcks();
    }
    for (const auto& [who, a] : ready) {
      *switch_seq = std::max(*switch_seq, a.progress_seq() + kSwitchMargin);
    }
    Send(Directive::PHASE_SWITCH_AT, kAll, *switch_seq);
    if (!WaitAcks(Directive::PHASE_SWITCH_AT, kAll, 1, &switched) ||
        !AllOk(switched)) {
      return ::testing::AssertionFailure() << "SWITCHED:\n" << AllAcks();
    }
    Send(Directive::PHASE_COMMIT, kAll);
    if (!WaitAcks(Directive::PHASE_COMMIT, kStayers, 1, &committed) ||
        !AllOk(committed)) {
      return ::testing::AssertionFailure() << "COMMIT:\n" << AckText(committed);
    }
    return ::testing::AssertionSuccess();
  }
};

TEST_F(ShadowMigrationTest,
       ShadowStepsWarmTheJoinerUpWithoutChangingTheWeights) {
  const std::string records = dir_ + "/shadow";
  ASSERT_EQ(mkdir(records.c_str(), 0755), 0);
  // The reference's weights after the shadow steps, to compare the
  // sandbox's with.
  const std::string checkpoint = Path("ref", "r0", "ck");
  flags_["ref/r0"] = {"--save-at", absl::StrCat(kShadowSteps), "--save",
                      checkpoint};
  const std::string reference = ReferenceWeights();
  ASSERT_EQ(reference.size(), 577 * sizeof(float));

  env_["mig/r0"] = {"PITSTOP_SHADOW_RECORD=" + records};
  env_["mig/joiner"] = {"PITSTOP_SHADOW_DIR=" + records};
  flags_["mig/joiner"] = {"--shadow-steps", absl::StrCat(kShadowSteps)};
  // A real joiner arrives long after the job's first collectives; here it
  // waits for rank 0's records before it starts.
  prefix_["mig/joiner"] = {"/bin/sh", "-c",
                           "until [ $(ls \"$0\" | grep -c '\\.rec$') -ge " +
                               absl::StrCat(kRecorded) +
                               " ]; do sleep 0.01; done; exec \"$@\"",
                           records};
  Start("mig", "32");
  uint64_t switch_seq = 0;
  const auto driven = Drive(&switch_seq);
  Finish();
  ASSERT_TRUE(driven) << Describe(results_);
  ASSERT_TRUE(AllExitedZero(results_)) << Describe(results_);

  for (const char* who : {"r0", "r1", "joiner"}) {
    EXPECT_TRUE(Read(Path("mig", who, "bin")) == reference)
        << who << "'s weights differ from the undisturbed run";
  }
  // The joiner ran the shadow steps, all answered from the record, and
  // ended where the job was after them.
  const std::string& joiner_err = results_[3].stderr_text;
  int steps = 0;
  double ms = 0;
  std::string fingerprint;
  ASSERT_TRUE(ShadowLine(joiner_err, &steps, &ms, &fingerprint)) << joiner_err;
  EXPECT_EQ(steps, kShadowSteps);
  EXPECT_EQ(joiner_err.find("refused a sandbox collective"), std::string::npos)
      << joiner_err;
  trainer::TrainOptions o;
  auto at_shadow_end = trainer::LoadCheckpoint(checkpoint, o);
  ASSERT_TRUE(at_shadow_end.ok()) << at_shadow_end.status();
  char want[17];
  std::snprintf(want, sizeof(want), "%016llx",
                static_cast<unsigned long long>(
                    trainer::Fingerprint(at_shadow_end->params)));
  EXPECT_EQ(fingerprint, want) << "the sandbox computed other weights";
  // The shadow steps are not training steps: the joiner's log starts at
  // the switch.
  const auto joiner = StepLog(Path("mig", "joiner", "steps"));
  ASSERT_FALSE(joiner.empty());
  EXPECT_EQ(static_cast<uint64_t>(joiner.front().first), switch_seq);
  EXPECT_EQ(joiner.size(), kSteps - switch_seq);

  // Rank 0 recorded its first 16 all-reduces, each under its key, whole.
  const std::vector<std::string> files = Files(records);
  EXPECT_EQ(files.size(), static_cast<size_t>(kRecorded))
      << "a temporary file was left behind, or too few/many records";
  for (uint64_t seq = 0; seq < kRecorded; ++seq) {
    const plugin::ShadowKey key{.comm_hash = HashOf(world_),
                                .seq = seq,
                                .func = plugin::ShadowFunc::kAllReduce,
                                .dtype = ncclFloat32,
                                .op = ncclSum,
                                .root = -1,
                                .rank = -1,
                                .count = kGradCount};
    std::vector<float> out(kGradCount);
    std::string error;
    EXPECT_TRUE(plugin::ReadShadowRecord(records, key, out.data(),
                                         kGradCount * sizeof(float), &error))
        << error;
  }
  std::printf("shadow: %d steps in the sandbox took %.3f ms\n", steps, ms);
}

}  // namespace
}  // namespace pitstop::testing
