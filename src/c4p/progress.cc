#include "src/c4p/progress.h"

#include "absl/strings/str_format.h"

namespace pitstop::c4p {

ProgressLine::ProgressLine(const Clock* clock, std::ostream* out,
                           absl::Duration quiet, absl::Duration every)
    : clock_(clock),
      out_(out),
      start_ns_(clock->MonotonicNanos()),
      quiet_ns_(absl::ToInt64Nanoseconds(quiet)),
      every_ns_(absl::ToInt64Nanoseconds(every)) {}

void ProgressLine::Update(absl::string_view what, int done, int total) {
  const int64_t now = clock_->MonotonicNanos();
  if (now - start_ns_ < quiet_ns_) return;
  const bool due =
      last_ns_ < 0 || now - last_ns_ >= every_ns_ || what != last_what_;
  const bool ends = last_ns_ >= 0 && done == total;
  if (!due && !ends) return;
  last_ns_ = now;
  last_what_ = std::string(what);
  *out_ << absl::StrFormat("%s: %d/%d (%.0f s)\n", what, done, total,
                           (now - start_ns_) / 1e9)
        << std::flush;
}

}  // namespace pitstop::c4p
