// TrainerProfileService on a FakeClock: which faults get a capture, the
// requests to the suspect's and a healthy peer's agents, answers accepted
// only from where they were sent, the diff computed by hand, a trainer
// that never answers, a capture that fails, one capture per fault and per
// job; StoreTrainerProfile keeps the profile across the detection engine's
// updates of the fault; and the Controller sending the requests to the
// agents and storing the diff on the fault.
#include "src/controller/profiling/trainer_profiles.h"

#include <cstdio>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pitstop/clock.h"
#include "src/controller/controller.h"
#include "src/controller/store/fault_store.h"

namespace pitstop::controller {
namespace {

using ::testing::HasSubstr;

v1::ReportStepsRequest Report(const std::string& job, int32_t rank) {
  v1::ReportStepsRequest r;
  r.mutable_trainer()->set_job_id(job);
  r.mutable_trainer()->set_global_rank(rank);
  r.mutable_trainer()->set_world_size(4);
  r.add_steps()->set_step(1);
  return r;
}

v1::Fault Straggler(const std::string& id, int32_t rank, bool confirmed) {
  v1::Fault f;
  f.set_fault_id(id);
  f.set_job_id("job");
  f.set_fault_class(v1::FAULT_CLASS_NON_COMM_SLOW);
  f.set_state(confirmed ? v1::FAULT_STATE_CONFIRMED
                        : v1::FAULT_STATE_SUSPECTED);
  if (confirmed) f.set_confirmed_unix_ns(1);
  v1::Suspect* s = f.add_suspects();
  s->set_level(v1::SUSPECT_LEVEL_GPU);
  s->set_global_rank(rank);
  s->set_host("node" + std::to_string(rank / 2));
  return f;
}

// (name, calls, self ms, total ms) over the capture.
using Op = std::tuple<std::string, int, double, double>;

v1::ProfileResult Result(uint64_t id, uint32_t steps, double wall_ms,
                         const std::vector<Op>& ops) {
  v1::ProfileResult r;
  r.set_request_id(id);
  r.set_steps(steps);
  r.set_wall_ns(static_cast<uint64_t>(wall_ms * 1e6));
  for (const auto& [name, calls, self_ms, total_ms] : ops) {
    v1::ProfileOpStat* o = r.add_ops();
    o->set_name(name);
    o->set_calls(calls);
    o->set_self_cpu_ns(static_cast<uint64_t>(self_ms * 1e6));
    o->set_total_cpu_ns(static_cast<uint64_t>(total_ms * 1e6));
  }
  return r;
}

class TrainerProfilesTest : public ::testing::Test {
 protected:
  TrainerProfilesTest() : service_(Options(&clock_)) {}

  static TrainerProfileService::Options Options(Clock* clock) {
    TrainerProfileService::Options o;
    o.clock = clock;
    o.steps = 4;
    o.capture_timeout = absl::Seconds(10);
    o.answer_slack = absl::Seconds(5);
    return o;
  }

  // Every rank of a 4-rank job on node0 (ranks 0, 1) and node1 (2, 3)
  // reports a step.
  void Reports() {
    for (int r = 0; r < 4; ++r) {
      ASSERT_TRUE(
          service_.OnReport("node" + std::to_string(r / 2), Report("job", r))
              .ok());
    }
  }

  absl::Status Answer(const std::string& host, int32_t rank,
                      const v1::ProfileResult& result) {
    v1::ReportStepsRequest r = Report("job", rank);
    *r.add_profiles() = result;
    return service_.OnReport(host, r);
  }

