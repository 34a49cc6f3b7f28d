// Progress of a long run, for a person watching stderr: nothing while the
// run is quick, then a line now and then (`pitstop plan` reports its ECMP
// seeds with it: at 8,192 GPUs they take a minute and more).
#ifndef PITSTOP_SRC_C4P_PROGRESS_H_
#define PITSTOP_SRC_C4P_PROGRESS_H_

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "pitstop/clock.h"

namespace pitstop::c4p {

// Thread-compatible. Prints nothing until `quiet` has passed since it was
// made; then a line at the first Update, at most one per `every` after
// that, the first step of each new task (`what` other than the last
// line's: a reader sees the phase change) and the last step of a task once
// anything was printed (so a reader sees it end).
class ProgressLine {
 public:
  ProgressLine(const Clock* clock, std::ostream* out,
               absl::Duration quiet = absl::Seconds(2),
               absl::Duration every = absl::Seconds(5));

  // `done` of `total` steps of `what` are done:
  // "<what>: <done>/<total> (<seconds> s)".
  void Update(absl::string_view what, int done, int total);

 private:
  const Clock* clock_;
  std::ostream* out_;
  int64_t start_ns_;
  int64_t quiet_ns_;
  int64_t every_ns_;
  int64_t last_ns_ = -1;   // when it last printed; -1: never
  std::string last_what_;  // the task of the last line printed
};

}  // namespace pitstop::c4p

#endif  // PITSTOP_SRC_C4P_PROGRESS_H_
