// The ordered queue of one process group's NCCL work and the thread that
// runs it: this backend's analogue of the CUDA stream ProcessGroupNCCL
// enqueues its kernels on.
//
// Why a worker thread and not the caller's: a c10d call returns a Work at
// once and the collective runs behind it, in issue order. DDP relies on
// that: its reducer all-reduces a gradient bucket from an autograd hook
// and goes on computing the next gradients while the bucket travels (on a
// GPU the NCCL kernel runs on its stream; here this thread runs the CPU
// backend's host collective). Run on the caller's thread, backward would
// stop at every bucket. `async_op=True`, isend/irecv and getFuture() get
// the same meaning as with NCCL.
//
// Order: tasks run one at a time in Submit order (NCCL needs every rank to
// issue the same collectives in the same order on a communicator).
//
// Failure: the first task that fails poisons the queue: later tasks fail
// with the same error without running (the communicator is aborted, as
// ProcessGroupNCCL does after an NCCL error). A watchdog thread enforces
// each task's timeout from the moment it starts: a task still running at
// its deadline fails with DeadlineExceeded (its `done` is called by the
// watchdog, the queue behind it fails too), so a caller never waits longer
// than the timeout even when the NCCL call under it does not return. The
// worker thread stays in that call until NCCL returns (the CPU backend
// returns at its own timeout, which the Python side sets to the process
// group's); the task's buffers stay alive until then because the task owns
// them.
//
// Threads: Submit and error() from any thread. `run` is called on the
// worker thread; `done` exactly once, on the worker thread or (timeout, or
// a task queued behind a failure) on the watchdog or submitting thread,
// never with the worker's lock held. `on_error` once, on the worker thread,
// after the failing task's `run` returned (the place to abort the
// communicator: no NCCL call is in flight then).
#ifndef PITSTOP_SRC_TORCH_BACKEND_NCCL_WORKER_H_
#define PITSTOP_SRC_TORCH_BACKEND_NCCL_WORKER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "pitstop/clock.h"
#include "pitstop/sync.h"

namespace pitstop::torch_backend {

class NcclWorker {
 public:
  struct Options {
    Clock* clock = Clock::Real();  // deadlines (tests inject a fake)
    // How often the watchdog looks at the running task's deadline (real
    // time); a timeout is declared at most this late.
    absl::Duration watchdog_period = absl::Milliseconds(20);
    // At destruction, how long to wait for a call that already timed out
    // to return before leaving it behind (its thread is detached).
    absl::Duration stuck_grace = absl::Seconds(2);
    // Called once on the worker thread when the queue becomes poisoned.
    std::function<void()> on_error;
  };

  struct Task {
    std::string what;  // "allreduce", for messages
    absl::Duration timeout = absl::InfiniteDuration();
    std::function<absl::Status()> run;
    std::function<void(const absl::Status&)> done;
  };

  explicit NcclWorker(Options options);
  // Runs what is queued (each task bounded by its timeout), then stops.
  // Called on the worker thread itself (a `done` that drops the owner),
  // it does not wait: the worker finishes the queue and ends on its own.
  ~NcclWorker();
  NcclWorker(const NcclWorker&) = delete;
  NcclWorker& operator=(const NcclWorker&) = delete;

  // Queues `task` behind the ones already submitted. A poisoned queue
  // fails it at once (its `done` runs on this thread).
  void Submit(Task task);

  // The error that poisoned the queue; ok while healthy.
  absl::Status error() const;
  // Whether a task's `run` is executing (also after its timeout was
  // declared, until the call under it returns).
  bool running() const;

 private:
  struct State;
  static void WorkerLoop(const std::shared_ptr<State>& state);
  static void WatchdogLoop(const std::shared_ptr<State>& state);

  // Shared with both threads, so a worker stuck in NCCL past shutdown can
  // be detached without dangling pointers.
  std::shared_ptr<State> state_;
  std::thread worker_;
  std::thread watchdog_;
};

}  // namespace pitstop::torch_backend

#endif  // PITSTOP_SRC_TORCH_BACKEND_NCCL_WORKER_H_
