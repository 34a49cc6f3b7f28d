// Trust (issue #15): every RPC of every service the controller serves is
// called over real mutual TLS on loopback without credentials, with a role
// too weak for it and (agent RPCs) with another host's identity; all must be
// refused with PERMISSION_DENIED, and the right identity must get through.
// The RPCs come from the protobuf descriptors, so a new RPC without an entry
// in MethodRoles() fails here. Certificates are made by
// tools/gen-dev-certs.sh into a temporary directory.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "pitstop/tls.h"
#include "pitstop/v1/agent.grpc.pb.h"
#include "pitstop/v1/controller.grpc.pb.h"
#include "pitstop/v1/telemetry.grpc.pb.h"
#include "pitstop/v1/trainer.grpc.pb.h"
#include "src/controller/api/authorizer.h"
#include "src/controller/api/controller_service.h"
#include "src/controller/controller.h"

namespace pitstop::controller {
namespace {

namespace fs = std::filesystem;

// Services served on the controller's port (role-checked here) and those
// served on the agent's Unix sockets (peer credentials, see
// tests/agent/peer_cred_test.cc). Every service in the descriptors must be
// in one of the two.
const std::set<std::string> kControllerServices = {"pitstop.v1.Controller",
                                                   "pitstop.v1.AgentLink"};
const std::set<std::string> kAgentSocketServices = {
    "pitstop.v1.Telemetry", "pitstop.v1.TrainerService"};

struct Identity {
  std::string label;  // "operator cert", "viewer token", ...
  Role role;          // what it is meant to hold
  std::string cert;   // file stem in the cert dir ("" = no certificate)
  std::string token;  // "" = none
};

struct MethodInfo {
  std::string full;  // "/pitstop.v1.Controller/GetStatus"
  std::string service;
  bool client_stream = false;
  bool server_stream = false;
};

// Roles allowed to call a method needing `needed`, written out here rather
// than asking RoleSatisfies(): the test states the policy itself.
bool Allowed(Role held, Role needed) {
  switch (needed) {
    case Role::kViewer:
      return held == Role::kViewer || held == Role::kOperator ||
             held == Role::kScheduler;
    case Role::kOperator:
      return held == Role::kOperator || held == Role::kScheduler;
    case Role::kScheduler:
      return held == Role::kScheduler;
    case Role::kAgent:
      return held == Role::kAgent;
    case Role::kNone:
      break;
  }
  return false;
}

std::vector<MethodInfo> AllMethods(std::set<std::string>* services) {
  // Every proto file of the API that declares services (a message of each
  // links its descriptor in). A new proto file with a service belongs here.
  std::vector<MethodInfo> out;
  for (const google::protobuf::FileDescriptor* f :
       {v1::GetStatusRequest::descriptor()->file(),
        v1::ConnectRequest::descriptor()->file(),
        v1::StreamTelemetryRequest::descriptor()->file(),
        v1::ReportStepsRequest::descriptor()->file()}) {
    for (int s = 0; s < f->service_count(); ++s) {
      const google::protobuf::ServiceDescriptor* sd = f->service(s);
      services->insert(sd->full_name());
      for (int m = 0; m < sd->method_count(); ++m) {
        const google::protobuf::MethodDescriptor* md = sd->method(m);
        out.push_back(MethodInfo{
            absl::StrCat("/", sd->full_name(), "/", md->name()),
            sd->full_name(), md->client_streaming(), md->server_streaming()});
      }
    }
  }
  return out;
}

// A status a handler itself returns: OK or an application error about the
// request or the controller's state. The transport's and security's codes
// (UNAVAILABLE, DEADLINE_EXCEEDED, UNAUTHENTICATED, PERMISSION_DENIED,
// CANCELLED, UNKNOWN, INTERNAL) are not.
bool IsHandlerAnswer(grpc::StatusCode code) {
  switch (code) {
    case grpc::OK:
    case grpc::INVALID_ARGUMENT:
    case grpc::NOT_FOUND:
    case grpc::ALREADY_EXISTS:
    case grpc::FAILED_PRECONDITION:
    case grpc::OUT_OF_RANGE:
    case grpc::RESOURCE_EXHAUSTED:
      return true;
    default:
      return false;
  }
}

// One call of any method with one request message; returns its status.
// A stream the server keeps open for `open_after` counts as accepted (OK).
grpc::Status CallRaw(const std::shared_ptr<grpc::Channel>& channel,
                     const Identity& who, const MethodInfo& m,
                     const std::string& request, absl::Duration open_after) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  // Generous: a refusal answers at once, so the deadline only bounds a
  // failure; under ASan at load 15 a call has been seen to take 20 s.
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(90));
  if (!who.token.empty()) {
    ctx.AddMetadata("authorization", "Bearer " + who.token);
  }
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(&ctx, m.full, &cq);
  void* tag = nullptr;
  bool ok = false;
  auto step = [&](void* t) {
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(tag, t);
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  step(reinterpret_cast<void*>(1));
  grpc::Slice slice(request);
  grpc::ByteBuffer buf(&slice, 1);
  call->Write(buf, reinterpret_cast<void*>(2));
  step(reinterpret_cast<void*>(2));
  call->WritesDone(reinterpret_cast<void*>(3));
  step(reinterpret_cast<void*>(3));
  grpc::ByteBuffer resp;
  call->Read(&resp, reinterpret_cast<void*>(4));
  // Unary calls and refused streams answer at once; an accepted watch
  // stays open with nothing to send.
  const auto deadline =
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(absl::ToInt64Milliseconds(open_after));
  bool still_open = false;
  if (cq.AsyncNext(&tag, &ok, deadline) == grpc::CompletionQueue::TIMEOUT) {
    still_open = true;
    ctx.TryCancel();
    EXPECT_TRUE(cq.Next(&tag, &ok));
  }
  // Drain further messages until the stream ends.
  while (ok && !still_open) {
    call->Read(&resp, reinterpret_cast<void*>(4));
    EXPECT_TRUE(cq.Next(&tag, &ok));
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  step(reinterpret_cast<void*>(5));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return still_open ? grpc::Status::OK : status;
}

class AuthTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string((fs::temp_directory_path() /
                            absl::StrCat("pitstop-auth-test-", getpid()))
                               .string());
    const std::string cmd =
        absl::StrCat(PITSTOP_GEN_CERTS, " ", *dir_,
                     " --hosts node1,node2 --days 2 >/dev/null");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
  }

