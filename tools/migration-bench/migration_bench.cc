// pitstop-migration-bench: the control plane of standby migration at scale
// (docs/migration.md, "Control-plane benchmark"). A real Controller and
// gRPC server on loopback with a SQLite file (synchronous=FULL), and one
// lightweight emulated agent per host: a real AgentLink stream that
// registers the job's ranks and answers every migration directive at once.
// No data plane: this measures the controller, the store and the streams.
//
// Each run migrates host node{i} to standby spare{i}: PREPARE to every
// member host, READY from each, SWITCH_AT, SWITCHED, COMMIT; it prints the
// per-phase times and the client-observed total (MigrateNode call to
// COMMITTED seen by a WatchMigrations stream).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "pitstop/logging.h"
#include "pitstop/v1/agent.grpc.pb.h"
#include "pitstop/v1/controller.grpc.pb.h"
#include "src/controller/api/controller_service.h"
#include "src/controller/controller.h"

namespace {

using namespace pitstop;

// One node's agent: registers, reports its ranks' communicator, answers
// directives (READY with a progress sequence number, SWITCHED).
class EmulatedAgent {
 public:
  EmulatedAgent(const std::string& target, v1::NodeRegistration reg,
                std::vector<v1::CommunicatorInfo> comms)
      : stub_(v1::AgentLink::NewStub(
            grpc::CreateChannel(target, grpc::InsecureChannelCredentials()))) {
    stream_ = stub_->Connect(&ctx_);
    v1::ConnectRequest hello;
    *hello.mutable_registration() = std::move(reg);
    for (auto& c : comms) *hello.add_communicators() = std::move(c);
    ok_ = stream_->Write(hello);
    reader_ = std::thread([this] { Read(); });
  }
  ~EmulatedAgent() {
    ctx_.TryCancel();
    reader_.join();
  }
  bool ok() const { return ok_; }

 private:
  void Read() {
    v1::ConnectResponse resp;
    uint64_t progress = 1000;
    while (stream_->Read(&resp)) {
      for (const v1::AgentCommand& c : resp.commands()) {
        if (!c.has_migration()) continue;
        const v1::MigrationDirective& d = c.migration();
        if (d.phase() != v1::MigrationDirective::PHASE_PREPARE &&
            d.phase() != v1::MigrationDirective::PHASE_SWITCH_AT) {
          continue;
        }
        v1::ConnectRequest batch;
        v1::MigrationAck* a = batch.add_migration_acks();
        a->set_migration_id(d.migration_id());
        a->set_epoch(d.epoch());
        a->set_phase(d.phase());
        a->set_ok(true);
        a->set_progress_seq(progress++);
        stream_->Write(batch);
      }
    }
  }

