// Issue #15, round 8: a cycle copies a large communicator for its detectors
// in pieces (DetectionEngine::Options::cycle_copy_chunk) and calls
// `between_comms` between them, where the controller lets its lock go, so
// an agent batch never waits for a whole data-parallel communicator's copy.
// Inputs that arrive between two pieces must not make the copy inconsistent:
// a change of members has it copied again, so no verdict blames a rank on
// what was stale.
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "tests/controller/engine_test_base.h"

namespace pitstop::controller::testing {
namespace {

class CopyInPiecesTest : public EngineTest {
 protected:
  // An engine copying at most `chunk` members and progress reports of one
  // communicator at a time.
  void Recreate(size_t chunk) {
    DetectionEngine::Options o;
    o.cycle_copy_chunk = chunk;
    auto engine = DetectionEngine::Create(&clock_, o);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
  }
  // Rank 3 (node0) never enqueued seq 10 that the others wait in: 8
  // members and 8 progress reports, 16 entries to copy.
  void SetUpHang(const SimJob& job) {
    job.Register(engine_.get());
    for (int32_t r = 0; r < 8; ++r) {
      ASSERT_TRUE(
          engine_
              ->AddProgress(job.HostOf(r), job.Progress(r, r == 3 ? 9 : 10, 9))
              .ok());
    }
  }
  // A three-step cycle after `d` whose between_comms runs `between(n)` on
  // its n-th call (from 1); returns how often it was called.
  int SplitCycle(absl::Duration d, const std::function<void(int)>& between) {
    clock_.Advance(d);
    int calls = 0;
    std::unique_ptr<CycleWork> work = engine_->BeginCycle([&] {
      ++calls;
      between(calls);
    });
    const int begin_calls = calls;
    work->Detect();
    CycleResult r = engine_->FinishCycle(work.get(), nullptr);
    for (const v1::Fault& f : r.faults) faults_.push_back(f);
    return begin_calls;
  }
  bool AnyFaultBlames(const std::string& host) const {
    for (const v1::Fault& f : faults_) {
      for (const v1::Suspect& s : f.suspects()) {
        if (s.host() == host) return true;
      }
    }
    return false;
  }
};

// The control: in one piece, between_comms runs once per communicator.
TEST_F(CopyInPiecesTest, ASmallCommunicatorIsCopiedInOnePiece) {
  Recreate(/*chunk=*/64);
  SimJob job(0xD2, 8, 4);
  SetUpHang(job);
  EXPECT_EQ(SplitCycle(absl::Seconds(6), [](int) {}), 1);
  EXPECT_EQ(engine_->stats().copies_in_pieces, 0u);
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_EQ(SuspectGlobals(Latest()[0]), (std::set<int32_t>{3}));
}

// 16 entries in pieces of 4: between_comms runs before the communicator
// and three times inside its copy, and the verdict is the same as in one
// piece.
TEST_F(CopyInPiecesTest, ALargeCommunicatorLetsGoBetweenPieces) {
  Recreate(/*chunk=*/4);
  SimJob job(0xD2, 8, 4);
  SetUpHang(job);
  EXPECT_EQ(SplitCycle(absl::Seconds(6), [](int) {}), 4);
  EXPECT_EQ(engine_->stats().copies_in_pieces, 1u);
  EXPECT_EQ(engine_->stats().copies_redone, 0u);
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_EQ(SuspectGlobals(Latest()[0]), (std::set<int32_t>{3}));
  EXPECT_TRUE(AnyFaultBlames("node0"));
}

// node0's agent is lost between two pieces, after node0's members (ranks
// 0-3, the first piece) were copied as reachable: the copy is taken again
// in one piece, so the verdict does not blame rank 3 on node0 (and needs
// no judging again at FinishCycle: the copy is not stale).
TEST_F(CopyInPiecesTest, AMemberChangeBetweenPiecesHasTheCopyTakenAgain) {
  Recreate(/*chunk=*/4);
  SimJob job(0xD2, 8, 4);
  SetUpHang(job);
  EXPECT_EQ(SplitCycle(absl::Seconds(6),
                       [&](int call) {
                         if (call == 2) engine_->NodeLost("node0");
                       }),
            4);
  EXPECT_EQ(engine_->stats().copies_redone, 1u);
  EXPECT_EQ(engine_->stats().hang_verdicts_rejudged, 0u);
  EXPECT_FALSE(AnyFaultBlames("node0"));
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_NE(Latest()[0].summary().find("node0 is unreachable"),
            std::string::npos)
      << Latest()[0].summary();
}

// Progress that arrives between two pieces is kept by the live state (the
// copy's bookkeeping does not overwrite it): rank 3 catching up while the
// copy is taken resolves the hang in the next cycle.
TEST_F(CopyInPiecesTest, ProgressBetweenPiecesIsNotLost) {
  Recreate(/*chunk=*/4);
  SimJob job(0xD2, 8, 4);
  SetUpHang(job);
  SplitCycle(absl::Seconds(6), [&](int call) {
    // Call 3 comes after the members, call 4 between the progress reports
    // of ranks 0-3 (copied as they were) and 4-7 (copied caught up).
    if (call != 4) return;
    for (int32_t r = 0; r < 8; ++r) {
      ASSERT_TRUE(
          engine_->AddProgress(job.HostOf(r), job.Progress(r, 11, 10)).ok());
    }
  });
  ASSERT_EQ(Latest().size(), 1u);
  Cycle(absl::Milliseconds(500));
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_EQ(Latest()[0].state(), v1::FAULT_STATE_RESOLVED);
}

// A closed window is taken before the pieces: collectives joined between
// two pieces belong to the next window (the straggler's fault counts 10
// collectives, not 10 + the 7 fed in between).
TEST_F(CopyInPiecesTest, CollectivesBetweenPiecesCountInTheNextWindow) {
  Recreate(/*chunk=*/4);
  SimJob job(0xA1, 8, 2);
  job.Register(engine_.get());
  auto straggler = [&](uint64_t seq) {
    std::vector<uint64_t> d = JitteredDurations(8, 1'400'000, seq);
    d[5] = 1'000'000;
    return d;
  };
  RunWindows(job, 3, 10, [&](uint64_t seq) {
    return JitteredDurations(8, 1'000'000, seq);
  });
  RunWindows(job, 2, 10, straggler);
  for (int i = 0; i < 10; ++i, ++seq_) {
    job.Feed(engine_.get(), seq_, straggler(seq_));
  }
  // RunWindows' cycles have no between_comms, so they copy in one piece.
  EXPECT_EQ(engine_->stats().copies_in_pieces, 0u);
  SplitCycle(absl::Seconds(1), [&](int call) {
    if (call != 2) return;
    for (int i = 0; i < 7; ++i, ++seq_) {
      job.Feed(engine_.get(), seq_, straggler(seq_));
    }
  });
  EXPECT_EQ(engine_->stats().copies_in_pieces, 1u);
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_EQ(Latest()[0].evidence(0).values().at("collectives"), 10);
  EXPECT_EQ(Latest()[0].windows_hit(), 3u);
}

}  // namespace
}  // namespace pitstop::controller::testing