  void SetUp() override {
    ASSERT_TRUE(fs::exists(Path("ca.pem"))) << "certificates not generated";
    // Tokens: the script's, plus an agent token for node1.
    std::ifstream in(Path("tokens"));
    std::ofstream out(Path("tokens-test"), std::ios::trunc);
    std::string line;
    while (std::getline(in, line)) {
      std::vector<std::string> f = absl::StrSplit(line, ' ');
      if (f.size() == 3) tokens_[f[1]] = f[0];
      out << line << "\n";
    }
    ASSERT_EQ(tokens_.size(), 3u);
    out << "agenttoken-node1-0123456789 agent node1\n";
    out.close();
    Controller::Options o;
    o.db_path = ":memory:";
    auto core = Controller::Create(o);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
    auto auth = Authorizer::Create({true, Path("tokens-test")});
    ASSERT_TRUE(auth.ok()) << auth.status();
    auth_ = std::move(*auth);
    auto creds = TlsServerCredentials(TlsFiles{
        Path("ca.pem"), Path("controller.pem"), Path("controller.key")});
    ASSERT_TRUE(creds.ok()) << creds.status();
    auto server = ControllerServer::Start(core_.get(), "127.0.0.1:0",
                                          ServerSecurity{*creds, auth_.get()});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    target_ = absl::StrCat("127.0.0.1:", server_->port());
    // The same core served without security: what each handler answers a
    // request when nothing stands in front of it.
    auto plain = ControllerServer::Start(core_.get(), "127.0.0.1:0");
    ASSERT_TRUE(plain.ok()) << plain.status();
    plain_server_ = std::move(*plain);
    plain_channel_ =
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", plain_server_->port()),
                            grpc::InsecureChannelCredentials());
  }
  void TearDown() override {
    plain_server_.reset();
    server_.reset();
    core_.reset();
  }

  static std::string Path(const std::string& name) {
    return (fs::path(*dir_) / name).string();
  }

  std::shared_ptr<grpc::Channel> ChannelFor(const Identity& who) {
    TlsFiles tls{Path("ca.pem"), "", ""};
    if (!who.cert.empty()) {
      tls.cert = Path(who.cert + ".pem");
      tls.key = Path(who.cert + ".key");
    }
    auto creds = TlsClientCredentials(tls);
    EXPECT_TRUE(creds.ok()) << creds.status();
    grpc::ChannelArguments args;
    // One connection per identity: gRPC would share subchannels of equal
    // targets otherwise (the credentials differ, but be explicit).
    args.SetString("pitstop.test.identity", who.label);
    return grpc::CreateCustomChannel(target_, *creds, args);
  }

  // Every identity the test uses, with the role it should hold.
  std::vector<Identity> Identities() {
    return {
        {"no credentials", Role::kNone, "", ""},
        {"viewer cert", Role::kViewer, "viewer", ""},
        {"operator cert", Role::kOperator, "operator", ""},
        {"scheduler cert", Role::kScheduler, "scheduler", ""},
        {"agent node1 cert", Role::kAgent, "agent-node1", ""},
        {"viewer token", Role::kViewer, "", tokens_["viewer"]},
        {"operator token", Role::kOperator, "", tokens_["operator"]},
        {"scheduler token", Role::kScheduler, "", tokens_["scheduler"]},
        {"agent node1 token", Role::kAgent, "", "agenttoken-node1-0123456789"},
        {"unknown token", Role::kNone, "", "not-a-token-0123456789abcdef"},
    };
  }

  static std::string Registration(const std::string& host) {
    v1::ConnectRequest req;
    req.mutable_registration()->set_host(host);
    req.mutable_registration()->set_agent_id(absl::StrCat("agent-", host));
    return req.SerializeAsString();
  }

  static std::string* dir_;
  std::map<std::string, std::string> tokens_;  // role -> token
  std::unique_ptr<Controller> core_;
  std::unique_ptr<Authorizer> auth_;
  std::unique_ptr<ControllerServer> server_;
  std::string target_;
  std::unique_ptr<ControllerServer> plain_server_;
  std::shared_ptr<grpc::Channel> plain_channel_;
};

