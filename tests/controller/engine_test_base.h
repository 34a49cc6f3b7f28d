// Fixture shared by the detection engine tests: a FakeClock, an engine with
// default policy, and a driver that feeds collectives window by window.
#ifndef PITSTOP_TESTS_CONTROLLER_ENGINE_TEST_BASE_H_
#define PITSTOP_TESTS_CONTROLLER_ENGINE_TEST_BASE_H_

#include <functional>
#include <memory>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "pitstop/clock.h"
#include "src/controller/detect/detection_engine.h"
#include "tests/controller/sim_job.h"

namespace pitstop::controller::testing {

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto engine = DetectionEngine::Create(&clock_, {});
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
  }

  // Advances the clock by `d`, runs a cycle and keeps what it returned.
  CycleResult Cycle(absl::Duration d) {
    clock_.Advance(d);
    CycleResult r = engine_->RunCycle();
    for (const v1::Fault& f : r.faults) faults_.push_back(f);
    for (const ProfilingRequest& p : r.profiling) profiling_.push_back(p);
    return r;
  }

  // `windows` windows of 1 s, each with `per_window` collectives whose
  // durations come from `durations(seq)`.
  void RunWindows(
      const SimJob& job, int windows, int per_window,
      const std::function<std::vector<uint64_t>(uint64_t)>& durations) {
    for (int w = 0; w < windows; ++w) {
      for (int i = 0; i < per_window; ++i, ++seq_) {
        job.Feed(engine_.get(), seq_, durations(seq_));
      }
      Cycle(absl::Milliseconds(1000));
    }
  }

  // Latest version of each fault id.
  std::vector<v1::Fault> Latest() const {
    std::vector<v1::Fault> out;
    std::set<std::string> seen;
    for (auto it = faults_.rbegin(); it != faults_.rend(); ++it) {
      if (seen.insert(it->fault_id()).second) out.push_back(*it);
    }
    return out;
  }

  static std::set<int32_t> SuspectGlobals(const v1::Fault& f) {
    std::set<int32_t> s;
    for (const v1::Suspect& x : f.suspects()) s.insert(x.global_rank());
    return s;
  }
  static std::set<int32_t> VictimGlobals(const v1::Fault& f) {
    std::set<int32_t> s;
    for (const v1::Suspect& x : f.victims()) s.insert(x.global_rank());
    return s;
  }

  FakeClock clock_;
  std::unique_ptr<DetectionEngine> engine_;
  std::vector<v1::Fault> faults_;
  std::vector<ProfilingRequest> profiling_;
  uint64_t seq_ = 1;
};

}  // namespace pitstop::controller::testing

#endif  // PITSTOP_TESTS_CONTROLLER_ENGINE_TEST_BASE_H_
