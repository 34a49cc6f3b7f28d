// Ingest path: real gRPC streams over a real Unix socket into AgentCore.
#include <fcntl.h>
#include <grp.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/agent/agent_core.h"
#include "src/agent/ingest_server.h"
#include "src/agent/message_bound.h"
#include "tests/agent/fake_rank.h"
#include "tests/agent/test_util.h"

namespace pitstop::agent {
namespace {

using testing::AddCompleteOps;
using testing::Eventually;
using testing::FakeRank;
using ::testing::HasSubstr;
using testing::MakeGoodbye;
using testing::MakeHello;
using testing::TempDir;

constexpr uint64_t kComm = 0xAB12;

class IngestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    AgentCoreOptions options;
    options.host = "node-a";
    core_ = std::make_unique<AgentCore>(Clock::Real(), options, nullptr);
    auto s = IngestServer::Create(socket_, "", core_.get());
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }
  // Everything the core has queued for upstream so far.
  v1::ConnectRequest Drain() {
    v1::ConnectRequest out;
    core_->FillBatch(1 << 30, &out);
    return out;
  }
  int Lifecycle(const v1::ConnectRequest& r, v1::RankLifecycle::Kind k) {
    int n = 0;
    for (const auto& l : r.lifecycle()) n += l.kind() == k;
    return n;
  }

  TempDir dir_;
  std::string socket_ = dir_.file("a.sock");
  std::unique_ptr<AgentCore> core_;
  std::unique_ptr<IngestServer> server_;
};

TEST(IngestExceptionTest, ThrowingHandlerEndsStreamWithErrorAndStopReturns) {
  TempDir dir;
  const std::string socket = dir.file("x.sock");
  AgentCoreOptions options;
  options.host = "node-x";
  options.on_message_for_test = [](const v1::StreamTelemetryRequest& req) {
    if (req.has_hello() && req.hello().pid() == 666) throw std::bad_alloc();
  };
  AgentCore core(Clock::Real(), options, nullptr);
  auto server = IngestServer::Create(socket, "", &core);
  ASSERT_TRUE(server.ok()) << server.status();
  {
    FakeRank bad(socket);
    bad.Send(MakeHello(666, 0, kComm, 0, 2));
    const grpc::Status st = bad.Close();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << st.error_message();
  }
  // The server still serves other ranks.
  FakeRank good(socket);
  ASSERT_TRUE(good.Send(MakeHello(7, 1, kComm, 1, 2)));
  ASSERT_TRUE(Eventually([&] { return core.connected_ranks() == 1; }));
  (*server)->Stop();  // returns (ends the open stream)
  good.Close();
  EXPECT_EQ(core.connected_ranks(), 0u);
}

