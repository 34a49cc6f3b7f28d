// Faults made for real on a running process, from outside it (the torch
// scenarios, torch_scenario.h).
//
// Why a SIGSTOP/SIGCONT duty cycle for a slow rank: the job's ranks share a
// few cores, so a CPU hog would slow every rank, not one; and cgroup CPU
// bandwidth control (cpu.max / cfs_quota_us), which throttles exactly one
// process, needs a writable cgroup hierarchy that containers and CI runners
// rarely delegate. What the kernel does to a throttled cgroup is the same
// thing: its tasks are taken off the CPU for the rest of each period once
// the quota is spent. A duty cycle of `stop` in every `period` gives the
// process (every thread of it) at most period - stop of each period, on
// any machine, with no privileges beyond owning the process. To make a
// straggler the share left must be below what the process gets anyway:
// on an oversubscribed machine that is already a fraction of a core.
//
// Thread safety: a DutyCycle is owned by one thread; its signalling thread
// is internal.
#ifndef PITSTOP_SRC_SIM_TORCH_FAULTS_H_
#define PITSTOP_SRC_SIM_TORCH_FAULTS_H_

#include <sys/types.h>

#include <atomic>
#include <thread>

#include "absl/time/time.h"

namespace pitstop::sim {

class DutyCycle {
 public:
  // Starts throttling `pid` at once: SIGSTOP, `stop` later SIGCONT, and
  // again every `period` (absolute deadlines on CLOCK_MONOTONIC, so the
  // duty does not drift).
  DutyCycle(pid_t pid, absl::Duration stop, absl::Duration period);
  // Stop().
  ~DutyCycle();
  DutyCycle(const DutyCycle&) = delete;
  DutyCycle& operator=(const DutyCycle&) = delete;

  // Ends the cycle with the process running (SIGCONT). Idempotent.
  void Stop();
  // Cycles done so far.
  int cycles() const { return cycles_.load(); }

 private:
  void Loop();

  const pid_t pid_;
  const int64_t stop_ns_;
  const int64_t period_ns_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> cycles_{0};
  std::thread thread_;
};

}  // namespace pitstop::sim

#endif  // PITSTOP_SRC_SIM_TORCH_FAULTS_H_