  FakeClock clock_;
  TrainerProfileService service_;
};

TEST_F(TrainerProfilesTest, ConfirmedStragglerGetsTheDiffOfBothCaptures) {
  Reports();
  // Not confirmed yet, another class, or no rank: nothing asked.
  v1::Fault hang = Straggler("F1", 3, true);
  hang.set_fault_class(v1::FAULT_CLASS_NON_COMM_HANG);
  v1::Fault no_rank = Straggler("F2", 3, true);
  no_rank.mutable_suspects(0)->set_global_rank(-1);
  TrainerProfileService::CycleOut out =
      service_.RunCycle({Straggler("F3", 3, false), hang, no_rank});
  EXPECT_TRUE(out.requests.empty());
  EXPECT_TRUE(out.profiles.empty());

  out = service_.RunCycle({Straggler("F3", 3, true)});
  // The suspect (rank 3, node1) and a peer on another host (rank 0).
  ASSERT_EQ(out.requests.size(), 2u);
  const v1::ProfileRequest s = out.requests[0].request;
  const v1::ProfileRequest p = out.requests[1].request;
  EXPECT_EQ(out.requests[0].host, "node1");
  EXPECT_EQ(s.global_rank(), 3);
  EXPECT_EQ(out.requests[1].host, "node0");
  EXPECT_EQ(p.global_rank(), 0);
  EXPECT_EQ(s.job_id(), "job");
  EXPECT_EQ(s.steps(), 4u);
  EXPECT_EQ(s.max_duration_ms(), 10000u);
  EXPECT_NE(s.request_id(), p.request_id());
  EXPECT_THAT(s.reason(), HasSubstr("fault F3"));
  ASSERT_EQ(out.profiles.size(), 1u);
  EXPECT_EQ(out.profiles[0].fault_id, "F3");
  EXPECT_EQ(out.profiles[0].profile.state(),
            v1::TRAINER_PROFILE_STATE_REQUESTED);
  EXPECT_THAT(out.profiles[0].profile.text(),
              HasSubstr("asked of rank 3 (node1, suspect) and rank 0"));
  // Asked once, however long the fault stays open.
  EXPECT_TRUE(service_.RunCycle({Straggler("F3", 3, true)}).requests.empty());

  // The suspect: 4 steps of 400 ms, 1200 ms in addmm; the peer: 4 steps of
  // 400 ms, 200 ms in addmm and 1000 ms waiting in the all-reduce.
  ASSERT_TRUE(Answer("node1", 3,
                     Result(s.request_id(), 4, 1600,
                            {{"aten::addmm", 48, 1200, 1300},
                             {"pitstop_nccl:allreduce", 4, 40, 40},
                             {"aten::add_", 40, 8, 8}}))
                  .ok());
  EXPECT_TRUE(service_.RunCycle({Straggler("F3", 3, true)}).profiles.empty());
  ASSERT_TRUE(Answer("node0", 0,
                     Result(p.request_id(), 4, 1600,
                            {{"aten::addmm", 48, 200, 260},
                             {"pitstop_nccl:allreduce", 4, 1000, 1000},
                             {"aten::add_", 40, 7, 7}}))
                  .ok());
  out = service_.RunCycle({Straggler("F3", 3, true)});
  ASSERT_EQ(out.profiles.size(), 1u);
  const v1::TrainerProfile& d = out.profiles[0].profile;
  EXPECT_EQ(d.state(), v1::TRAINER_PROFILE_STATE_DONE);
  EXPECT_EQ(d.steps(), 4u);
  EXPECT_DOUBLE_EQ(d.suspect_step_ms(), 400);
  ASSERT_EQ(d.ops_size(), 1);  // add_: 2 vs 1.75 ms/step, under 0.5 ms
  EXPECT_EQ(d.ops(0).name(), "aten::addmm");
  EXPECT_DOUBLE_EQ(d.ops(0).suspect_self_ms(), 300);
  EXPECT_DOUBLE_EQ(d.ops(0).peer_self_ms(), 50);
  EXPECT_DOUBLE_EQ(d.ops(0).suspect_total_ms(), 325);
  EXPECT_DOUBLE_EQ(d.ops(0).suspect_calls(), 12);
  ASSERT_EQ(d.peer_ops_size(), 1);
  EXPECT_EQ(d.peer_ops(0).name(), "pitstop_nccl:allreduce");
  EXPECT_DOUBLE_EQ(d.peer_ops(0).peer_self_ms(), 250);
  EXPECT_DOUBLE_EQ(d.peer_ops(0).suspect_self_ms(), 10);
  EXPECT_THAT(d.text(), HasSubstr("rank 3 spends more in aten::addmm (300.0 "
                                  "vs 50.0 ms/step)"));
  EXPECT_THAT(d.text(), HasSubstr("rank 0 spends more in "
                                  "pitstop_nccl:allreduce (250.0 vs 10.0"));
  EXPECT_EQ(service_.stats().done, 1u);
  // Never again for this fault, even without its profile in the list.
  EXPECT_TRUE(service_.RunCycle({Straggler("F3", 3, true)}).requests.empty());
}

TEST_F(TrainerProfilesTest, AnswersCountOnlyFromWhereTheRequestWent) {
  Reports();
  TrainerProfileService::CycleOut out =
      service_.RunCycle({Straggler("F3", 3, true)});
  ASSERT_EQ(out.requests.size(), 2u);
  const uint64_t sid = out.requests[0].request.request_id();
  // Another host, another rank, an unknown id: dropped and counted.
  EXPECT_TRUE(Answer("node0", 3, Result(sid, 4, 100, {})).ok());
  EXPECT_TRUE(Answer("node1", 2, Result(sid, 4, 100, {})).ok());
  EXPECT_TRUE(Answer("node1", 3, Result(sid + 100, 4, 100, {})).ok());
  EXPECT_EQ(service_.stats().answers_refused, 3u);
  // Bad answers are named.
  v1::ProfileResult bad = Result(sid, 100, 100, {});
  EXPECT_THAT(std::string(Answer("node1", 3, bad).message()),
              HasSubstr("profiles[0].steps"));
  bad = Result(sid, 4, 100, {{"", 1, 1, 1}});
  EXPECT_THAT(std::string(Answer("node1", 3, bad).message()),
              HasSubstr("profiles[0].ops[0].name"));
  // The right one is taken once.
  EXPECT_TRUE(Answer("node1", 3, Result(sid, 4, 100, {})).ok());
  EXPECT_TRUE(Answer("node1", 3, Result(sid, 4, 100, {})).ok());
  EXPECT_EQ(service_.stats().answers_refused, 4u);
}

TEST_F(TrainerProfilesTest, TrainerThatNeverAnswersLeavesTheFaultWithoutDiff) {
  Reports();
  TrainerProfileService::CycleOut out =
      service_.RunCycle({Straggler("F3", 3, true)});
  ASSERT_EQ(out.requests.size(), 2u);
  ASSERT_TRUE(Answer("node0", 0,
                     Result(out.requests[1].request.request_id(), 4, 100,
                            {{"aten::mm", 4, 10, 10}}))
                  .ok());
  clock_.Advance(absl::Seconds(14));
  EXPECT_TRUE(service_.RunCycle({}).profiles.empty());
  clock_.Advance(absl::Seconds(1));
  out = service_.RunCycle({});
  ASSERT_EQ(out.profiles.size(), 1u);
  const v1::TrainerProfile& p = out.profiles[0].profile;
  EXPECT_EQ(p.state(), v1::TRAINER_PROFILE_STATE_NO_ANSWER);
  EXPECT_EQ(p.ops_size(), 0);
  EXPECT_EQ(p.text(),
            "no torch.profiler diff: rank 3's trainer (node1) did not answer "
            "within 15s");
  EXPECT_EQ(service_.stats().no_answer, 1u);
  // The job is free for its next fault; this one is not asked again.
  Reports();
  EXPECT_TRUE(service_.RunCycle({Straggler("F3", 3, true)}).requests.empty());
  EXPECT_EQ(service_.RunCycle({Straggler("F4", 2, true)}).requests.size(), 2u);
}

TEST_F(TrainerProfilesTest, CaptureThatFailsSaysWhy) {
  Reports();
  TrainerProfileService::CycleOut out =
      service_.RunCycle({Straggler("F3", 3, true)});
  ASSERT_EQ(out.requests.size(), 2u);
  v1::ProfileResult err =
      Result(out.requests[0].request.request_id(), 0, 0, {});
  err.set_error("torch.profiler did not start: RuntimeError('busy')");
  ASSERT_TRUE(Answer("node1", 3, err).ok());
  ASSERT_TRUE(Answer("node0", 0,
                     Result(out.requests[1].request.request_id(), 4, 100, {}))
                  .ok());
  out = service_.RunCycle({});
  ASSERT_EQ(out.profiles.size(), 1u);
  EXPECT_EQ(out.profiles[0].profile.state(), v1::TRAINER_PROFILE_STATE_FAILED);
  EXPECT_THAT(out.profiles[0].profile.text(),
              HasSubstr("rank 3's trainer (node1) could not capture: "
                        "torch.profiler did not start"));
}

TEST_F(TrainerProfilesTest, OneCapturePerJobAndOnlyWithTrainers) {
  // No trainer reports: a job without the trainer library is left alone.
  EXPECT_TRUE(service_.RunCycle({Straggler("F3", 3, true)}).requests.empty());
  // Only the suspect reports: no peer to compare with.
  ASSERT_TRUE(service_.OnReport("node1", Report("job", 3)).ok());
  EXPECT_TRUE(service_.RunCycle({Straggler("F3", 3, true)}).requests.empty());
  Reports();
  // Two faults of one job: one capture at a time.
  TrainerProfileService::CycleOut out =
      service_.RunCycle({Straggler("F3", 3, true), Straggler("F5", 1, true)});
  ASSERT_EQ(out.requests.size(), 2u);
  EXPECT_EQ(out.requests[0].request.global_rank(), 3);
  // A trainer gone quiet is no peer and no suspect.
  clock_.Advance(absl::Seconds(31));
  ASSERT_TRUE(service_.OnReport("node0", Report("job", 1)).ok());
  out = service_.RunCycle({Straggler("F5", 1, true)});
  EXPECT_TRUE(out.requests.empty());  // F3 still waits for its answers
  // A fault that already carries a profile (a restarted controller).
  v1::Fault done = Straggler("F6", 1, true);
  done.mutable_trainer_profile()->set_state(v1::TRAINER_PROFILE_STATE_DONE);
  TrainerProfileService off_service([this] {
    TrainerProfileService::Options o = Options(&clock_);
    o.steps = 0;
    return o;
  }());
  EXPECT_FALSE(off_service.enabled());
  ASSERT_TRUE(off_service.OnReport("node0", Report("job", 0)).ok());
  EXPECT_TRUE(
      off_service.RunCycle({Straggler("F3", 3, true)}).requests.empty());
  TrainerProfileService fresh(Options(&clock_));
  ASSERT_TRUE(fresh.OnReport("node0", Report("job", 1)).ok());
  ASSERT_TRUE(fresh.OnReport("node0", Report("job", 0)).ok());
  EXPECT_TRUE(fresh.RunCycle({done}).requests.empty());
}

TEST_F(TrainerProfilesTest, SuspectProfiledRecentlyIsNotAskedAgain) {
  Reports();
  ASSERT_EQ(service_.RunCycle({Straggler("F3", 3, true)}).requests.size(), 2u);
  // F3's capture ends (nobody answered); the straggler's fault resolves and
  // a new one names the same rank: its diff is not asked again so soon.
  clock_.Advance(absl::Seconds(16));
  Reports();
  TrainerProfileService::CycleOut out =
      service_.RunCycle({Straggler("F7", 3, true)});
  ASSERT_EQ(out.profiles.size(), 1u);
  EXPECT_EQ(out.profiles[0].fault_id, "F3");
  EXPECT_TRUE(out.requests.empty());
  // Another suspect of the job is profiled at once.
  out = service_.RunCycle({Straggler("F7", 3, true), Straggler("F8", 1, true)});
  ASSERT_EQ(out.requests.size(), 2u);
  EXPECT_EQ(out.requests[0].request.global_rank(), 1);
  // Past the interval, rank 3 is asked again in the cycle that ends F8's
  // expired capture.
  clock_.Advance(absl::Minutes(10));
  Reports();
  out = service_.RunCycle({Straggler("F7", 3, true)});
  ASSERT_EQ(out.profiles.size(), 2u);  // F8's NO_ANSWER, F7's REQUESTED
  ASSERT_EQ(out.requests.size(), 2u);
  EXPECT_EQ(out.requests[0].request.global_rank(), 3);
  EXPECT_EQ(service_.stats().requested, 3u);
}

// Issue #33 (round 20): the trainer table was cluster-wide. One host's
// agent reported made-up (job, rank) pairs, live (again within 30 s), until
// the table was full: every other host's trainers were refused and a slow
// rank of a real job got no profile. A host keeps at most its share.
TEST_F(TrainerProfilesTest, OneHostsMadeUpTrainersDoNotFillTheTable) {
  TrainerProfileService::Options o = Options(&clock_);
  o.max_trainers = 64;
  o.max_trainers_per_host = 16;
  TrainerProfileService service(o);
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(
        service.OnReport("evil", Report("flood-" + std::to_string(i), 0)).ok());
  }
  EXPECT_EQ(service.stats().trainers_refused_host, 84u);
  // The real job's trainers on two other hosts are noted and profiled.
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(
        service.OnReport("node" + std::to_string(r / 2), Report("job", r))
            .ok());
  }
  EXPECT_EQ(service.stats().trainers_refused, 0u);
  TrainerProfileService::CycleOut out =
      service.RunCycle({Straggler("F3", 3, true)});
  ASSERT_EQ(out.requests.size(), 2u);
  EXPECT_EQ(out.requests[0].host, "node1");
  // A host's quiet trainers give its share back.
  clock_.Advance(absl::Seconds(31));
  ASSERT_TRUE(service.OnReport("evil", Report("flood-new", 0)).ok());
  EXPECT_EQ(service.stats().trainers_refused_host, 84u);
  // Another host's live trainer is not taken over; once quiet, it is, and
  // it is charged to the taker's share.
  ASSERT_TRUE(service.OnReport("node0", Report("job", 0)).ok());
  ASSERT_TRUE(service.OnReport("evil", Report("job", 0)).ok());
  EXPECT_EQ(service.stats().trainers_refused_foreign, 1u);
  clock_.Advance(absl::Seconds(31));
  ASSERT_TRUE(service.OnReport("evil", Report("job", 0)).ok());
  EXPECT_EQ(service.stats().trainers_refused_foreign, 1u);
  for (int i = 0; i < 14; ++i) {
    ASSERT_TRUE(
        service.OnReport("evil", Report("flood-" + std::to_string(i), 0)).ok());
  }
  EXPECT_EQ(service.stats().trainers_refused_host, 84u);
  // Full: its quiet flood-new is forgotten for flood-extra, then nothing.
  ASSERT_TRUE(service.OnReport("evil", Report("flood-extra", 0)).ok());
  EXPECT_EQ(service.stats().trainers_refused_host, 84u);
  ASSERT_TRUE(service.OnReport("evil", Report("flood-extra2", 0)).ok());
  EXPECT_EQ(service.stats().trainers_refused_host, 85u);
}