TEST_F(IngestTest, ConcurrentRankStreamsAreJoined) {
  constexpr int kRanks = 8, kBatches = 10, kOpsPerBatch = 50;
  std::vector<std::thread> threads;
  std::vector<grpc::Status> status(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      FakeRank rank(socket_);
      auto hello = MakeHello(1000 + r, r, kComm, r, kRanks);
      if (!rank.Send(hello)) return;
      for (int b = 0; b < kBatches; ++b) {
        v1::StreamTelemetryRequest req;
        req.set_batch_seq(b + 2);
        AddCompleteOps(&req, kComm, r, b * kOpsPerBatch, kOpsPerBatch);
        if (!rank.Send(req)) return;
      }
      rank.Send(MakeGoodbye());
      status[r] = rank.Close();
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& s : status) EXPECT_TRUE(s.ok()) << s.error_message();
  v1::ConnectRequest out = Drain();
  EXPECT_EQ(out.summaries_size(), kRanks * kBatches * kOpsPerBatch);
  EXPECT_EQ(Lifecycle(out, v1::RankLifecycle::KIND_STREAM_OPENED), kRanks);
  EXPECT_EQ(Lifecycle(out, v1::RankLifecycle::KIND_CLEAN_EXIT), kRanks);
  EXPECT_EQ(Lifecycle(out, v1::RankLifecycle::KIND_DIED), 0);
  for (const auto& s : out.summaries()) {
    ASSERT_EQ(s.state(), v1::OP_STATE_COMPLETED);
    ASSERT_EQ(s.kernel_duration_ns(), 21'000u);  // max over the 2 channels
    ASSERT_EQ(s.connections_size(), 2);
  }
  EXPECT_EQ(out.communicators_size(), kRanks);
  EXPECT_EQ(out.communicators(0).host(), "node-a");
  EXPECT_EQ(out.counters().records_ingested(),
            static_cast<uint64_t>(kRanks * (1 + kBatches * kOpsPerBatch * 6)));
  EXPECT_EQ(core_->connected_ranks(), 0u);
}

TEST_F(IngestTest, RankReconnectingManyTimesIsFine) {
  for (int i = 0; i < 25; ++i) {
    FakeRank rank(socket_);
    auto hello = MakeHello(77, 3, kComm, 3, 4);
    hello.mutable_hello()->set_reconnects(i);
    AddCompleteOps(&hello, kComm, 3, i * 2, 2);
    ASSERT_TRUE(rank.Send(hello));
    ASSERT_TRUE(rank.Send(MakeGoodbye()));
    ASSERT_TRUE(rank.Close().ok());
  }
  v1::ConnectRequest out = Drain();
  EXPECT_EQ(out.summaries_size(), 50);
  EXPECT_EQ(Lifecycle(out, v1::RankLifecycle::KIND_CLEAN_EXIT), 25);
  EXPECT_EQ(core_->connected_ranks(), 0u);
}

TEST_F(IngestTest, FirstMessageWithoutHelloIsRejected) {
  FakeRank rank(socket_);
  v1::StreamTelemetryRequest req;
  AddCompleteOps(&req, kComm, 0, 0, 1);
  rank.Send(req);
  grpc::Status st = rank.Close();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("hello"));
}

// Issue #33 F7: a 4 MiB message of empty OpRecords (2 bytes each on the
// wire, ~300 in memory) parsed into ~643 MB before any record cap. Its
// records are counted before parsing and the stream ends; the agent serves
// the next stream.
TEST_F(IngestTest, MessageOfTooManyRecordsIsRefusedBeforeParsing) {
  {
    FakeRank rank(socket_);
    ASSERT_TRUE(rank.Send(MakeHello(getpid(), 0, kComm, 0, 1)));
    v1::StreamTelemetryRequest bomb;
    for (uint64_t i = 0; i <= kMaxMessageObjects; ++i) bomb.add_ops();
    rank.Send(bomb);
    grpc::Status st = rank.Close();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(st.error_message(), HasSubstr("refused before parsing"));
  }
  EXPECT_EQ(server_->oversized_messages(), 1u);
  // The hello's communicator event only: none of the bomb's records.
  EXPECT_EQ(core_->Counters().records_ingested(), 1u);
  // A library-sized batch is taken whole.
  FakeRank rank(socket_);
  v1::StreamTelemetryRequest batch = MakeHello(getpid(), 0, kComm, 0, 1);
  AddCompleteOps(&batch, kComm, 0, 0, 4096);
  ASSERT_TRUE(rank.Send(batch));
  EXPECT_TRUE(
      Eventually([&] { return core_->Counters().records_ingested() >= 4096; }));
  EXPECT_TRUE(rank.Close().ok());
  EXPECT_EQ(server_->oversized_messages(), 1u);
}

TEST_F(IngestTest, BrokenStreamIsReportedAsDied) {
  v1::ConnectRequest out;
  {
    FakeRank rank(socket_);
    ASSERT_TRUE(rank.Send(MakeHello(4242, 5, kComm, 1, 2)));
    // Wait for the hello to be handled, not just the stream to be open: a
    // cancel drops whatever the server has not read yet (CI's TSan run saw
    // the hello lost that way, leaving a stream with no rank to declare
    // dead).
    ASSERT_TRUE(Eventually([&] {
      v1::ConnectRequest r = Drain();
      out.MergeFrom(r);
      return out.communicators_size() > 0;
    }));
    rank.Cancel();  // no goodbye
  }
  ASSERT_TRUE(Eventually([&] {
    v1::ConnectRequest r = Drain();
    out.MergeFrom(r);
    return Lifecycle(out, v1::RankLifecycle::KIND_DIED) == 1;
  }));
  for (const auto& l : out.lifecycle()) {
    if (l.kind() != v1::RankLifecycle::KIND_DIED) continue;
    EXPECT_EQ(l.pid(), 4242u);
    EXPECT_EQ(l.global_rank(), 5);
    ASSERT_EQ(l.communicators_size(), 1);
    EXPECT_EQ(l.communicators(0).comm_hash(), kComm);
  }
  EXPECT_EQ(core_->rank_deaths(), 1u);
}