  std::unique_ptr<v1::AgentLink::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<
      grpc::ClientReaderWriter<v1::ConnectRequest, v1::ConnectResponse>>
      stream_;
  bool ok_ = false;
  std::thread reader_;
};

double Ms(uint64_t from, uint64_t to) { return (to - from) / 1e6; }

// The job's agents (one per `per_host` ranks, all in one communicator)
// and `runs` standbys, connected to `target`.
std::vector<std::unique_ptr<EmulatedAgent>> StartAgents(
    const std::string& target, int ranks, int per_host, int hosts, int runs) {
  std::vector<std::unique_ptr<EmulatedAgent>> agents;
  for (int h = 0; h < hosts + runs; ++h) {
    const bool standby = h >= hosts;
    v1::NodeRegistration reg;
    reg.set_host(standby ? absl::StrCat("spare", h - hosts)
                         : absl::StrCat("node", h));
    reg.set_agent_id(absl::StrCat("bench-", reg.host()));
    reg.set_standby(standby);
    reg.set_migration_data_plane("emulated");
    std::vector<v1::CommunicatorInfo> comms;
    for (int r = h * per_host;
         !standby && r < std::min(ranks, (h + 1) * per_host); ++r) {
      v1::CommunicatorInfo& c = comms.emplace_back();
      c.set_comm_hash(0xB16B00B5);
      c.set_comm_name("world");
      c.set_n_ranks(ranks);
      c.set_n_nodes(hosts);
      c.set_rank(r);
      for (int g = 0; g < ranks; ++g) c.add_global_ranks(g);
      c.set_host(reg.host());
      c.set_pid(10000 + r);
      c.set_job_id("bench");
      c.set_source(v1::CommunicatorInfo::SOURCE_INTERPOSER);
    }
    agents.push_back(
        std::make_unique<EmulatedAgent>(target, reg, std::move(comms)));
  }
  return agents;
}

// Until the controller knows every rank's host and every agent (at most
// a minute).
void WaitPlaced(controller::Controller* c, int ranks, int nodes) {
  for (int i = 0; i < 600; ++i) {
    auto comms = c->ingest().Communicators("bench");
    bool placed = !comms.empty() && comms[0].members_size() == ranks &&
                  c->Status().nodes_ready() == static_cast<uint32_t>(nodes);
    for (int k = 0; placed && k < comms[0].members_size(); ++k) {
      placed = !comms[0].members(k).host().empty();
    }
    if (placed) return;
    absl::SleepFor(absl::Milliseconds(100));
  }
}

// Per-phase times of the runs.
struct Times {
  std::vector<double> totals, prepares, switches, requests;
};

// One migration, node<run> to spare<run>, watched until it finishes; false
// (said why) when it did not commit.
bool MigrateOnce(v1::Controller::Stub* stub, int run, Times* t) {
  grpc::ClientContext wctx;
  v1::WatchMigrationsRequest wreq;
  wreq.set_job_id("bench");
  auto watch = stub->WatchMigrations(&wctx, wreq);
  v1::MigrateNodeRequest req;
  req.set_host(absl::StrCat("node", run));
  req.set_to(absl::StrCat("spare", run));
  req.set_who("bench");
  v1::MigrateNodeResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  const absl::Time t0 = absl::Now();
  grpc::Status s = stub->MigrateNode(&ctx, req, &resp);
  if (!s.ok()) {
    std::fprintf(stderr, "MigrateNode: %s\n", s.error_message().c_str());
    return false;
  }
  v1::WatchMigrationsResponse w;
  v1::Migration m = resp.migration();
  while (m.state() != v1::MIGRATION_STATE_COMMITTED &&
         m.state() != v1::MIGRATION_STATE_ABORTED && watch->Read(&w)) {
    if (w.migration().migration_id() == m.migration_id()) m = w.migration();
  }
  const double total = absl::ToDoubleMilliseconds(absl::Now() - t0);
  wctx.TryCancel();
  (void)watch->Finish();
  if (m.state() != v1::MIGRATION_STATE_COMMITTED) {
    std::fprintf(stderr, "migration %s: %s %s\n", m.migration_id().c_str(),
                 v1::MigrationState_Name(m.state()).c_str(),
                 m.abort_reason().c_str());
    return false;
  }
  t->requests.push_back(Ms(m.created_unix_ns(), m.prepare_unix_ns()));
  t->prepares.push_back(Ms(m.prepare_unix_ns(), m.ready_unix_ns()));
  t->switches.push_back(Ms(m.ready_unix_ns(), m.switched_unix_ns()));
  t->totals.push_back(total);
  std::printf("%-4d %-10s %12.1f %12.1f %12.1f %12.1f\n", run, "COMMITTED",
              t->requests.back(), t->prepares.back(), t->switches.back(),
              total);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 1024, per_host = 8, runs = 5;
  std::string dir = "/tmp";
  CLI::App app(
      "pitstop-migration-bench: PREPARE to COMMIT of standby migrations "
      "with emulated agents over real gRPC on loopback (no data plane); "
      "prints per-phase times per run and the median");
  app.add_option("--ranks", ranks, "ranks of the job")->capture_default_str();
  app.add_option("--ranks-per-host", per_host, "ranks per emulated agent")
      ->capture_default_str();
  app.add_option("--runs", runs, "migrations (each to a fresh standby)")
      ->capture_default_str();
  app.add_option("--dir", dir, "where the SQLite database goes")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const int hosts = (ranks + per_host - 1) / per_host;
  if (ranks < 2 || per_host < 1 || runs < 1 || runs > hosts) {
    std::fprintf(stderr,
                 "need ranks >= 2, ranks-per-host >= 1, 1 <= runs <= hosts\n");
    return 2;
  }
  LoggingOptions log;
  log.level = "warn";
  (void)SetupLogging(log);
  const std::filesystem::path db_dir =
      std::filesystem::path(dir) / absl::StrCat("pitstop-migbench-", getpid());
  std::filesystem::create_directories(db_dir);

  controller::Controller::Options o;
  o.db_path = (db_dir / "pitstop.db").string();
  auto core = controller::Controller::Create(o);
  if (!core.ok()) {
    std::fprintf(stderr, "%s\n", core.status().ToString().c_str());
    return 1;
  }
  (*core)->Start();
  auto server = controller::ControllerServer::Start(core->get(), "127.0.0.1:0");
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  const std::string target = absl::StrCat("127.0.0.1:", (*server)->port());
  const absl::Time t_setup = absl::Now();
  std::vector<std::unique_ptr<EmulatedAgent>> agents =
      StartAgents(target, ranks, per_host, hosts, runs);
  WaitPlaced(core->get(), ranks, hosts + runs);
  std::printf(
      "job: %d ranks on %d emulated agents (%d per host), %d standby; "
      "setup %.1f s\n",
      ranks, hosts, per_host, runs,
      absl::ToDoubleSeconds(absl::Now() - t_setup));
  auto stub = v1::Controller::NewStub(
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  Times t;
  std::printf("%-4s %-10s %12s %12s %12s %12s\n", "run", "state", "request_ms",
              "prepare_ms", "switch_ms", "total_ms");
  for (int run = 0; run < runs; ++run) {
    if (!MigrateOnce(stub.get(), run, &t)) return 1;
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf(
      "median: request %.1f ms, PREPARE->all READY %.1f ms, "
      "SWITCH_AT->all SWITCHED %.1f ms, MigrateNode->COMMITTED %.1f ms "
      "(%d members, %d runs)\n",
      median(t.requests), median(t.prepares), median(t.switches),
      median(t.totals), hosts + 1, runs);
  agents.clear();
  (*server)->Shutdown(absl::Seconds(1));
  (*core)->Stop();
  core->reset();
  std::filesystem::remove_all(db_dir);
  return 0;
}