TEST(TrainerProfileStoreTest, ProfileSurvivesTheEnginesUpdates) {
  absl::StatusOr<std::unique_ptr<FaultStore>> store =
      FaultStore::Open(":memory:");
  ASSERT_TRUE(store.ok());
  v1::Fault f = Straggler("F3", 3, true);
  bool ignored = false;
  ASSERT_TRUE((*store)->Upsert(f, &ignored).ok());
  v1::TrainerProfile p;
  p.set_state(v1::TRAINER_PROFILE_STATE_DONE);
  p.set_text("diff");
  absl::StatusOr<v1::Fault> s = StoreTrainerProfile(store->get(), "F3", p);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->trainer_profile().text(), "diff");
  // The engine's next update of the fault carries no profile: it stays.
  f.set_windows_hit(7);
  ASSERT_TRUE((*store)->Upsert(f, &ignored).ok());
  EXPECT_EQ((*store)->Get("F3")->trainer_profile().text(), "diff");
  EXPECT_EQ((*store)->Get("F3")->windows_hit(), 7u);
  EXPECT_TRUE(
      absl::IsNotFound(StoreTrainerProfile(store->get(), "F9", p).status()));
  // A resolved fault is left as it is.
  ASSERT_TRUE((*store)->Resolve("F3", "op", "", 5).ok());
  p.set_text("later");
  s = StoreTrainerProfile(store->get(), "F3", p);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->trainer_profile().text(), "diff");
}