std::string* AuthTest::dir_ = nullptr;

TEST_F(AuthTest, EveryServiceIsClassified) {
  std::set<std::string> services;
  const std::vector<MethodInfo> methods = AllMethods(&services);
  ASSERT_FALSE(methods.empty());
  // A new .proto file declaring a service must be added to AllMethods().
  for (const auto& entry : fs::directory_iterator(PITSTOP_PROTO_DIR)) {
    std::ifstream in(entry.path());
    const std::string text(std::istreambuf_iterator<char>(in), {});
    if (!absl::StrContains(text, "\nservice ")) continue;
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(name == "controller.proto" || name == "agent.proto" ||
                name == "telemetry.proto" || name == "trainer.proto")
        << name << " declares a service that AllMethods() does not read";
  }
  for (const std::string& s : services) {
    EXPECT_TRUE(kControllerServices.count(s) || kAgentSocketServices.count(s))
        << s << " is a new service: decide where it is served and how it "
        << "is authorized";
  }
  for (const MethodInfo& m : methods) {
    if (!kControllerServices.count(m.service)) continue;
    auto it = MethodRoles().find(m.full);
    ASSERT_NE(it, MethodRoles().end())
        << m.full << " has no entry in MethodRoles()";
    // Anything that is not a read or a watch changes state: never viewer.
    const std::string name = m.full.substr(m.full.rfind('/') + 1);
    if (!absl::StartsWith(name, "Get") && !absl::StartsWith(name, "List") &&
        !absl::StartsWith(name, "Watch")) {
      EXPECT_NE(it->second, Role::kViewer) << m.full << " changes state";
    }
  }
  // And no stale entries.
  std::set<std::string> served;
  for (const MethodInfo& m : methods) served.insert(m.full);
  for (const auto& [method, role] : MethodRoles()) {
    EXPECT_TRUE(served.count(method)) << method << " is not in any proto";
  }
}

