#include "src/sim/torch_faults.h"

#include <signal.h>
#include <time.h>

#include <cerrno>

namespace pitstop::sim {
namespace {

constexpr int64_t kNsPerS = 1'000'000'000;

timespec ToTimespec(int64_t ns) {
  return {static_cast<time_t>(ns / kNsPerS), static_cast<long>(ns % kNsPerS)};
}

int64_t MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * kNsPerS + ts.tv_nsec;
}

void SleepUntil(int64_t ns) {
  const timespec t = ToTimespec(ns);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, nullptr) ==
         EINTR) {
  }
}

}  // namespace

DutyCycle::DutyCycle(pid_t pid, absl::Duration stop, absl::Duration period)
    : pid_(pid),
      stop_ns_(absl::ToInt64Nanoseconds(stop)),
      period_ns_(absl::ToInt64Nanoseconds(period)) {
  thread_ = std::thread([this] { Loop(); });
}

DutyCycle::~DutyCycle() { Stop(); }

void DutyCycle::Stop() {
  if (stopping_.exchange(true)) return;
  thread_.join();
  kill(pid_, SIGCONT);
}

void DutyCycle::Loop() {
  int64_t cycle_start = MonoNs();
  while (!stopping_.load()) {
    if (kill(pid_, SIGSTOP) != 0) return;  // the process is gone
    SleepUntil(cycle_start + stop_ns_);
    kill(pid_, SIGCONT);
    cycles_.fetch_add(1);
    cycle_start += period_ns_;
    SleepUntil(cycle_start);
  }
}

}  // namespace pitstop::sim
