#include "src/torch_backend/nccl_worker.h"

#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace pitstop::torch_backend {

struct NcclWorker::State {
  explicit State(Options o) : options(std::move(o)) {}

  const Options options;
  mutable Mutex mu;
  CondVar cv;  // any change below; waiters re-check their condition
  std::deque<Task> queue ABSL_GUARDED_BY(mu);
  absl::Status error ABSL_GUARDED_BY(mu);
  bool stop ABSL_GUARDED_BY(mu) = false;  // no more tasks will come
  bool worker_exited ABSL_GUARDED_BY(mu) = false;
  bool watchdog_stop ABSL_GUARDED_BY(mu) = false;
  bool on_error_called ABSL_GUARDED_BY(mu) = false;
  // The running task: its name, deadline (options.clock monotonic ns) and
  // completion. `running_done` is taken by whoever completes the task: the
  // worker when `run` returns, or the watchdog at the deadline.
  bool running ABSL_GUARDED_BY(mu) = false;
  bool running_timed_out ABSL_GUARDED_BY(mu) = false;
  std::string running_what ABSL_GUARDED_BY(mu);
  absl::Duration running_timeout ABSL_GUARDED_BY(mu);
  int64_t deadline_ns ABSL_GUARDED_BY(mu) = 0;
  std::function<void(const absl::Status&)> running_done ABSL_GUARDED_BY(mu);
};

namespace {

// What a task queued behind a failure gets.
absl::Status Rejection(const absl::Status& cause) {
  return absl::Status(cause.code(),
                      absl::StrCat("not run: the process group is in error "
                                   "since an earlier operation failed: ",
                                   cause.message()));
}

int64_t DeadlineNs(Clock* clock, absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) {
    return std::numeric_limits<int64_t>::max();
  }
  return clock->MonotonicNanos() + absl::ToInt64Nanoseconds(timeout);
}

void FailAll(std::deque<NcclWorker::Task>& tasks, const absl::Status& cause) {
  const absl::Status rejected = Rejection(cause);
  for (NcclWorker::Task& t : tasks) {
    if (t.done) t.done(rejected);
  }
  tasks.clear();
}

}  // namespace

NcclWorker::NcclWorker(Options options)
    : state_(std::make_shared<State>(std::move(options))) {
  worker_ = std::thread(&NcclWorker::WorkerLoop, state_);
  watchdog_ = std::thread(&NcclWorker::WatchdogLoop, state_);
}

NcclWorker::~NcclWorker() {
  if (std::this_thread::get_id() == worker_.get_id()) {
    // Destroyed by a completion callback running on the worker itself: it
    // cannot wait for itself. It runs what is queued and ends on its own.
    {
      MutexLock lock(&state_->mu);
      state_->stop = true;
      state_->watchdog_stop = true;
      state_->cv.SignalAll();
    }
    watchdog_.join();
    worker_.detach();
    return;
  }
  bool exited = false;
  {
    MutexLock lock(&state_->mu);
    state_->stop = true;
    state_->cv.SignalAll();
    // Drain: the watchdog still bounds every task. Only a call that has
    // already timed out is given up on, after a grace period.
    while (!state_->worker_exited && !state_->running_timed_out) {
      state_->cv.Wait(&state_->mu);
    }
    const absl::Time give_up = absl::Now() + state_->options.stuck_grace;
    while (!state_->worker_exited && absl::Now() < give_up) {
      state_->cv.WaitWithTimeout(&state_->mu, give_up - absl::Now());
    }
    exited = state_->worker_exited;
    state_->watchdog_stop = true;
    state_->cv.SignalAll();
  }
  watchdog_.join();
  if (exited) {
    worker_.join();
  } else {
    // Still inside an NCCL call that timed out: it owns its buffers and
    // the shared state, so it may finish (or not) on its own.
    worker_.detach();
  }
}

void NcclWorker::Submit(Task task) {
  absl::Status rejected;
  {
    MutexLock lock(&state_->mu);
    if (state_->error.ok()) {
      state_->queue.push_back(std::move(task));
      state_->cv.SignalAll();
      return;
    }
    rejected = Rejection(state_->error);
  }
  if (task.done) task.done(rejected);
}

absl::Status NcclWorker::error() const {
  MutexLock lock(&state_->mu);
  return state_->error;
}

bool NcclWorker::running() const {
  MutexLock lock(&state_->mu);
  return state_->running;
}

void NcclWorker::WorkerLoop(const std::shared_ptr<State>& s) {
  for (;;) {
    Task task;
    {
      MutexLock lock(&s->mu);
      while (s->queue.empty() && !s->stop) s->cv.Wait(&s->mu);
      if (s->queue.empty()) {
        s->worker_exited = true;
        s->cv.SignalAll();
        return;
      }
      task = std::move(s->queue.front());
      s->queue.pop_front();
      s->running = true;
      s->running_timed_out = false;
      s->running_what = task.what;
      s->running_timeout = task.timeout;
      s->deadline_ns = DeadlineNs(s->options.clock, task.timeout);
      s->running_done = std::move(task.done);
      s->cv.SignalAll();  // the watchdog has a deadline to watch
    }
    const absl::Status status = task.run();
    std::function<void(const absl::Status&)> done;
    std::deque<Task> behind;
    absl::Status cause;
    bool call_on_error = false;
    {
      MutexLock lock(&s->mu);
      done = std::move(s->running_done);
      s->running_done = nullptr;
      s->running = false;
      s->running_timed_out = false;
      if (!status.ok() && s->error.ok()) {
        s->error = status;
        behind.swap(s->queue);
      }
      cause = s->error;
      if (!s->error.ok() && !s->on_error_called) {
        s->on_error_called = true;
        call_on_error = true;
      }
      s->cv.SignalAll();
    }
    if (done) done(status);
    FailAll(behind, cause);
    if (call_on_error && s->options.on_error) s->options.on_error();
    // The task's buffers are released here, after its completion.
  }
}

void NcclWorker::WatchdogLoop(const std::shared_ptr<State>& s) {
  for (;;) {
    std::function<void(const absl::Status&)> done;
    std::deque<Task> behind;
    absl::Status timeout;
    {
      MutexLock lock(&s->mu);
      if (s->watchdog_stop) return;
      const bool expired = s->running && s->running_done != nullptr &&
                           s->options.clock->MonotonicNanos() >= s->deadline_ns;
      if (!expired) {
        s->cv.WaitWithTimeout(&s->mu, s->options.watchdog_period);
        continue;
      }
      timeout = absl::DeadlineExceededError(absl::StrCat(
          s->running_what, " did not finish within ",
          absl::FormatDuration(s->running_timeout),
          " (the process group's timeout): a peer died, hangs or issued a "
          "different collective"));
      done = std::move(s->running_done);
      s->running_done = nullptr;
      s->running_timed_out = true;
      if (s->error.ok()) s->error = timeout;
      behind.swap(s->queue);
      s->cv.SignalAll();
    }
    done(timeout);
    FailAll(behind, timeout);
  }
}

}  // namespace pitstop::torch_backend
