// Hang detection (non-comm, comm) and process death on deterministic
// RankProgress inputs, Flight Recorder style (no kernel timers).
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/controller/engine_test_base.h"

namespace pitstop::controller::testing {
namespace {

class HangTest : public EngineTest {
 protected:
  void Report(const SimJob& job, int32_t rank, uint64_t enq, uint64_t done,
              std::vector<std::pair<int32_t, uint64_t>> in_flight = {}) {
    v1::RankProgress p = job.Progress(rank, enq, done);
    if (enq > done) {
      p.set_oldest_incomplete_seq(done + 1);
      p.set_oldest_incomplete_age_ns(1);
    }
    for (auto [peer, bytes] : in_flight) {
      v1::ConnectionSummary* c = p.add_in_flight();
      c->set_peer_rank(peer);
      c->set_is_send(true);
      c->set_bytes(bytes);
    }
    ASSERT_TRUE(engine_->AddProgress(job.HostOf(rank), p).ok());
  }
};

// The example: 16 ranks, ranks 12 and 14 never enqueued seq 10 that
// all the others enqueued.
TEST_F(HangTest, NonCommHangBlamesRanksThatNeverEnqueued) {
  SimJob job(0xC3, 16, 8);
  job.Register(engine_.get());
  for (int32_t r = 0; r < 16; ++r) {
    Report(job, r, (r == 12 || r == 14) ? 9 : 10, 9);
  }
  Cycle(absl::Seconds(4));
  EXPECT_TRUE(faults_.empty()) << "below the 5 s floor";

  Cycle(absl::Seconds(2));
  ASSERT_EQ(Latest().size(), 1u);
  v1::Fault f = Latest()[0];
  EXPECT_EQ(f.fault_class(), v1::FAULT_CLASS_NON_COMM_HANG);
  EXPECT_EQ(f.state(), v1::FAULT_STATE_SUSPECTED);
  EXPECT_EQ(f.seq_number(), 10u);
  EXPECT_EQ(f.comm_hash(), 0xC3u);
  EXPECT_EQ(SuspectGlobals(f), (std::set<int32_t>{12, 14}));
  for (const v1::Suspect& s : f.suspects()) {
    EXPECT_EQ(s.level(), v1::SUSPECT_LEVEL_RANK);
    EXPECT_EQ(s.host(), "node1");
  }
  std::set<int32_t> victims = VictimGlobals(f);
  EXPECT_EQ(victims.size(), 14u);
  EXPECT_FALSE(victims.count(12) || victims.count(14));
  EXPECT_EQ(f.evidence(0).values().at("last_enqueued_seq/rank12"), 9);

  Cycle(absl::Seconds(5));
  EXPECT_EQ(Latest()[0].state(), v1::FAULT_STATE_CONFIRMED);

  // Ranks 12 and 14 catch up and everyone completes: resolved.
  for (int32_t r = 0; r < 16; ++r) Report(job, r, 10, 10);
  Cycle(absl::Milliseconds(500));
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_EQ(Latest()[0].state(), v1::FAULT_STATE_RESOLVED);
}

// CONFIRMED comes at hang_confirm_multiplier timeouts: 1.5 by default
// (7.5 s at the 5 s floor, so a hang is confirmed within 10 s of starting
// once the agents' reporting delay is added), and what a job's policy says.
TEST_F(HangTest, ConfirmedAtThePolicysMultipleOfTheTimeout) {
  SimJob fast(0xD1, 4, 4, "fast");
  SimJob slow(0xD2, 4, 4, "slow");
  fast.Register(engine_.get());
  slow.Register(engine_.get());
  v1::JobPolicy twice;
  twice.set_hang_confirm_multiplier(2);
  ASSERT_TRUE(engine_->SetJobPolicy("slow", twice).ok());
  for (const SimJob* job : {&fast, &slow}) {
    for (int32_t r = 0; r < 4; ++r) Report(*job, r, r == 3 ? 9 : 10, 9);
  }
  auto state_of = [&](uint64_t comm) {
    for (const v1::Fault& f : Latest()) {
      if (f.comm_hash() == comm) return f.state();
    }
    return v1::FAULT_STATE_UNSPECIFIED;
  };
  Cycle(absl::Seconds(6));
  EXPECT_EQ(state_of(0xD1), v1::FAULT_STATE_SUSPECTED);
  EXPECT_EQ(state_of(0xD2), v1::FAULT_STATE_SUSPECTED);
  Cycle(absl::Seconds(2));  // stuck 8 s: past 1.5 x 5 s, short of 2 x 5 s
  EXPECT_EQ(state_of(0xD1), v1::FAULT_STATE_CONFIRMED);
  EXPECT_EQ(state_of(0xD2), v1::FAULT_STATE_SUSPECTED);
  Cycle(absl::Seconds(2));
  EXPECT_EQ(state_of(0xD2), v1::FAULT_STATE_CONFIRMED);
}

TEST_F(HangTest, AdaptiveTimeoutFollowsRecentDurations) {
  SimJob job(0xC4, 4, 4);
  job.Register(engine_.get());
  // Collectives of 2 s: the timeout is 10 x p99 = 20 s, not the 5 s floor.
  for (uint64_t seq = 1; seq <= 5; ++seq) {
    job.Feed(engine_.get(), seq, std::vector<uint64_t>(4, 2'000'000'000));
  }
  for (int32_t r = 0; r < 4; ++r) Report(job, r, r == 0 ? 5 : 6, 5);
  Cycle(absl::Seconds(15));
  EXPECT_TRUE(faults_.empty());
  Cycle(absl::Seconds(6));
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_EQ(SuspectGlobals(Latest()[0]), std::set<int32_t>{0});
}

TEST_F(HangTest, IdleCommunicatorIsNotAHang) {
  SimJob job(0xC5, 8, 8);
  job.Register(engine_.get());
  for (int32_t r = 0; r < 8; ++r) Report(job, r, 42, 42);
  for (int i = 0; i < 60; ++i) Cycle(absl::Seconds(1));
  EXPECT_TRUE(faults_.empty());
}

TEST_F(HangTest, RankWhoseCompletionsStoppedIsTheSuspect) {
  SimJob job(0xCA, 8, 4);
  job.Register(engine_.get());
  // Everyone enqueued up to 13; ranks 0..6 completed 12 (which needed rank
  // 7), rank 7's completions stopped at 9: its GPU stopped reporting.
  for (int32_t r = 0; r < 8; ++r) Report(job, r, 13, r == 7 ? 9 : 12);
  Cycle(absl::Seconds(6));
  ASSERT_EQ(Latest().size(), 1u);
  const v1::Fault f = Latest()[0];
  EXPECT_EQ(f.fault_class(), v1::FAULT_CLASS_NON_COMM_HANG);
  EXPECT_EQ(SuspectGlobals(f), std::set<int32_t>{7});
  EXPECT_EQ(f.suspects(0).level(), v1::SUSPECT_LEVEL_GPU);
  EXPECT_EQ(VictimGlobals(f).size(), 7u);
  EXPECT_FALSE(VictimGlobals(f).count(7));
}

TEST_F(HangTest, RanksWithoutAnyProgressReportAreNotBlamed) {
  SimJob job(0xC9, 8, 4);
  job.Register(engine_.get());
  // node1's agent (ranks 4..7) never connected; node0's ranks are healthy.
  for (int i = 0; i < 30; ++i) {
    for (int32_t r = 0; r < 4; ++r) Report(job, r, 10 + i, 10 + i);
    Cycle(absl::Seconds(1));
  }
  EXPECT_TRUE(faults_.empty()) << faults_[0].DebugString();
}

// NVIDIA/nccl#795's shape: one rank's telemetry never started (or, offline,
// it left no dump) while every other member waits in the same collective.
// It is the only explanation left: the suspect, as a process death.
TEST_F(HangTest, RankThatLeftNoDataWhileItsPeersWaitIsTheSuspect) {
  SimJob job(0xCA, 8, 4);
  job.Register(engine_.get());
  for (int32_t r = 0; r < 8; ++r) {
    if (r != 5) Report(job, r, 10, 9);
  }
  Cycle(absl::Seconds(6));
  ASSERT_EQ(Latest().size(), 1u);
  v1::Fault f = Latest()[0];
  EXPECT_EQ(f.fault_class(), v1::FAULT_CLASS_PROCESS_DIED);
  EXPECT_EQ(f.seq_number(), 10u);
  EXPECT_EQ(SuspectGlobals(f), std::set<int32_t>{5});
  EXPECT_EQ(f.suspects(0).level(), v1::SUSPECT_LEVEL_PROCESS);
  EXPECT_EQ(f.evidence(0).values().at("members_without_data"), 1);
  EXPECT_EQ(VictimGlobals(f).size(), 7u);
  EXPECT_THAT(f.summary(), ::testing::HasSubstr("left no data"));
  Cycle(absl::Seconds(6));
  EXPECT_EQ(Latest()[0].state(), v1::FAULT_STATE_CONFIRMED);
  // Its stream starts after all and everyone completes: resolved.
  for (int32_t r = 0; r < 8; ++r) Report(job, r, 10, 10);
  Cycle(absl::Milliseconds(500));
  EXPECT_EQ(Latest()[0].state(), v1::FAULT_STATE_RESOLVED);
}

TEST_F(HangTest, CommHangLocalisesTheStalledConnection) {
  SimJob job(0xC6, 4, 2);
  job.Register(engine_.get());
  // Everyone entered seq 10; proxy progress stopped everywhere, and the
  // connection 1 -> 2 (node0 -> node1) moved least.
  for (int round = 0; round < 2; ++round) {
    for (int32_t r = 0; r < 4; ++r) {
      Report(job, r, 10, 9, {{(r + 1) % 4, r == 1 ? 4096 : 262144}});
    }
    Cycle(absl::Seconds(3));
  }
  ASSERT_EQ(Latest().size(), 1u);
  v1::Fault f = Latest()[0];
  EXPECT_EQ(f.fault_class(), v1::FAULT_CLASS_COMM_HANG);
  ASSERT_EQ(f.suspects_size(), 1);
  EXPECT_EQ(f.suspects(0).level(), v1::SUSPECT_LEVEL_LINK);
  EXPECT_EQ(f.suspects(0).global_rank(), 1);
  EXPECT_EQ(f.suspects(0).peer_global_rank(), 2);
  EXPECT_EQ(f.suspects(0).host(), "node0");
  EXPECT_EQ(f.suspects(0).peer_host(), "node1");
}

// Without deep profiling no proxy steps (0 bytes everywhere); the stalled
// connection 1 -> 2 (node0 -> node1) is the one whose send op (on rank 1)
// and recv op (on rank 2) never stopped on channel 0.
TEST_F(HangTest, CommHangLocalisedByProxyOpsThatStayOpen) {
  SimJob job(0xCB, 4, 2);
  job.Register(engine_.get());
  for (int round = 0; round < 2; ++round) {
    for (int32_t r = 0; r < 4; ++r) {
      v1::RankProgress p = job.Progress(r, 10, 9);
      p.set_oldest_incomplete_seq(10);
      p.set_oldest_incomplete_age_ns(1);
      for (uint32_t ch = 0; ch < 2; ++ch) {
        for (bool send : {true, false}) {
          v1::ConnectionSummary* c = p.add_in_flight();
          c->set_peer_rank(send ? (r + 1) % 4 : (r + 3) % 4);
          c->set_channel_id(ch);
          c->set_is_send(send);
          const bool stuck = ch == 0 && ((send && r == 1) || (!send && r == 2));
          c->set_duration_ns(stuck ? 0 : 40'000);
        }
      }
      ASSERT_TRUE(engine_->AddProgress(job.HostOf(r), p).ok());
    }
    Cycle(absl::Seconds(3));
  }
  ASSERT_EQ(Latest().size(), 1u);
  const v1::Fault f = Latest()[0];
  EXPECT_EQ(f.fault_class(), v1::FAULT_CLASS_COMM_HANG);
  ASSERT_EQ(f.suspects_size(), 1) << f.DebugString();
  EXPECT_EQ(f.suspects(0).level(), v1::SUSPECT_LEVEL_LINK);
  EXPECT_EQ(f.suspects(0).global_rank(), 1);
  EXPECT_EQ(f.suspects(0).peer_global_rank(), 2);
  EXPECT_EQ(f.suspects(0).comm_rank(), 1);
  EXPECT_EQ(f.suspects(0).peer_comm_rank(), 2);
  EXPECT_EQ(f.suspects(0).host(), "node0");
  EXPECT_EQ(f.suspects(0).peer_host(), "node1");
  EXPECT_EQ(f.evidence(0).values().at("open_proxy_sides/1>2"), 2);
  EXPECT_THAT(f.summary(), ::testing::HasSubstr("stayed open"));
  EXPECT_EQ(VictimGlobals(f).size(), 4u);
}

// The plugin records ProxyOps when they stop: the stalled connection's ops
// are simply missing (rank 1 has no send on channel 1, rank 2 no recv).
TEST_F(HangTest, CommHangLocalisedByProxyOpsThatNeverReported) {
  SimJob job(0xCE, 4, 2);
  job.Register(engine_.get());
  for (int32_t r = 0; r < 4; ++r) {
    v1::RankProgress p = job.Progress(r, 10, 9);
    p.set_oldest_incomplete_seq(10);
    p.set_oldest_incomplete_age_ns(1);
    for (uint32_t ch = 0; ch < 2; ++ch) {
      for (bool send : {true, false}) {
        if (ch == 1 && ((send && r == 1) || (!send && r == 2))) continue;
        v1::ConnectionSummary* c = p.add_in_flight();
        c->set_peer_rank(send ? (r + 1) % 4 : (r + 3) % 4);
        c->set_channel_id(ch);
        c->set_is_send(send);
        c->set_duration_ns(40'000);
      }
    }
    ASSERT_TRUE(engine_->AddProgress(job.HostOf(r), p).ok());
  }
  Cycle(absl::Seconds(6));
  ASSERT_EQ(Latest().size(), 1u);
  const v1::Fault f = Latest()[0];
  ASSERT_EQ(f.suspects_size(), 1) << f.DebugString();
  EXPECT_EQ(f.suspects(0).global_rank(), 1);
  EXPECT_EQ(f.suspects(0).peer_global_rank(), 2);
  EXPECT_EQ(f.suspects(0).peer_host(), "node1");
}

// Every proxy op still open (nothing stopped): no signal, no suspect.
TEST_F(HangTest, CommHangWithEveryProxyOpOpenNamesNoLink) {
  SimJob job(0xCC, 4, 2);
  job.Register(engine_.get());
  for (int32_t r = 0; r < 4; ++r) {
    v1::RankProgress p = job.Progress(r, 10, 9);
    p.set_oldest_incomplete_seq(10);
    p.set_oldest_incomplete_age_ns(1);
    v1::ConnectionSummary* c = p.add_in_flight();
    c->set_peer_rank((r + 1) % 4);
    c->set_is_send(true);
    ASSERT_TRUE(engine_->AddProgress(job.HostOf(r), p).ok());
  }
  Cycle(absl::Seconds(6));
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_EQ(Latest()[0].suspects_size(), 0);
}

// A process stopped whole (SIGSTOP, a debugger) inside the collective, as
// in `pitstop sim --scenario torch-hang` when the stop lands there: every
// member entered it and none completes, which alone read as a comm hang
// with no one to blame. Its agent has heard nothing from it (no heartbeat)
// while the peers' processes, blocked in the same collective, still send.
TEST_F(HangTest, ProcessFrozenInsideTheCollectiveIsTheSuspect) {
  SimJob job(0xCD, 4, 2);
  job.Register(engine_.get());
  for (int32_t r = 0; r < 4; ++r) {
    v1::RankProgress p = job.Progress(r, 10, 9);
    p.set_oldest_incomplete_seq(10);
    p.set_oldest_incomplete_age_ns(1);
    p.set_process_silent_ns(r == 3 ? 6'000'000'000 : 400'000'000);
    ASSERT_TRUE(engine_->AddProgress(job.HostOf(r), p).ok());
  }
  Cycle(absl::Seconds(6));
  ASSERT_EQ(Latest().size(), 1u);
  const v1::Fault f = Latest()[0];
  EXPECT_EQ(f.fault_class(), v1::FAULT_CLASS_NON_COMM_HANG);
  EXPECT_EQ(SuspectGlobals(f), std::set<int32_t>{3});
  EXPECT_EQ(f.suspects(0).level(), v1::SUSPECT_LEVEL_PROCESS);
  EXPECT_EQ(f.suspects(0).host(), "node1");
  EXPECT_EQ(VictimGlobals(f), (std::set<int32_t>{0, 1, 2}));
  EXPECT_EQ(f.evidence(0).values().at("process_silent_ns/rank3"), 6e9);
  EXPECT_THAT(f.summary(), ::testing::HasSubstr("went silent"));
  Cycle(absl::Seconds(5));
  EXPECT_EQ(Latest()[0].state(), v1::FAULT_STATE_CONFIRMED);
}

// The stop came late in the ring all-reduce: ranks 0 and 1 had finished
// it, rank 2 waits for rank 3's last chunk. That read as a completion stall
// naming ranks 2 and 3 (GPU level, "silent divergence"); rank 2's process
// still heartbeats, rank 3's sends nothing: only rank 3 is the suspect.
TEST_F(HangTest, FrozenProcessIsNamedNotTheRankWaitingForIt) {
  SimJob job(0xD0, 4, 2);
  job.Register(engine_.get());
  for (int32_t r = 0; r < 4; ++r) {
    const bool done = r < 2;
    v1::RankProgress p = job.Progress(r, 41, done ? 41 : 40);
    if (!done) {
      p.set_oldest_incomplete_seq(41);
      p.set_oldest_incomplete_age_ns(1);
    }
    p.set_process_silent_ns(r == 3 ? 6'000'000'000 : 300'000'000);
    ASSERT_TRUE(engine_->AddProgress(job.HostOf(r), p).ok());
  }
  // Ranks 0 and 1 go on into seq 42 and wait there.
  for (int32_t r = 0; r < 2; ++r) {
    v1::RankProgress p = job.Progress(r, 42, 41);
    p.set_oldest_incomplete_seq(42);
    p.set_oldest_incomplete_age_ns(1);
    p.set_process_silent_ns(300'000'000);
    ASSERT_TRUE(engine_->AddProgress(job.HostOf(r), p).ok());
  }
  Cycle(absl::Seconds(6));
  ASSERT_EQ(Latest().size(), 1u) << Latest()[0].DebugString();
  const v1::Fault f = Latest()[0];
  EXPECT_EQ(f.fault_class(), v1::FAULT_CLASS_NON_COMM_HANG);
  EXPECT_EQ(SuspectGlobals(f), std::set<int32_t>{3});
  EXPECT_EQ(f.suspects(0).level(), v1::SUSPECT_LEVEL_PROCESS);
  EXPECT_THAT(f.summary(), ::testing::HasSubstr("went silent"));
}

// A silence every member shares says nothing about any one of them, and
// one shorter than three missed heartbeats is a loaded machine: both stay
// the comm hang they were.
TEST_F(HangTest, SilenceOfEveryoneOrBriefNamesNoProcess) {
  for (const uint64_t hash : {0xCEu, 0xCFu}) {
    SimJob job(hash, 4, 2, absl::StrCat("job", hash));
    job.Register(engine_.get());
    for (int32_t r = 0; r < 4; ++r) {
      v1::RankProgress p = job.Progress(r, 10, 9);
      p.set_oldest_incomplete_seq(10);
      p.set_oldest_incomplete_age_ns(1);
      const bool everyone = hash == 0xCE;
      p.set_process_silent_ns(everyone ? 8'000'000'000
                                       : (r == 3 ? 2'500'000'000 : 0));
      ASSERT_TRUE(engine_->AddProgress(job.HostOf(r), p).ok());
    }
  }
  Cycle(absl::Seconds(6));
  ASSERT_EQ(Latest().size(), 2u);
  for (const v1::Fault& f : Latest()) {
    EXPECT_EQ(f.fault_class(), v1::FAULT_CLASS_COMM_HANG) << f.comm_hash();
    EXPECT_EQ(f.suspects_size(), 0) << f.comm_hash();
  }
}

// NCCL samples the activation mask when an operation starts: the stuck one
// would never record more, so a comm hang asks for no deep profiling.
TEST_F(HangTest, CommHangWithoutProxyDataDoesNotAskForDeepProfiling) {
  SimJob job(0xC7, 4, 2);
  job.Register(engine_.get());
  for (int32_t r = 0; r < 4; ++r) Report(job, r, 10, 9);
  Cycle(absl::Seconds(6));
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_EQ(Latest()[0].fault_class(), v1::FAULT_CLASS_COMM_HANG);
  EXPECT_EQ(Latest()[0].suspects_size(), 0);
  EXPECT_THAT(Latest()[0].summary(), ::testing::HasSubstr("stands out"));
  EXPECT_TRUE(profiling_.empty());
}

// A controller restart: the open fault comes back from the store and the
// same condition seen again updates it instead of opening a second fault.
TEST_F(HangTest, FaultOpenAtRestartIsUpdatedNotDuplicated) {
  SimJob job(0xCD, 4, 2);
  job.Register(engine_.get());
  for (int32_t r = 0; r < 4; ++r) Report(job, r, r == 3 ? 9 : 10, 9);
  Cycle(absl::Seconds(6));
  ASSERT_EQ(Latest().size(), 1u);
  const v1::Fault before = Latest()[0];

  DetectionEngine::Options options;
  options.first_fault_number = 2;  // the store's next number
  auto restarted = DetectionEngine::Create(&clock_, options);
  ASSERT_TRUE(restarted.ok());
  engine_ = std::move(*restarted);
  engine_->AdoptOpenFaults({before});
  faults_.clear();
  job.Register(engine_.get());
  for (int32_t r = 0; r < 4; ++r) Report(job, r, r == 3 ? 9 : 10, 9);
  Cycle(absl::Seconds(6));
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_EQ(Latest()[0].fault_id(), before.fault_id());
  EXPECT_EQ(Latest()[0].first_seen_unix_ns(), before.first_seen_unix_ns());
  EXPECT_EQ(SuspectGlobals(Latest()[0]), std::set<int32_t>{3});

  // A different condition still opens a new fault with a new id.
  for (int32_t r = 0; r < 4; ++r) Report(job, r, 10, 10);
  Cycle(absl::Seconds(1));
  for (int32_t r = 0; r < 4; ++r) Report(job, r, r == 1 ? 10 : 11, 10);
  Cycle(absl::Seconds(6));
  std::set<std::string> ids;
  for (const v1::Fault& f : Latest()) ids.insert(f.fault_id());
  EXPECT_TRUE(ids.count("F2")) << Latest().size();
}

// A rank that exited cleanly before a collective its peers wait in is the
// rank they wait for: the hang stays a NON_COMM_HANG naming it, not a
// COMM_HANG of the rest ("every member entered"). Once every member is
// gone nobody waits, and no fault comes of their different last seqs.
TEST_F(HangTest, RankThatExitedBeforeItsPeersCollectiveIsStillNamed) {
  SimJob job(0xC9, 4, 2);
  job.Register(engine_.get());
  for (int32_t r = 0; r < 4; ++r) Report(job, r, r == 2 ? 9 : 10, 9);
  Cycle(absl::Seconds(6));
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_EQ(Latest()[0].fault_class(), v1::FAULT_CLASS_NON_COMM_HANG);

  auto exit = [&](int32_t r) {
    v1::RankLifecycle gone;
    gone.set_kind(v1::RankLifecycle::KIND_CLEAN_EXIT);
    gone.set_job_id("job1");
    gone.set_pid(job.PidOf(r));
    gone.set_global_rank(r);
    ASSERT_TRUE(engine_->AddLifecycle(job.HostOf(r), gone).ok());
  };
  exit(2);
  for (int i = 0; i < 3; ++i) Cycle(absl::Seconds(3));
  for (const v1::Fault& f : Latest()) {
    EXPECT_EQ(f.fault_class(), v1::FAULT_CLASS_NON_COMM_HANG) << f.summary();
  }
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_NE(Latest()[0].state(), v1::FAULT_STATE_RESOLVED);
  EXPECT_EQ(SuspectGlobals(Latest()[0]), std::set<int32_t>{2});

  SimJob other(0xCA, 4, 2, "job2");
  other.Register(engine_.get());
  for (int32_t r = 0; r < 4; ++r) Report(other, r, r == 1 ? 9 : 10, 9);
  for (int32_t r = 0; r < 4; ++r) {
    v1::RankLifecycle gone;
    gone.set_kind(v1::RankLifecycle::KIND_CLEAN_EXIT);
    gone.set_job_id("job2");
    gone.set_pid(other.PidOf(r));
    gone.set_global_rank(r);
    ASSERT_TRUE(engine_->AddLifecycle(other.HostOf(r), gone).ok());
  }
  for (int i = 0; i < 3; ++i) Cycle(absl::Seconds(3));
  for (const v1::Fault& f : Latest()) {
    EXPECT_NE(f.comm_hash(), 0xCAu) << "all gone: " << f.summary();
  }
}

// Issue 31: an application destroys a communicator mid-job; its members
// live on, and the last records of one (here rank 2's completion of seq
// 10) never came. Once every member finalized it, nobody waits: no hang.
// Before that, a member that finalized while its peers still wait is the
// rank they wait for.
TEST_F(HangTest, ACommunicatorEveryMemberDestroyedNeverLooksHung) {
  SimJob job(0xCB, 4, 2);
  job.Register(engine_.get());
  for (int32_t r = 0; r < 4; ++r) Report(job, r, 10, r == 2 ? 9 : 10);
  auto finalize = [&](int32_t r) {
    v1::CommunicatorInfo info = job.Info(r);
    info.set_finalized(true);
    ASSERT_TRUE(engine_->AddCommunicator(job.HostOf(r), info).ok());
  };
  finalize(2);
  for (int i = 0; i < 4; ++i) Cycle(absl::Seconds(3));
  ASSERT_EQ(Latest().size(), 1u) << "the others still wait for rank 2";
  EXPECT_EQ(SuspectGlobals(Latest()[0]), std::set<int32_t>{2});
  for (int32_t r : {0, 1, 3}) finalize(r);
  for (int i = 0; i < 4; ++i) Cycle(absl::Seconds(3));
  for (const v1::Fault& f : Latest()) {
    EXPECT_EQ(f.state(), v1::FAULT_STATE_RESOLVED) << f.summary();
  }

  // The same records without the finalize are a hang (the check can fail).
  SimJob kept(0xCC, 4, 2, "job2");
  kept.Register(engine_.get());
  for (int32_t r = 0; r < 4; ++r) Report(kept, r, 10, r == 2 ? 9 : 10);
  for (int i = 0; i < 4; ++i) Cycle(absl::Seconds(3));
  bool hung = false;
  for (const v1::Fault& f : Latest()) {
    hung |= f.comm_hash() == 0xCCu && f.state() != v1::FAULT_STATE_RESOLVED;
  }
  EXPECT_TRUE(hung);
}

TEST_F(HangTest, ProcessDiedBlamesTheDeadProcessNotItsPeers) {
  SimJob job(0xC8, 4, 2);
  job.Register(engine_.get());
  for (int32_t r = 0; r < 4; ++r) Report(job, r, r == 2 ? 9 : 10, 9);
  Cycle(absl::Seconds(6));
  ASSERT_EQ(Latest().size(), 1u);  // hang of the peers seen first
  EXPECT_EQ(Latest()[0].fault_class(), v1::FAULT_CLASS_NON_COMM_HANG);

  v1::RankLifecycle died;
  died.set_kind(v1::RankLifecycle::KIND_DIED);
  died.set_job_id("job1");
  died.set_pid(job.PidOf(2));
  died.set_global_rank(2);
  ASSERT_TRUE(engine_->AddLifecycle(job.HostOf(2), died).ok());
  Cycle(absl::Seconds(1));
  Cycle(absl::Seconds(10));

  std::vector<v1::Fault> latest = Latest();
  ASSERT_EQ(latest.size(), 2u);
  int open = 0;
  for (const v1::Fault& f : latest) {
    if (f.state() == v1::FAULT_STATE_RESOLVED) {
      EXPECT_EQ(f.fault_class(), v1::FAULT_CLASS_NON_COMM_HANG);
      continue;
    }
    ++open;
    EXPECT_EQ(f.fault_class(), v1::FAULT_CLASS_PROCESS_DIED);
    EXPECT_EQ(f.state(), v1::FAULT_STATE_CONFIRMED);
    ASSERT_EQ(f.suspects_size(), 1);
    EXPECT_EQ(f.suspects(0).level(), v1::SUSPECT_LEVEL_PROCESS);
    EXPECT_EQ(f.suspects(0).pid(), job.PidOf(2));
    EXPECT_EQ(f.suspects(0).gpu_index(), 0);
    EXPECT_EQ(VictimGlobals(f), (std::set<int32_t>{0, 1, 3}));
  }
  EXPECT_EQ(open, 1);
}

}  // namespace
}  // namespace pitstop::controller::testing
