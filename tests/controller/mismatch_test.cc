// Collective mismatch (application desync): members of one communicator
// blocked in different collectives, on deterministic RankProgress inputs.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/controller/engine_test_base.h"

namespace pitstop::controller::testing {
namespace {

using ::testing::HasSubstr;

class MismatchTest : public EngineTest {
 protected:
  // Progress of `rank` in `func`: enqueued up to `enq`, completed `done`;
  // the oldest open op (done + 1) has `count` elements of `dtype`.
  void Report(const SimJob& job, int32_t rank, v1::CollFunc func, uint64_t enq,
              uint64_t done, uint64_t count = 0,
              v1::DataType dtype = v1::DATA_TYPE_UNSPECIFIED) {
    v1::RankProgress p = job.Progress(rank, enq, done);
    p.set_func(func);
    if (enq > done) {
      p.set_oldest_incomplete_seq(done + 1);
      p.set_oldest_incomplete_age_ns(1);
      p.set_oldest_incomplete_count(count);
      p.set_oldest_incomplete_datatype(dtype);
    }
    ASSERT_TRUE(engine_->AddProgress(job.HostOf(rank), p).ok());
  }
};

// Lightning-AI/pytorch-lightning#19106's shape: one rank takes another code
// path and issues an all-gather where the others issue an all-reduce. Each
// side waits for the other; today's verdict would be two non-comm hangs,
// each blaming the other side.
TEST_F(MismatchTest, RankInAnotherFunctionIsNamedWithWhatItIssued) {
  SimJob job(0xD1, 4, 4);
  job.Register(engine_.get());
  for (int32_t r = 0; r < 4; ++r) {
    const bool odd = r == 3;
    Report(job, r, v1::COLL_FUNC_ALL_REDUCE, odd ? 4 : 5, 4, 4096,
           v1::DATA_TYPE_FLOAT32);
    Report(job, r, v1::COLL_FUNC_ALL_GATHER, odd ? 3 : 2, 2, 1024,
           v1::DATA_TYPE_BFLOAT16);
  }
  Cycle(absl::Seconds(6));
  ASSERT_EQ(Latest().size(), 1u) << Latest()[0].DebugString();
  const v1::Fault f = Latest()[0];
  EXPECT_EQ(f.fault_class(), v1::FAULT_CLASS_MISMATCH);
  EXPECT_EQ(f.func(), v1::COLL_FUNC_ALL_REDUCE);
  EXPECT_EQ(f.seq_number(), 5u);
  EXPECT_EQ(SuspectGlobals(f), std::set<int32_t>{3});
  EXPECT_EQ(f.suspects(0).level(), v1::SUSPECT_LEVEL_RANK);
  EXPECT_EQ(VictimGlobals(f), (std::set<int32_t>{0, 1, 2}));
  const auto& values = f.evidence(0).values();
  EXPECT_EQ(values.at("issued_func/rank3"), v1::COLL_FUNC_ALL_GATHER);
  EXPECT_EQ(values.at("issued_seq/rank3"), 3);
  EXPECT_EQ(values.at("issued_count/rank3"), 1024);
  EXPECT_EQ(values.at("majority_ranks"), 3);
  EXPECT_THAT(f.summary(), HasSubstr("all_gather seq 3 (1024 x bfloat16)"));
  EXPECT_THAT(f.summary(), HasSubstr("all_reduce seq 5 (4096 x float32)"));
  EXPECT_THAT(f.summary(), HasSubstr("not a hardware fault"));

  Cycle(absl::Seconds(5));
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_EQ(Latest()[0].state(), v1::FAULT_STATE_CONFIRMED);

  // The job is restarted past it and everyone completes: resolved.
  for (int32_t r = 0; r < 4; ++r) {
    Report(job, r, v1::COLL_FUNC_ALL_REDUCE, 6, 6);
    Report(job, r, v1::COLL_FUNC_ALL_GATHER, 3, 3);
  }
  Cycle(absl::Milliseconds(500));
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_EQ(Latest()[0].state(), v1::FAULT_STATE_RESOLVED);
}

// A communicator the job gave no name (NCCL's commName is optional; the
// torch backend over the NCCL C API sets none) is named by its hash, as the
// hang summaries name it: before, the summary read "the members of  issued".
TEST_F(MismatchTest, UnnamedCommunicatorIsNamedByItsHash) {
  SimJob job(0xD5, 4, 2);
  for (const v1::NodeRegistration& reg : job.Nodes()) {
    ASSERT_TRUE(engine_->AddNode(reg).ok());
  }
  for (int32_t r = 0; r < 4; ++r) {
    v1::CommunicatorInfo info = job.Info(r);
    info.clear_comm_name();
    ASSERT_TRUE(engine_->AddCommunicator(job.HostOf(r), info).ok());
  }
  for (int32_t r = 0; r < 4; ++r) {
    const bool odd = r == 3;
    Report(job, r, v1::COLL_FUNC_ALL_REDUCE, odd ? 41 : 42, 41, 137216,
           v1::DATA_TYPE_FLOAT32);
    Report(job, r, v1::COLL_FUNC_ALL_GATHER, odd ? 1 : 0, 0, 1,
           v1::DATA_TYPE_FLOAT32);
  }
  Cycle(absl::Seconds(6));
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_EQ(Latest()[0].fault_class(), v1::FAULT_CLASS_MISMATCH);
  EXPECT_THAT(Latest()[0].summary(),
              HasSubstr("the members of comm d5 issued different"));
}

// Same function and sequence number, another element count: every member
// entered the collective and none completes, which alone reads as a comm
// hang; the sizes say it is the job's bug.
TEST_F(MismatchTest, SameCollectiveWithAnotherCountIsAMismatch) {
  SimJob job(0xD2, 8, 4);
  job.Register(engine_.get());
  for (int32_t r = 0; r < 8; ++r) {
    Report(job, r, v1::COLL_FUNC_ALL_REDUCE, 10, 9, r == 6 ? 2048 : 4096,
           v1::DATA_TYPE_FLOAT32);
  }
  Cycle(absl::Seconds(6));
  ASSERT_EQ(Latest().size(), 1u);
  const v1::Fault f = Latest()[0];
  EXPECT_EQ(f.fault_class(), v1::FAULT_CLASS_MISMATCH);
  EXPECT_EQ(SuspectGlobals(f), std::set<int32_t>{6});
  EXPECT_EQ(f.evidence(0).values().at("issued_count/rank6"), 2048);
  EXPECT_EQ(f.evidence(0).values().at("majority_count"), 4096);
  EXPECT_THAT(f.summary(), HasSubstr("2048 x float32"));
}

TEST_F(MismatchTest, AnotherDatatypeIsAMismatch) {
  SimJob job(0xD3, 4, 4);
  job.Register(engine_.get());
  for (int32_t r = 0; r < 4; ++r) {
    Report(job, r, v1::COLL_FUNC_REDUCE_SCATTER, 2, 1, 512,
           r == 0 ? v1::DATA_TYPE_FLOAT16 : v1::DATA_TYPE_BFLOAT16);
  }
  Cycle(absl::Seconds(6));
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_EQ(Latest()[0].fault_class(), v1::FAULT_CLASS_MISMATCH);
  EXPECT_EQ(SuspectGlobals(Latest()[0]), std::set<int32_t>{0});
}

// Without sizes (older agents), one collective in which every member waits
// stays a comm hang: unknown sizes never make a mismatch.
TEST_F(MismatchTest, UnknownSizesAreNotAMismatch) {
  SimJob job(0xD4, 4, 4);
  job.Register(engine_.get());
  for (int32_t r = 0; r < 4; ++r) {
    Report(job, r, v1::COLL_FUNC_ALL_REDUCE, 10, 9, r == 2 ? 0 : 4096,
           r == 2 ? v1::DATA_TYPE_UNSPECIFIED : v1::DATA_TYPE_FLOAT32);
  }
  Cycle(absl::Seconds(6));
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_EQ(Latest()[0].fault_class(), v1::FAULT_CLASS_COMM_HANG);
}

// A member behind in one function that is not blocked in another one is
// computing (or stuck outside NCCL): a non-comm hang, not a desync.
TEST_F(MismatchTest, MemberNotBlockedElsewhereIsANonCommHang) {
  SimJob job(0xD5, 4, 4);
  job.Register(engine_.get());
  for (int32_t r = 0; r < 4; ++r) {
    Report(job, r, v1::COLL_FUNC_ALL_REDUCE, r == 1 ? 4 : 5, 4, 4096,
           v1::DATA_TYPE_FLOAT32);
    Report(job, r, v1::COLL_FUNC_ALL_GATHER, 2, 2);
  }
  Cycle(absl::Seconds(6));
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_EQ(Latest()[0].fault_class(), v1::FAULT_CLASS_NON_COMM_HANG);
  EXPECT_EQ(SuspectGlobals(Latest()[0]), std::set<int32_t>{1});
}

// A member whose completions stopped one collective earlier in the same
// function is a stalled GPU (the hang detector's case), not a desync.
TEST_F(MismatchTest, SameFunctionAtAnotherSequenceIsNotAMismatch) {
  SimJob job(0xD6, 4, 4);
  job.Register(engine_.get());
  for (int32_t r = 0; r < 4; ++r) {
    Report(job, r, v1::COLL_FUNC_ALL_REDUCE, 13, r == 3 ? 11 : 12, 4096,
           v1::DATA_TYPE_FLOAT32);
  }
  Cycle(absl::Seconds(6));
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_EQ(Latest()[0].fault_class(), v1::FAULT_CLASS_NON_COMM_HANG);
  EXPECT_EQ(SuspectGlobals(Latest()[0]), std::set<int32_t>{3});
}

// Shaped like a real dump (gpu_error_1st): a stalled member blocked in an
// older op of the function while the others went on to a later one of
// another size. One function at two points is a stall, not a desync.
TEST_F(MismatchTest, LaterOpOfAnotherSizeBehindAStalledMemberIsNotAMismatch) {
  SimJob job(0xD8, 4, 4);
  job.Register(engine_.get());
  for (int32_t r = 0; r < 4; ++r) {
    Report(job, r, v1::COLL_FUNC_ALL_GATHER, r == 0 ? 13 : 20, r == 0 ? 12 : 19,
           r == 0 ? 4096 : 1024, v1::DATA_TYPE_BFLOAT16);
  }
  Cycle(absl::Seconds(6));
  ASSERT_EQ(Latest().size(), 1u);
  EXPECT_NE(Latest()[0].fault_class(), v1::FAULT_CLASS_MISMATCH);
  EXPECT_EQ(SuspectGlobals(Latest()[0]), std::set<int32_t>{0});
}

// A member stalled in an all-reduce the others already completed, while
// they wait in the next all-gather: they are past its collective, so they
// are waiting for it, not desynchronised from it.
TEST_F(MismatchTest, PeersPastTheStalledMembersCollectiveAreNotAMismatch) {
  SimJob job(0xD9, 4, 4);
  job.Register(engine_.get());
  for (int32_t r = 0; r < 4; ++r) {
    Report(job, r, v1::COLL_FUNC_ALL_REDUCE, 5, r == 2 ? 4 : 5, 4096,
           v1::DATA_TYPE_FLOAT32);
    Report(job, r, v1::COLL_FUNC_ALL_GATHER, r == 2 ? 2 : 3, 2, 1024,
           v1::DATA_TYPE_FLOAT32);
  }
  Cycle(absl::Seconds(6));
  for (const v1::Fault& f : Latest()) {
    EXPECT_NE(f.fault_class(), v1::FAULT_CLASS_MISMATCH) << f.summary();
  }
}

// Two members, two collectives: no majority. One side is named, with less
// confidence, and the summary says so.
TEST_F(MismatchTest, TwoRanksWithoutMajorityNameOneSideWithLessConfidence) {
  SimJob job(0xD7, 2, 2);
  job.Register(engine_.get());
  Report(job, 0, v1::COLL_FUNC_ALL_REDUCE, 1, 0, 8, v1::DATA_TYPE_FLOAT32);
  Report(job, 0, v1::COLL_FUNC_BROADCAST, 0, 0);
  Report(job, 1, v1::COLL_FUNC_ALL_REDUCE, 0, 0);
  Report(job, 1, v1::COLL_FUNC_BROADCAST, 1, 0, 8, v1::DATA_TYPE_FLOAT32);
  Cycle(absl::Seconds(6));
  ASSERT_EQ(Latest().size(), 1u);
  const v1::Fault f = Latest()[0];
  EXPECT_EQ(f.fault_class(), v1::FAULT_CLASS_MISMATCH);
  EXPECT_EQ(SuspectGlobals(f), std::set<int32_t>{1});
  EXPECT_DOUBLE_EQ(f.suspects(0).confidence(), 0.5);
  EXPECT_THAT(f.summary(), HasSubstr("no majority"));
}

}  // namespace
}  // namespace pitstop::controller::testing
