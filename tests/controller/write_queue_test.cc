// The bounded write queue of the controller's server streams (WatchFaults,
// agent commands) with a recording reactor in place of gRPC's.
#include "src/controller/api/write_queue.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pitstop::controller::testing {
namespace {

using ::testing::HasSubstr;

// Records StartWrite/Finish; a write completes only when the test says so
// (a peer that stops reading never completes it).
struct FakeReactor {
  void StartWrite(const std::string* m) { written.push_back(*m); }
  void Finish(const grpc::Status& s) {
    ++finishes;
    status = s;
  }
  std::vector<std::string> written;
  int finishes = 0;
  grpc::Status status;
};

TEST(WriteQueueTest, WritesInOrderOneAtATime) {
  FakeReactor r;
  WriteQueue<FakeReactor, std::string> q(&r, 8);
  q.Enqueue("a");
  q.Enqueue("b");
  q.Enqueue("c");
  EXPECT_EQ(r.written, (std::vector<std::string>{"a"}));
  EXPECT_TRUE(q.WriteDone(true));
  EXPECT_TRUE(q.WriteDone(true));
  EXPECT_EQ(r.written, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(r.finishes, 0);
}

// A peer that stops reading: the queue ends the stream once it holds
// max_queued messages instead of growing without bound, and finishes once.
TEST(WriteQueueTest, PeerThatStopsReadingIsCutOff) {
  FakeReactor r;
  WriteQueue<FakeReactor, std::string> q(&r, 4);
  for (int i = 0; i < 5; ++i) q.Enqueue(std::to_string(i));  // 1 in flight
  EXPECT_EQ(r.finishes, 0);
  q.Enqueue("overflow");
  ASSERT_EQ(r.finishes, 1);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(r.status.error_message(), HasSubstr("did not read 4"));
  // Later messages are dropped; no second Finish.
  q.Enqueue("late");
  q.Finish(grpc::Status::CANCELLED);
  EXPECT_FALSE(q.WriteDone(false));
  EXPECT_EQ(r.finishes, 1);
  EXPECT_EQ(r.written.size(), 1u);
}

}  // namespace
}  // namespace pitstop::controller::testing
