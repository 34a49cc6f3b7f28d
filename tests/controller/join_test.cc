// The cross-rank join: summaries in any order and late, bounded memory,
// input validation and policy errors.
#include <algorithm>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/controller/engine_test_base.h"

namespace pitstop::controller::testing {
namespace {

using ::testing::HasSubstr;

TEST_F(EngineTest, JoinsSummariesArrivingOutOfOrder) {
  SimJob job(0xE1, 16, 8);
  job.Register(engine_.get());
  std::vector<v1::CollectiveSummary> all;
  for (uint64_t seq = 1; seq <= 50; ++seq) {
    for (int32_t r = 0; r < 16; ++r)
      all.push_back(job.Summary(r, seq, 1000 + r));
  }
  std::mt19937 rng(7);
  std::shuffle(all.begin(), all.end(), rng);
  for (const auto& s : all) {
    ASSERT_TRUE(engine_->AddSummary(job.HostOf(s.rank()), s).ok());
  }
  EngineStats st = engine_->stats();
  EXPECT_EQ(st.collectives_joined, 50u);
  EXPECT_EQ(st.pending_joins, 0u);
  EXPECT_EQ(st.late_summaries, 0u);

  // A duplicate of a folded collective is late, not a new join.
  ASSERT_TRUE(engine_->AddSummary("node0", job.Summary(0, 7, 1000)).ok());
  EXPECT_EQ(engine_->stats().late_summaries, 1u);
  EXPECT_EQ(engine_->stats().pending_joins, 0u);
}

TEST_F(EngineTest, IncompleteJoinsAreEvictedAfterTheHorizon) {
  SimJob job(0xE2, 4, 4);
  job.Register(engine_.get());
  for (uint64_t seq = 1; seq <= 10; ++seq) {
    for (int32_t r = 0; r < 3; ++r) {  // rank 3 never reports
      ASSERT_TRUE(engine_->AddSummary("node0", job.Summary(r, seq, 1000)).ok());
    }
  }
  EXPECT_EQ(engine_->stats().pending_joins, 10u);
  Cycle(absl::Seconds(31));
  EXPECT_EQ(engine_->stats().pending_joins, 0u);
  EXPECT_EQ(engine_->stats().incomplete_dropped, 10u);
  // Rank 3's summary arriving now is late, and does not open a join.
  ASSERT_TRUE(engine_->AddSummary("node0", job.Summary(3, 4, 1000)).ok());
  EXPECT_EQ(engine_->stats().late_summaries, 1u);
  EXPECT_EQ(engine_->stats().pending_joins, 0u);
}

TEST_F(EngineTest, BadInputsNameTheField) {
  v1::CollectiveSummary s;
  absl::Status st = engine_->AddSummary("node0", s);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("summary.comm_hash"));

  v1::CommunicatorInfo info;
  info.set_comm_hash(5);
  info.set_n_ranks(4);
  info.set_rank(4);
  st = engine_->AddCommunicator("node0", info);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("communicator.rank"));

  v1::NodeRegistration reg;
  EXPECT_THAT(engine_->AddNode(reg).message(), HasSubstr("registration.host"));
}

TEST_F(EngineTest, PolicyIsValidatedAndResolved) {
  v1::JobPolicy p;
  p.set_persistence_n(6);
  p.set_persistence_m(4);
  auto bad = engine_->SetJobPolicy("job1", p);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("policy.persistence_n"));

  v1::JobPolicy good;
  good.set_window_ms(250);
  auto ok = engine_->SetJobPolicy("job1", good);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->window_ms(), 250u);
  EXPECT_EQ(ok->persistence_n(), DefaultJobPolicy().persistence_n());
  EXPECT_EQ(engine_->GetJobPolicy("job1").window_ms(), 250u);
  EXPECT_EQ(engine_->GetJobPolicy("other").window_ms(), 1000u);
}