TEST_F(IngestTest, ActivationGoesToMembersOfTheCommunicatorOnly) {
  FakeRank a(socket_), b(socket_);
  ASSERT_TRUE(a.Send(MakeHello(1, 0, kComm, 0, 2)));
  ASSERT_TRUE(b.Send(MakeHello(2, 1, 0x999, 0, 2)));
  v1::SetActivationMask mask;
  mask.set_comm_hash(kComm);
  mask.set_rank(-1);
  mask.set_event_mask(0x10);
  mask.set_duration_ms(30'000);
  // Wait until both hellos are joined, then route.
  ASSERT_TRUE(Eventually([&] {
    v1::SetActivationMask all;
    all.set_rank(-1);
    return core_->ApplyActivation(0, all) == 2;
  }));
  EXPECT_EQ(core_->ApplyActivation(17, mask), 1);
  // `a` gets the probes (id 0) and command 17.
  ASSERT_TRUE(Eventually([&] {
    for (const auto& c : a.activations()) {
      if (c.command_id() == 17) return true;
    }
    return false;
  }));
  bool got17 = false;
  for (const auto& c : a.activations()) {
    if (c.command_id() != 17) continue;
    got17 = true;
    EXPECT_EQ(c.comm_hash(), kComm);
    EXPECT_EQ(c.event_mask(), 0x10u);
    EXPECT_EQ(c.duration_ms(), 30'000u);
  }
  EXPECT_TRUE(got17);
  ASSERT_TRUE(b.WaitForActivation(absl::Seconds(20)));
  for (const auto& c : b.activations()) EXPECT_NE(c.command_id(), 17u);
  a.Send(MakeGoodbye());
  b.Send(MakeGoodbye());
  EXPECT_TRUE(a.Close().ok());
  EXPECT_TRUE(b.Close().ok());
}

TEST_F(IngestTest, SocketIsGroupReadableWritableOnly) {
  struct stat st;
  ASSERT_EQ(stat(socket_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0660u);
}

// Trust (issue #15): with verify_pid a rank stream may only speak for the
// process that connected (SO_PEERCRED recorded by the IngestListener).
TEST(IngestPeerCredTest, HelloClaimingAnotherPidIsRefused) {
  TempDir dir;
  const std::string socket = dir.file("p.sock");
  AgentCoreOptions options;
  options.host = "node-p";
  AgentCore core(Clock::Real(), options, nullptr);
  auto s = IngestServer::Create(socket, "", &core, kDefaultMaxConnections, {},
                                /*verify_pid=*/true);
  ASSERT_TRUE(s.ok()) << s.status();
  {
    FakeRank liar(socket);
    // pid 1 exists and is not this process.
    liar.Send(MakeHello(1, 0, kComm, 0, 2));
    const grpc::Status st = liar.Close();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_THAT(st.error_message(), HasSubstr("hello.pid 1"));
    EXPECT_THAT(st.error_message(), HasSubstr(absl::StrCat("pid ", getpid())));
  }
  EXPECT_EQ((*s)->pid_refusals(), 1u);
  {
    FakeRank honest(socket);
    ASSERT_TRUE(honest.Send(MakeHello(getpid(), 1, kComm, 1, 2)));
    ASSERT_TRUE(honest.Send(MakeGoodbye()));
    EXPECT_TRUE(honest.Close().ok());
  }
  EXPECT_EQ((*s)->pid_refusals(), 1u);
  (*s)->Stop();
}

TEST_F(IngestTest, LiveSocketIsNotStolen) {
  AgentCore other(Clock::Real(), {}, nullptr);
  auto s = IngestServer::Create(socket_, "", &other);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.status().message(), HasSubstr("another agent"));
  // An agent that got past the lock (its file removed, say) probes the
  // socket: it connects and hangs up at once, and leaves the socket alone.
  const absl::Status probe = ClaimSocketPath(socket_);
  EXPECT_EQ(probe.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(probe.message(), HasSubstr("another agent is serving"));
  // The first agent still serves: the next rank's first stream starts on
  // its first connection attempt (no wait-for-ready retries).
  FakeRank rank(socket_, /*wait_for_ready=*/false);
  ASSERT_TRUE(rank.Send(MakeHello(1, 0, kComm, 0, 1)));
  ASSERT_TRUE(rank.Send(MakeGoodbye()));
  EXPECT_TRUE(rank.Close().ok());
}

TEST(IngestSocketTest, LockHeldByAnotherStartingAgentIsRespected) {
  TempDir dir;
  const std::string sock = dir.file("l.sock");
  AgentCore core(Clock::Real(), AgentCoreOptions{}, nullptr);
  // Another agent that has taken the lock but not yet bound the socket.
  const int fd = open((sock + ".lock").c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(flock(fd, LOCK_EX | LOCK_NB), 0);
  auto second = IngestServer::Create(sock, "", &core);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr("another agent"));
  close(fd);
  // Released: the next one takes the path, and holds the lock while up.
  auto third = IngestServer::Create(sock, "", &core);
  ASSERT_TRUE(third.ok()) << third.status();
  auto fourth = IngestServer::Create(sock, "", &core);
  ASSERT_FALSE(fourth.ok());
  (*third)->Stop();
  auto fifth = IngestServer::Create(sock, "", &core);
  EXPECT_TRUE(fifth.ok()) << fifth.status();
}

TEST(IngestSocketTest, StaleSocketIsReplaced) {
  TempDir dir;
  const std::string path = dir.file("s.sock");
  // A socket file nobody listens on, as a crashed agent leaves it.
  const int fd = testing::BindUnixSocket(path, SOCK_STREAM);
  ASSERT_GE(fd, 0);
  close(fd);
  AgentCore core(Clock::Real(), {}, nullptr);
  auto s = IngestServer::Create(path, "", &core);
  ASSERT_TRUE(s.ok()) << s.status();
  FakeRank rank(path);
  ASSERT_TRUE(rank.Send(MakeHello(1, 0, kComm, 0, 1)));
  rank.Send(MakeGoodbye());
  EXPECT_TRUE(rank.Close().ok());
  (*s)->Stop();
  EXPECT_FALSE(std::filesystem::exists(path));  // removed on stop
}

TEST(IngestSocketTest, BadPathsAndGroupsAreClearErrors) {
  TempDir dir;
  AgentCore core(Clock::Real(), {}, nullptr);
  const std::string file = dir.file("plain");
  std::ofstream(file) << "x";
  auto s = IngestServer::Create(file, "", &core);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.status().message(), HasSubstr("not a socket"));
  s = IngestServer::Create("/tmp/" + std::string(120, 'x'), "", &core);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("ingest.socket"));
  s = IngestServer::Create(dir.file("missing/a.sock"), "", &core);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.status().message(), HasSubstr("does not exist"));
  s = IngestServer::Create(dir.file("g.sock"), "no-such-group-pitstop", &core);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.status().message(), HasSubstr("no-such-group-pitstop"));
}

TEST(IngestSocketTest, SocketGetsTheConfiguredGroup) {
  TempDir dir;
  struct group* g = getgrgid(getegid());
  ASSERT_NE(g, nullptr);
  AgentCore core(Clock::Real(), {}, nullptr);
  auto s = IngestServer::Create(dir.file("g.sock"), g->gr_name, &core);
  ASSERT_TRUE(s.ok()) << s.status();
  struct stat st;
  ASSERT_EQ(stat(dir.file("g.sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_gid, g->gr_gid);
}

}  // namespace
}  // namespace pitstop::agent
