// Issue #15: a detection cycle's detectors run on the engine's copy without
// the controller's lock (Controller::Options::detect_off_lock), so an
// agent batch is joined into detection state while a detector is in the
// middle of a cycle. The detectors are held here by the engine's
// detect_hook; with detect_off_lock false (round 6: detectors under the
// lock) the same batch is only queued until the detectors finish.
#include <future>
#include <memory>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "pitstop/sync.h"
#include "src/controller/controller.h"

namespace pitstop::controller {
namespace {

class NullSink : public CommandSink {
 public:
  void Send(const v1::ConnectResponse&) override {}
};

// Holds the detectors (the engine's detect_hook) until Release().
class DetectorGate {
 public:
  void Enter() {
    MutexLock l(&mu_);
    entered_ = true;
    cv_.SignalAll();
    while (!released_) cv_.Wait(&mu_);
  }
  // True once the detectors are held (waits up to 60 s: a loaded machine).
  bool WaitEntered() {
    MutexLock l(&mu_);
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (!entered_ && absl::Now() < deadline) {
      cv_.WaitWithTimeout(&mu_, absl::Milliseconds(100));
    }
    return entered_;
  }
  void Release() {
    MutexLock l(&mu_);
    released_ = true;
    cv_.SignalAll();
  }

 private:
  Mutex mu_;
  CondVar cv_;
  bool entered_ ABSL_GUARDED_BY(mu_) = false;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
};

// A batch of host n1: communicator `hash` of job `job` (2 ranks, rank 0)
// and rank 0's progress in it (so the hang detector judges a copy of it).
v1::ConnectRequest Batch(uint64_t hash, const std::string& job) {
  v1::ConnectRequest b;
  v1::CommunicatorInfo* info = b.add_communicators();
  info->set_comm_hash(hash);
  info->set_n_ranks(2);
  info->set_rank(0);
  info->set_job_id(job);
  info->set_host("n1");
  v1::RankProgress* p = b.add_progress();
  p->set_comm_hash(hash);
  p->set_rank(0);
  p->set_func(v1::COLL_FUNC_ALL_REDUCE);
  p->set_last_enqueued_seq(5);
  p->set_last_enqueue_cpu_ns(1);
  p->set_last_completed_seq(4);
  p->set_last_completion_cpu_ns(1);
  return b;
}

class DetectOffLockTest : public ::testing::TestWithParam<bool> {};

TEST_P(DetectOffLockTest, ABatchIsJoinedWhileTheDetectorsRun) {
  const bool off_lock = GetParam();
  DetectorGate gate;
  Controller::Options o;
  o.detect_off_lock = off_lock;
  o.engine.detect_hook = [&gate] { gate.Enter(); };
  auto core = Controller::Create(o);
  ASSERT_TRUE(core.ok()) << core.status();
  NullSink sink;
  v1::NodeRegistration reg;
  reg.set_host("n1");
  auto session = (*core)->AgentConnected(reg, &sink);
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*core)->AgentBatch(*session, Batch(0xabc, "j1")).ok());

  auto cycle = std::async(std::launch::async, [&] { (*core)->RunCycle(); });
  ASSERT_TRUE(gate.WaitEntered()) << "the cycle never reached its detectors";
  // The detectors are held mid-cycle. Nothing here depends on timing: off
  // the lock, the lock is free, so the batch is joined and its completion
  // runs before SubmitAgentBatch returns; under the lock the cycle holds it
  // until the detectors finish, so the batch can only be queued.
  const v1::ConnectRequest second = Batch(0xdef, "j2");
  std::promise<absl::Status> done;
  std::future<absl::Status> status = done.get_future();
  (*core)->SubmitAgentBatch(*session, &second,
                            [&done](absl::Status s) { done.set_value(s); });
  const bool joined_while_held =
      status.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  if (off_lock) {
    EXPECT_TRUE(joined_while_held)
        << "the batch waited for the detectors (they hold the lock)";
    // Its communicator is in detection state, and queries answer, while
    // the detectors are still held.
    EXPECT_EQ((*core)->ingest().Communicators("j2").size(), 1u);
  } else {
    EXPECT_FALSE(joined_while_held);
    EXPECT_EQ((*core)->ingest().inbox_stats().queued, 1u);
  }
  gate.Release();
  cycle.get();
  // Either way the batch is joined once the cycle is over.
  ASSERT_EQ(status.wait_for(std::chrono::seconds(60)),
            std::future_status::ready);
  EXPECT_TRUE(status.get().ok());
  EXPECT_EQ((*core)->ingest().Communicators("j2").size(), 1u);
  EXPECT_EQ((*core)->ingest().Communicators("j1").size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Modes, DetectOffLockTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return std::string(i.param
                                                  ? "DetectorsOffTheLock"
                                                  : "DetectorsUnderTheLock");
                         });

}  // namespace
}  // namespace pitstop::controller
