// NcclWorker (src/torch_backend/nccl_worker.h): issue order, completion
// exactly once, the queue poisoned after a failure, the watchdog's timeout
// driven by a fake clock (the task's own call keeps blocking, as an NCCL
// call on a hung peer does), and shutdown that drains or leaves a stuck
// call behind.
#include "src/torch_backend/nccl_worker.h"

#include <atomic>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "pitstop/clock.h"
#include "pitstop/sync.h"

namespace pitstop::torch_backend {
namespace {

using Task = NcclWorker::Task;

// Outcomes of done(), in completion order.
struct Outcomes {
  Mutex mu;
  std::vector<std::pair<std::string, absl::Status>> done ABSL_GUARDED_BY(mu);
  std::vector<std::string> ran ABSL_GUARDED_BY(mu);

  Task Make(const std::string& name, absl::Status result = absl::OkStatus(),
            absl::Duration timeout = absl::InfiniteDuration()) {
    Task t;
    t.what = name;
    t.timeout = timeout;
    t.run = [this, name, result] {
      MutexLock lock(&mu);
      ran.push_back(name);
      return result;
    };
    t.done = [this, name](const absl::Status& st) {
      MutexLock lock(&mu);
      done.emplace_back(name, st);
    };
    return t;
  }
  size_t DoneCount() {
    MutexLock lock(&mu);
    return done.size();
  }
};

bool WaitFor(const std::function<bool()>& cond) {
  for (int i = 0; i < 2000; ++i) {  // 20 s: a loaded CI machine
    if (cond()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return cond();
}

TEST(NcclWorkerTest, RunsTasksInSubmitOrderAndCompletesEachOnce) {
  Outcomes o;
  {
    NcclWorker worker({});
    for (int i = 0; i < 50; ++i) worker.Submit(o.Make(std::to_string(i)));
  }  // the destructor drains the queue
  MutexLock lock(&o.mu);
  ASSERT_EQ(o.ran.size(), 50u);
  ASSERT_EQ(o.done.size(), 50u);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(o.ran[i], std::to_string(i));
    EXPECT_EQ(o.done[i].first, std::to_string(i));
    EXPECT_TRUE(o.done[i].second.ok()) << o.done[i].second;
  }
}

TEST(NcclWorkerTest, FirstFailurePoisonsTheQueueAndCallsOnErrorOnce) {
  Outcomes o;
  std::atomic<int> on_error{0};
  NcclWorker::Options options;
  options.on_error = [&] { on_error++; };
  NcclWorker worker(options);
  worker.Submit(o.Make("ok"));
  worker.Submit(o.Make("bad", absl::UnavailableError("ncclRemoteError: x")));
  worker.Submit(o.Make("behind"));
  ASSERT_TRUE(WaitFor([&] { return o.DoneCount() == 3; }));
  worker.Submit(o.Make("later"));  // rejected on this thread
  EXPECT_EQ(o.DoneCount(), 4u);
  EXPECT_EQ(worker.error().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(WaitFor([&] { return on_error.load() == 1; }));
  MutexLock lock(&o.mu);
  EXPECT_EQ(o.ran, (std::vector<std::string>{"ok", "bad"}));
  EXPECT_TRUE(o.done[0].second.ok());
  EXPECT_EQ(o.done[1].second.message(), "ncclRemoteError: x");
  for (int i : {2, 3}) {
    EXPECT_EQ(o.done[i].second.code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(o.done[i].second.message().find("not run"), std::string::npos)
        << o.done[i].second;
    EXPECT_NE(o.done[i].second.message().find("ncclRemoteError: x"),
              std::string::npos);
  }
}

// A task that blocks until released, like an NCCL call on a hung peer.
struct Blocker {
  absl::Notification started;
  absl::Notification release;
  Task Make(Outcomes& o, absl::Duration timeout) {
    Task t = o.Make("stuck", absl::OkStatus(), timeout);
    auto inner = t.run;
    t.run = [this, inner] {
      started.Notify();
      release.WaitForNotification();
      return inner();
    };
    return t;
  }
};

TEST(NcclWorkerTest, WatchdogFailsATaskPastItsDeadlineAndTheQueueBehindIt) {
  FakeClock clock;
  Outcomes o;
  Blocker blocker;
  std::atomic<int> on_error{0};
  NcclWorker::Options options;
  options.clock = &clock;
  options.on_error = [&] { on_error++; };
  {
    NcclWorker worker(options);
    worker.Submit(blocker.Make(o, absl::Seconds(10)));
    worker.Submit(o.Make("queued"));
    blocker.started.WaitForNotification();
    clock.Advance(absl::Seconds(9));
    absl::SleepFor(absl::Milliseconds(100));  // 5 watchdog periods
    EXPECT_EQ(o.DoneCount(), 0u) << "timed out before its deadline";
    clock.Advance(absl::Seconds(2));
    ASSERT_TRUE(WaitFor([&] { return o.DoneCount() == 2; }));
    {
      MutexLock lock(&o.mu);
      EXPECT_EQ(o.done[0].first, "stuck");
      EXPECT_EQ(o.done[0].second.code(), absl::StatusCode::kDeadlineExceeded);
      EXPECT_NE(o.done[0].second.message().find("stuck did not finish within "
                                                "10s"),
                std::string::npos)
          << o.done[0].second;
      EXPECT_EQ(o.done[1].first, "queued");
      EXPECT_NE(o.done[1].second.message().find("not run"), std::string::npos);
      EXPECT_TRUE(o.ran.empty());  // the stuck call has not returned
    }
    EXPECT_EQ(on_error.load(), 0) << "on_error while the call is in flight";
    blocker.release.Notify();  // the call returns late: no second done()
    ASSERT_TRUE(WaitFor([&] { return on_error.load() == 1; }));
  }
  EXPECT_EQ(o.DoneCount(), 2u);
  MutexLock lock(&o.mu);
  EXPECT_EQ(o.ran, std::vector<std::string>{"stuck"});
}

TEST(NcclWorkerTest, ShutdownLeavesACallThatTimedOutAndNeverReturns) {
  FakeClock clock;
  Outcomes o;
  // Owned by the detached worker thread from the destructor on: leaked on
  // purpose, as the process group leaves a hung NCCL call behind.
  auto* blocker = new Blocker;
  NcclWorker::Options options;
  options.clock = &clock;
  options.stuck_grace = absl::Milliseconds(50);
  {
    NcclWorker worker(options);
    worker.Submit(blocker->Make(o, absl::Seconds(1)));
    blocker->started.WaitForNotification();
    clock.Advance(absl::Seconds(2));
    ASSERT_TRUE(WaitFor([&] { return o.DoneCount() == 1; }));
  }  // returns although the call never does
  MutexLock lock(&o.mu);
  EXPECT_EQ(o.done[0].second.code(), absl::StatusCode::kDeadlineExceeded);
}

// The process group can be dropped by a completion callback (a future
// callback holding its last reference) on the worker thread itself.
TEST(NcclWorkerTest, DestroyedFromItsOwnCompletionCallback) {
  Outcomes o;
  Blocker blocker;
  auto worker = std::make_unique<NcclWorker>(NcclWorker::Options{});
  NcclWorker* raw = worker.get();
  raw->Submit(blocker.Make(o, absl::InfiniteDuration()));
  Task last_owner = o.Make("drops the worker");
  auto record = last_owner.done;
  last_owner.done = [&worker, record](const absl::Status& st) {
    record(st);
    worker.reset();  // on the worker thread
  };
  raw->Submit(std::move(last_owner));
  raw->Submit(o.Make("queued behind"));
  blocker.release.Notify();
  ASSERT_TRUE(WaitFor([&] { return o.DoneCount() == 3; }));
  MutexLock lock(&o.mu);
  EXPECT_EQ(o.ran, (std::vector<std::string>{"stuck", "drops the worker",
                                             "queued behind"}));
  for (const auto& [name, st] : o.done) EXPECT_TRUE(st.ok()) << name << st;
}

TEST(NcclWorkerTest, TasksWithoutTimeoutAreNeverTimedOut) {
  FakeClock clock;
  Outcomes o;
  Blocker blocker;
  NcclWorker::Options options;
  options.clock = &clock;
  NcclWorker worker(options);
  worker.Submit(blocker.Make(o, absl::InfiniteDuration()));
  blocker.started.WaitForNotification();
  clock.Advance(absl::Hours(1000));
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(o.DoneCount(), 0u);
  blocker.release.Notify();
  ASSERT_TRUE(WaitFor([&] { return o.DoneCount() == 1; }));
  MutexLock lock(&o.mu);
  EXPECT_TRUE(o.done[0].second.ok());
  EXPECT_TRUE(worker.error().ok());
}

}  // namespace
}  // namespace pitstop::torch_backend
