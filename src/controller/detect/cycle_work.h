// The work of one detection cycle between EngineImpl::BeginCycle and
// FinishCycle (detection_engine.h): per communicator to judge, a copy of
// what the detectors read and, after Detect(), their verdicts. Internal to
// pitstop_detect.
#ifndef PITSTOP_CONTROLLER_DETECT_CYCLE_WORK_H_
#define PITSTOP_CONTROLLER_DETECT_CYCLE_WORK_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "absl/time/time.h"
#include "src/controller/detect/comm_slow_detector.h"
#include "src/controller/detect/comm_state.h"
#include "src/controller/detect/detection_engine.h"
#include "src/controller/detect/hang_detector.h"
#include "src/controller/detect/straggler_detector.h"

namespace pitstop::controller {

// One communicator of a cycle.
struct CommWork {
  uint64_t comm_hash = 0;
  uint64_t generation = 0;  // CommState::generation when copied
  v1::JobPolicy policy;
  int64_t now_ns = 0;   // engine clock when copied
  double now_unix = 0;  // unix ns when copied (hang start evidence)
  bool window = false;  // a window closed with >= 2 collectives: judge it
  bool hangs = false;   // the comm has progress or a dead member
  // The communicator without its open joins; `window` holds the closed
  // window when `window` is set, else is empty.
  CommState copy;
  // Detect()'s verdicts.
  StragglerVerdict straggler;
  CommSlowVerdict slow;
  std::vector<HangClear> clears;
  std::vector<HangVerdict> hang_verdicts;
};

// Runs DetectHangs on `c` and records when each hang started (evidence
// value kHangStartedKey, from `now_unix`), so the age survives a restart.
void JudgeHangs(CommState* c, const v1::JobPolicy& policy, int64_t now_ns,
                double now_unix, std::vector<HangClear>* clears,
                std::vector<HangVerdict>* out);

class EngineCycleWork final : public CycleWork {
 public:
  void Detect() override;

  absl::Time started;
  std::function<void()> hook;  // Options::detect_hook
  // A deque: growing it never copies the copies (CommWork's move is not
  // noexcept, so a vector would copy every CommState when it grows).
  std::deque<CommWork> comms;
  bool detected = false;
};

}  // namespace pitstop::controller

#endif  // PITSTOP_CONTROLLER_DETECT_CYCLE_WORK_H_
