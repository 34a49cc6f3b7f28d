// Ctrl-C (SIGINT) or a stop (SIGTERM: `kill`, a job scheduler, a
// container runtime) during `pitstop sim`. Both are handled alike; the
// text below says SIGINT for either.
//
// SIGINT only sets a flag (a second SIGINT kills the tool at once: the
// handler is one-shot, and every process the run started dies with it,
// PR_SET_PDEATHSIG). An InterruptGuard watches the flag while a run is in
// progress: once SIGINT came, it stops this process's child processes
// (the controller, agents and training processes), so that the run's waits
// end within a second and the command reports the interruption (exit 130)
// instead of judging a run it cut short. Once the run reached its report
// (Disarm), SIGINT only ends --keep-running's wait.
//
// Stopping the children is how the tool ends the runs' waits from outside;
// the migration runs are also told (MigrationScenarioOptions::cancelled),
// so they judge nothing and leave no work dir behind.
#ifndef PITSTOP_TOOLS_PITSTOP_SIM_INTERRUPT_H_
#define PITSTOP_TOOLS_PITSTOP_SIM_INTERRUPT_H_

#include <atomic>
#include <thread>

namespace pitstop::tool {

// The shell's codes for "ended by SIGINT" (128 + 2) and SIGTERM (128 + 15).
inline constexpr int kInterruptedExitCode = 130;
inline constexpr int kTerminatedExitCode = 143;

// Installs the one-shot SIGINT and SIGTERM handlers; idempotent until one
// came.
void InstallInterruptHandler();
// SIGINT or SIGTERM came since the handler was installed.
// Async-signal-safe.
bool Interrupted();
// Prints "pitstop sim: interrupted (SIGINT): the cluster was stopped" (or
// SIGTERM, whichever came first) to stderr and returns the shell's code
// for it.
int ReportInterrupted();

// Thread safety: Disarm() and RunInterrupted() from the run's thread (its
// callbacks included); the watcher thread is internal. The destructor joins.
class InterruptGuard {
 public:
  // Installs the handler and starts watching.
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

  // The run reached its report: from now on SIGINT stops no child. True
  // when SIGINT had not come before (the first call decides; later calls
  // return the same).
  bool Disarm();
  // SIGINT came before Disarm: the run was cut short (its progress lines
  // and verdict mean nothing).
  bool RunInterrupted() const;

 private:
  void Watch();

  std::atomic<bool> armed_{true};
  std::atomic<bool> interrupted_before_disarm_{false};
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace pitstop::tool

#endif  // PITSTOP_TOOLS_PITSTOP_SIM_INTERRUPT_H_
