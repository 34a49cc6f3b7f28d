// Issue #11: ListNodes / ListCommunicators replies stay below the message
// size limit however large the cluster (docs/reliability.md). Before
// paging, 1,200 nodes with 64 NICs each made one ~10 MB ListNodes reply
// that every client (default 4 MiB receive limit) refused: `pitstopctl
// nodes` failed with RESOURCE_EXHAUSTED.
#include "src/controller/api/paging.h"

#include <iostream>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pitstop/v1/controller.grpc.pb.h"
#include "src/controller/api/controller_service.h"
#include "src/controller/controller.h"
#include "tests/controller/subprocess.h"
#include "tests/controller/test_agent.h"

namespace pitstop::controller {
namespace {

constexpr int kHosts = 1200;

class NullSink : public CommandSink {
 public:
  void Send(const v1::ConnectResponse&) override {}
};

class PagingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Controller::Options o;
    o.db_path = ":memory:";
    auto core = Controller::Create(o);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
    auto server = ControllerServer::Start(core_.get(), "127.0.0.1:0");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    target_ = absl::StrCat("127.0.0.1:", server_->port());
    stub_ = v1::Controller::NewStub(testing::TestChannel(target_));
    // ~8 KB per node: 1,200 of them are ~10 MB in one list.
    for (int h = 0; h < kHosts; ++h) {
      v1::NodeRegistration reg;
      reg.set_host(absl::StrCat("node-", h));
      reg.set_agent_id(absl::StrCat("agent-", h));
      for (int i = 0; i < 64; ++i) {
        v1::NicInfo* n = reg.add_nics();
        n->set_name(absl::StrCat("veth", i, std::string(100, 'x')));
        n->set_state("up");
      }
      ASSERT_TRUE(core_->AgentConnected(reg, &sink_).ok());
    }
  }
  void TearDown() override {
    server_.reset();
    core_.reset();
  }

  NullSink sink_;
  std::unique_ptr<Controller> core_;
  std::unique_ptr<ControllerServer> server_;
  std::string target_;
  std::unique_ptr<v1::Controller::Stub> stub_;
};

TEST_F(PagingTest, ListNodesPagesStayBelowTheLimitAndCoverEveryNode) {
  v1::ListNodesRequest req;
  std::set<std::string> hosts;
  int pages = 0;
  size_t total = 0;
  std::string last;
  do {
    grpc::ClientContext ctx;
    v1::ListNodesResponse resp;
    const grpc::Status st = stub_->ListNodes(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
    EXPECT_LE(resp.ByteSizeLong(), kMaxPageBytes);
    total += resp.ByteSizeLong();
    ASSERT_GT(resp.nodes_size(), 0);
    for (const v1::Node& n : resp.nodes()) {
      EXPECT_GT(n.host(), last);  // ordered, no repeats across pages
      last = n.host();
      hosts.insert(n.host());
    }
    req.set_page_token(resp.next_page_token());
    ++pages;
  } while (!req.page_token().empty() && pages < 1000);
  std::cout << kHosts << " nodes: " << total << " bytes in " << pages
            << " pages\n";
  EXPECT_EQ(hosts.size(), static_cast<size_t>(kHosts));
  // More than one unpaged reply could carry (4 MiB), in 2 MiB pages.
  EXPECT_GT(total, size_t{4} << 20);
  EXPECT_GE(pages, 3);

  // page_size is honoured; a token past the end is an empty last page.
  grpc::ClientContext c1;
  v1::ListNodesRequest small;
  small.set_page_size(7);
  v1::ListNodesResponse r1;
  ASSERT_TRUE(stub_->ListNodes(&c1, small, &r1).ok());
  EXPECT_EQ(r1.nodes_size(), 7);
  EXPECT_EQ(r1.next_page_token(), r1.nodes(6).host());
  grpc::ClientContext c2;
  small.set_page_token("zzz");
  v1::ListNodesResponse r2;
  ASSERT_TRUE(stub_->ListNodes(&c2, small, &r2).ok());
  EXPECT_EQ(r2.nodes_size(), 0);
  EXPECT_TRUE(r2.next_page_token().empty());
}

TEST_F(PagingTest, PitstopctlNodesFollowsPages) {
  std::string out;
  const int rc = testing::RunProcess(
      {PITSTOP_PITSTOPCTL_BIN, "--controller", target_, "-o", "json", "nodes"},
      ::testing::TempDir() + "/ctl.out", &out);
  ASSERT_EQ(rc, 0) << out.substr(0, 2000);
  size_t n = 0;
  for (size_t at = out.find("\"agent_id\""); at != std::string::npos;
       at = out.find("\"agent_id\"", at + 1)) {
    ++n;
  }
  EXPECT_EQ(n, static_cast<size_t>(kHosts));
}

TEST(PagingFunctionsTest, CommunicatorsPagedByHashAndHugeOnesTrimmed) {
  std::vector<v1::Communicator> comms;
  for (uint64_t h = 1; h <= 30; ++h) {
    v1::Communicator c;
    c.set_comm_hash(h * 0x1000000000ull);
    c.set_n_ranks(1 << 20);
    // One communicator of 200,000 reporting ranks: ~6 MB on its own.
    const int members = h == 7 ? 200'000 : 100;
    for (int r = 0; r < members; ++r) {
      v1::MemberLocation* m = c.add_members();
      m->set_comm_rank(r);
      m->set_host(absl::StrCat("node-", r / 8));
    }
    comms.push_back(c);
  }
  v1::ListCommunicatorsRequest req;
  std::set<uint64_t> seen;
  int trimmed = 0;
  for (int pages = 0; pages < 100; ++pages) {
    v1::ListCommunicatorsResponse resp;
    ASSERT_TRUE(PageCommunicators(comms, req, &resp).ok());
    EXPECT_LE(resp.ByteSizeLong(), kMaxPageBytes);
    for (const v1::Communicator& c : resp.communicators()) {
      seen.insert(c.comm_hash());
      if (c.members_omitted() > 0) {
        ++trimmed;
        EXPECT_EQ(c.members_size() + c.members_omitted(), 200'000);
      }
    }
    req.set_page_token(resp.next_page_token());
    if (req.page_token().empty()) break;
  }
  EXPECT_EQ(seen.size(), 30u);
  EXPECT_EQ(trimmed, 1);

  req.set_page_token("not-a-token");
  v1::ListCommunicatorsResponse bad;
  const absl::Status st = PageCommunicators(comms, req, &bad);
  EXPECT_TRUE(absl::IsInvalidArgument(st));
  EXPECT_THAT(st.message(), ::testing::HasSubstr("page_token"));
}

}  // namespace
}  // namespace pitstop::controller