// Ranks and sizes sent by an agent size per-rank tables: values beyond
// kMaxRanks are rejected naming the field and allocate nothing.
TEST_F(EngineTest, HugeRanksAndSizesAreRejectedNamingTheField) {
  v1::CollectiveSummary s;
  s.set_comm_hash(9);
  s.set_func(v1::COLL_FUNC_ALL_REDUCE);
  s.set_seq_number(1);
  s.set_rank(kMaxRanks);
  absl::Status st = engine_->AddSummary("node0", s);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("summary.rank"));
  s.set_rank(2000000000);
  EXPECT_THAT(engine_->AddSummary("node0", s).message(),
              HasSubstr("summary.rank"));

  v1::RankProgress p;
  p.set_comm_hash(9);
  p.set_rank(20000000);
  st = engine_->AddProgress("node0", p);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("progress.rank"));

  v1::CommunicatorInfo info;
  info.set_comm_hash(9);
  info.set_rank(0);
  info.set_n_ranks(INT32_MAX);
  st = engine_->AddCommunicator("node0", info);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("communicator.n_ranks"));
  info.set_n_ranks(0);
  info.set_rank(kMaxRanks + 5);
  EXPECT_THAT(engine_->AddCommunicator("node0", info).message(),
              HasSubstr("communicator.rank"));

  // Nothing was sized by the rejected records.
  EXPECT_EQ(engine_->stats().ranks, 0u);
  // The largest accepted size still works.
  info.set_n_ranks(kMaxRanks);
  info.set_rank(kMaxRanks - 1);
  EXPECT_TRUE(engine_->AddCommunicator("node0", info).ok());
}

// Omitted policy fields take the engine's configured defaults, not the
// built-in ones.
TEST(EnginePolicyTest, OmittedFieldsTakeTheConfiguredDefaults) {
  FakeClock clock;
  DetectionEngine::Options o;
  o.default_policy.set_window_ms(4000);
  o.default_policy.set_persistence_n(2);
  o.default_policy.set_persistence_m(2);
  o.default_policy.set_min_effect(0.5);
  auto engine = DetectionEngine::Create(&clock, o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  v1::JobPolicy p;
  p.set_hang_timeout_floor_ms(2000);
  auto set = (*engine)->SetJobPolicy("job1", p);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->hang_timeout_floor_ms(), 2000u);
  EXPECT_EQ(set->window_ms(), 4000u);
  EXPECT_EQ(set->persistence_n(), 2u);
  EXPECT_EQ(set->persistence_m(), 2u);
  EXPECT_DOUBLE_EQ(set->min_effect(), 0.5);
  // Fields neither the job nor the configuration set are built-in.
  EXPECT_EQ(set->warmup_collectives(), DefaultJobPolicy().warmup_collectives());
  // Validation resolves against the same defaults: configured n=2 > m=1.
  v1::JobPolicy bad;
  bad.set_persistence_m(1);
  auto rejected = (*engine)->SetJobPolicy("job1", bad);
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rejected.status().message(), HasSubstr("policy.persistence_n"));
}

TEST_F(EngineTest, SnapshotsDescribeMembership) {
  SimJob job(0xE3, 8, 4);
  job.Register(engine_.get());
  std::vector<v1::Communicator> comms = engine_->Communicators();
  ASSERT_EQ(comms.size(), 1u);
  ASSERT_EQ(comms[0].members_size(), 8);
  EXPECT_EQ(comms[0].members(6).host(), "node1");
  EXPECT_EQ(comms[0].members(6).cuda_device(), 2);
  ASSERT_EQ(comms[0].members(6).nics_size(), 1);
  EXPECT_EQ(comms[0].members(6).nics(0), "mlx5_2");
  std::vector<v1::Job> jobs = engine_->Jobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].job_id(), "job1");
  EXPECT_EQ(jobs[0].n_ranks(), 8u);
  EXPECT_EQ(jobs[0].hosts_size(), 2);
}

}  // namespace
}  // namespace pitstop::controller::testing