// The table docs/reliability.md shows: per service, calls refused.
TEST_F(AuthTest, EveryRpcRefusedWithoutTheRightIdentity) {
  std::set<std::string> services;
  const std::vector<MethodInfo> methods = AllMethods(&services);
  struct Counts {
    int methods = 0, no_creds = 0, no_creds_refused = 0, wrong_role = 0,
        wrong_role_refused = 0, other_host = 0, other_host_refused = 0,
        allowed = 0, allowed_passed = 0;
  };
  std::map<std::string, Counts> counts;
  const std::vector<Identity> ids = Identities();
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels;
  for (const Identity& who : ids) {
    channels[who.label] = ChannelFor(who);
    // The TLS handshake happens here, once per identity, not inside the
    // first call's deadline.
    EXPECT_TRUE(channels[who.label]->WaitForConnected(
        std::chrono::system_clock::now() + std::chrono::seconds(120)))
        << who.label;
  }
  for (const MethodInfo& m : methods) {
    if (!kControllerServices.count(m.service)) continue;
    auto it = MethodRoles().find(m.full);
    ASSERT_NE(it, MethodRoles().end()) << m.full;
    const Role needed = it->second;
    Counts& c = counts[m.service];
    ++c.methods;
    // Agents register as the host their identity names (node1).
    const std::string request =
        needed == Role::kAgent ? Registration("node1") : std::string();
    // The handler's own answer to this request, from the unsecured server.
    // It must be the handler's (OK or its application error), never a
    // transport or security failure.
    const grpc::Status handler =
        CallRaw(plain_channel_, Identity{}, m, request, absl::Seconds(1));
    EXPECT_TRUE(IsHandlerAnswer(handler.error_code()))
        << m.full << " without security: " << handler.error_code() << " "
        << handler.error_message();
    for (const Identity& who : ids) {
      const bool allowed = Allowed(who.role, needed);
      const grpc::Status s =
          CallRaw(channels[who.label], who, m, request,
                  allowed ? absl::Seconds(1) : absl::Seconds(15));
      const bool refused = s.error_code() == grpc::PERMISSION_DENIED;
      if (allowed) {
        // Allowed means the call reached the handler and got its answer:
        // UNAVAILABLE, DEADLINE_EXCEEDED or UNAUTHENTICATED would mean it
        // never got there.
        const bool passed = s.error_code() == handler.error_code();
        ++c.allowed;
        c.allowed_passed += passed;
        EXPECT_TRUE(passed)
            << m.full << " as " << who.label << ": " << s.error_code() << " "
            << s.error_message() << "; the handler answers "
            << handler.error_code() << " " << handler.error_message();
      } else if (who.role == Role::kNone) {
        ++c.no_creds;
        c.no_creds_refused += refused;
        EXPECT_TRUE(refused) << m.full << " as " << who.label << ": "
                             << s.error_code() << " " << s.error_message();
      } else {
        ++c.wrong_role;
        c.wrong_role_refused += refused;
        EXPECT_TRUE(refused) << m.full << " as " << who.label << ": "
                             << s.error_code() << " " << s.error_message();
      }
    }
    if (needed == Role::kAgent) {
      // node1's certificate and token speaking for node2.
      for (const Identity& who : ids) {
        if (who.role != Role::kAgent) continue;
        const grpc::Status s =
            CallRaw(channels[who.label], who, m, Registration("node2"),
                    absl::Seconds(15));
        ++c.other_host;
        c.other_host_refused += s.error_code() == grpc::PERMISSION_DENIED;
        EXPECT_EQ(s.error_code(), grpc::PERMISSION_DENIED)
            << who.label << " registering node2: " << s.error_message();
        EXPECT_TRUE(absl::StrContains(s.error_message(), "node2"))
            << s.error_message();
      }
    }
  }
  std::printf(
      "| service | RPCs | no credentials: refused | wrong role: refused | "
      "other host: refused | right role: passed |\n");
  for (const auto& [service, c] : counts) {
    std::printf("| %s | %d | %d / %d | %d / %d | %d / %d | %d / %d |\n",
                service.c_str(), c.methods, c.no_creds_refused, c.no_creds,
                c.wrong_role_refused, c.wrong_role, c.other_host_refused,
                c.other_host, c.allowed_passed, c.allowed);
  }
  EXPECT_EQ(counts.size(), kControllerServices.size());
  EXPECT_GT(auth_->denied(), 0u);
}

TEST_F(AuthTest, PlaintextClientCannotTalkToTlsServer) {
  auto channel =
      grpc::CreateChannel(target_, grpc::InsecureChannelCredentials());
  auto stub = v1::Controller::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::GetStatusResponse resp;
  const grpc::Status s = stub->GetStatus(&ctx, {}, &resp);
  EXPECT_EQ(s.error_code(), grpc::UNAVAILABLE) << s.error_message();
}

TEST_F(AuthTest, TokensReloadKeepsOldOnError) {
  const std::string path = Path("tokens-reload");
  {
    std::ofstream out(path);
    out << "# comment\nabcdefghijklmnop0123 operator alice\n";
  }
  auto auth = Authorizer::Create({true, path});
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_EQ((*auth)->tokens(), 1u);
  {
    std::ofstream out(path);
    out << "abcdefghijklmnop0123 operator alice\nshort viewer bob\n";
  }
  absl::Status s = (*auth)->Reload();
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_TRUE(absl::StrContains(s.message(), path + ":2:")) << s;
  EXPECT_EQ((*auth)->tokens(), 1u);
  {
    std::ofstream out(path);
    out << "abcdefghijklmnop0123 operator alice\n"
           "qrstuvwxyzabcdef4567 king bob\n";
  }
  s = (*auth)->Reload();
  EXPECT_TRUE(absl::StrContains(s.message(), "unknown role 'king'")) << s;
}

TEST(TrustTest, LoopbackAddresses) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:7070"));
  EXPECT_TRUE(IsLoopbackAddress("127.3.4.5:0"));
  EXPECT_TRUE(IsLoopbackAddress("localhost:7070"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:7070"));
  EXPECT_TRUE(IsLoopbackAddress("unix:/run/x.sock"));
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0:7070"));
  EXPECT_FALSE(IsLoopbackAddress("[::]:7070"));
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.5:7070"));
  EXPECT_FALSE(IsLoopbackAddress("ctl.example.org:7070"));
}

}  // namespace
}  // namespace pitstop::controller