// Controller: trainer reports through an agent batch, a confirmed
// straggler fault in the store -> trainer_profile commands to both agents;
// their answers -> the diff on the fault, watchers told.
class Sink : public CommandSink {
 public:
  void Send(const v1::ConnectResponse& r) override {
    for (const auto& c : r.commands()) commands.push_back(c);
  }
  std::vector<v1::AgentCommand> commands;
};

TEST(ControllerProfilesTest, CoreAsksBothAgentsAndStoresTheDiff) {
  // The confirmed straggler fault as the detection engine stored it (the
  // detection itself is tested elsewhere): a store the core then opens.
  const std::string db = ::testing::TempDir() + "/profiles_core_test.db";
  std::remove(db.c_str());
  {
    absl::StatusOr<std::unique_ptr<FaultStore>> store = FaultStore::Open(db);
    ASSERT_TRUE(store.ok()) << store.status();
    bool ignored = false;
    ASSERT_TRUE((*store)->Upsert(Straggler("F3", 3, true), &ignored).ok());
  }
  FakeClock clock;
  Controller::Options o;
  o.clock = &clock;
  o.db_path = db;
  o.profiles.steps = 3;
  absl::StatusOr<std::unique_ptr<Controller>> core = Controller::Create(o);
  ASSERT_TRUE(core.ok()) << core.status();
  Sink sinks[2];
  uint64_t sessions[2];
  for (int n = 0; n < 2; ++n) {
    v1::NodeRegistration reg;
    reg.set_host("node" + std::to_string(n));
    absl::StatusOr<uint64_t> s = (*core)->AgentConnected(reg, &sinks[n]);
    ASSERT_TRUE(s.ok()) << s.status();
    sessions[n] = *s;
  }
  auto batch = [&](int n, const std::vector<v1::ProfileResult>& answers) {
    v1::ConnectRequest b;
    for (int r = 2 * n; r < 2 * n + 2; ++r) {
      v1::ReportStepsRequest* rep = b.add_trainer_reports();
      *rep = Report("job", r);
      for (const v1::ProfileResult& a : answers) {
        if (a.first_step() == static_cast<uint64_t>(r))
          *rep->add_profiles() = a;
      }
    }
    return (*core)->AgentBatch(sessions[n], b);
  };
  ASSERT_TRUE(batch(0, {}).ok());
  ASSERT_TRUE(batch(1, {}).ok());
  std::vector<v1::WatchFaultsResponse> changes;
  (*core)->faults().Subscribe(
      "job", false,
      [&](const v1::WatchFaultsResponse& r) { changes.push_back(r); });
  (*core)->RunCycle();
  auto profile_requests = [](const Sink& s) {
    std::vector<v1::ProfileRequest> out;
    for (const v1::AgentCommand& c : s.commands) {
      if (c.has_trainer_profile()) out.push_back(c.trainer_profile());
    }
    return out;
  };
  std::vector<v1::ProfileRequest> to0 = profile_requests(sinks[0]);
  std::vector<v1::ProfileRequest> to1 = profile_requests(sinks[1]);
  ASSERT_EQ(to1.size(), 1u);  // the suspect, rank 3 on node1
  EXPECT_EQ(to1[0].global_rank(), 3);
  ASSERT_EQ(to0.size(), 1u);  // the peer on the other node
  EXPECT_EQ(to0[0].global_rank(), 0);
  EXPECT_EQ(to1[0].steps(), 3u);
  absl::StatusOr<v1::Fault> f = (*core)->faults().Fault("F3");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->trainer_profile().state(), v1::TRAINER_PROFILE_STATE_REQUESTED);
  ASSERT_FALSE(changes.empty());
  EXPECT_EQ(changes.back().change(), v1::WatchFaultsResponse::CHANGE_UPDATED);

  // The answers (first_step marks which rank's report carries each).
  v1::ProfileResult slow =
      Result(to1[0].request_id(), 3, 900, {{"aten::mm", 30, 600, 650}});
  slow.set_first_step(3);
  v1::ProfileResult fast = Result(
      to0[0].request_id(), 3, 900,
      {{"aten::mm", 30, 90, 100}, {"pitstop_nccl:allreduce", 3, 700, 700}});
  fast.set_first_step(0);
  ASSERT_TRUE(batch(1, {slow}).ok());
  ASSERT_TRUE(batch(0, {fast}).ok());
  (*core)->RunCycle();
  f = (*core)->faults().Fault("F3");
  ASSERT_TRUE(f.ok());
  const v1::TrainerProfile& p = f->trainer_profile();
  EXPECT_EQ(p.state(), v1::TRAINER_PROFILE_STATE_DONE) << p.text();
  ASSERT_EQ(p.ops_size(), 1);
  EXPECT_EQ(p.ops(0).name(), "aten::mm");
  EXPECT_DOUBLE_EQ(p.ops(0).suspect_self_ms(), 200);
  EXPECT_DOUBLE_EQ(p.ops(0).peer_self_ms(), 30);
  ASSERT_EQ(p.peer_ops_size(), 1);
  EXPECT_EQ(p.peer_ops(0).name(), "pitstop_nccl:allreduce");
  EXPECT_EQ(changes.back().fault().trainer_profile().state(),
            v1::TRAINER_PROFILE_STATE_DONE);
  std::remove(db.c_str());
}

}  // namespace
}  // namespace pitstop::controller
