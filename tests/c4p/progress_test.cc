// ProgressLine on a FakeClock: silent while a run is quick, then a line now
// and then, and the end of what it reported.
#include "src/c4p/progress.h"

#include <sstream>

#include "gtest/gtest.h"

namespace pitstop::c4p {
namespace {

TEST(ProgressLineTest, SilentForTwoSecondsThenALineEveryFive) {
  FakeClock clock;
  std::ostringstream out;
  ProgressLine progress(&clock, &out);
  progress.Update("ECMP", 1, 100);
  clock.Advance(absl::Milliseconds(1999));
  progress.Update("ECMP", 2, 100);
  EXPECT_EQ(out.str(), "");  // a quick run prints nothing
  clock.Advance(absl::Milliseconds(1));
  progress.Update("ECMP", 3, 100);
  EXPECT_EQ(out.str(), "ECMP: 3/100 (2 s)\n");
  clock.Advance(absl::Seconds(4));
  progress.Update("ECMP", 4, 100);
  EXPECT_EQ(out.str(), "ECMP: 3/100 (2 s)\n");
  clock.Advance(absl::Seconds(1));
  progress.Update("ECMP", 5, 100);
  EXPECT_EQ(out.str(), "ECMP: 3/100 (2 s)\nECMP: 5/100 (7 s)\n");
  // The last step is printed whenever something was.
  progress.Update("ECMP", 100, 100);
  EXPECT_EQ(out.str(),
            "ECMP: 3/100 (2 s)\nECMP: 5/100 (7 s)\nECMP: 100/100 (7 s)\n");
}

TEST(ProgressLineTest, AQuickRunNeverPrintsItsEnd) {
  FakeClock clock;
  std::ostringstream out;
  ProgressLine progress(&clock, &out);
  progress.Update("ECMP", 100, 100);
  clock.Advance(absl::Seconds(3));
  EXPECT_EQ(out.str(), "");
}

// Before, a phase that began within 5 s of the last line was not shown
// until its own 5 s passed (a minute-long run's phases went unseen).
TEST(ProgressLineTest, ANewTaskIsShownAtOnce) {
  FakeClock clock;
  std::ostringstream out;
  ProgressLine progress(&clock, &out);
  clock.Advance(absl::Seconds(3));
  progress.Update("fabric", 8192, 8192);
  clock.Advance(absl::Seconds(1));
  progress.Update("planning", 1, 100);
  progress.Update("planning", 2, 100);
  EXPECT_EQ(out.str(), "fabric: 8192/8192 (3 s)\nplanning: 1/100 (4 s)\n");
}

}  // namespace
}  // namespace pitstop::c4p
