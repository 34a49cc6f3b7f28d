#include "tools/pitstopctl/commands.h"

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "pitstop/grpc_util.h"
#include "pitstop/tls.h"
#include "pitstop/v1/controller.grpc.pb.h"
#include "tools/pitstopctl/ctl_client.h"
#include "tools/pitstopctl/ctl_format.h"
#include "tools/pitstopctl/exit_codes.h"

namespace pitstop::ctl {
namespace {

std::string Short(const std::string& name, const std::string& prefix) {
  return ShortEnum(name, prefix);
}

void PrintNode(const v1::Node& n, Table* t) {
  std::vector<std::string> nics;
  for (const auto& nic : n.registration().nics()) nics.push_back(nic.name());
  t->AddRow(
      {n.host(), Short(v1::NodeState_Name(n.state()), "NODE_STATE_"),
       n.agent_connected() ? "yes" : "no", absl::StrCat(n.connected_ranks()),
       absl::StrCat(n.registration().gpus_size()),
       nics.empty() ? "-" : absl::StrJoin(nics, ","),
       Age(n.last_seen_unix_ns()), absl::StrCat(n.records_lost_in_agent()),
       n.drain_reason().empty() ? "-" : n.drain_reason()});
}

// `pitstopctl nodes HOST`: one node, field by field.
void PrintNodeDetail(const v1::Node& n) {
  Table t({"FIELD", "VALUE"});
  t.AddRow({"host", n.host()});
  t.AddRow({"state", Short(v1::NodeState_Name(n.state()), "NODE_STATE_")});
  t.AddRow({"agent", n.agent_connected() ? "connected" : "not connected"});
  t.AddRow({"agent id", n.registration().agent_id()});
  t.AddRow({"agent version", n.registration().agent_version()});
  t.AddRow({"last seen", Age(n.last_seen_unix_ns())});
  t.AddRow({"connected ranks", absl::StrCat(n.connected_ranks())});
  t.AddRow({"gpus", absl::StrCat(n.registration().gpus_size())});
  std::vector<std::string> nics;
  for (const auto& nic : n.registration().nics()) nics.push_back(nic.name());
  t.AddRow({"nics", nics.empty() ? "-" : absl::StrJoin(nics, ",")});
  t.AddRow({"records sent by ranks", absl::StrCat(n.records_sent_by_ranks())});
  t.AddRow({"records received", absl::StrCat(n.records_received())});
  t.AddRow({"records lost in agent (killed)",
            absl::StrCat(n.records_lost_in_agent())});
  t.AddRow(
      {"summaries undelivered (agent stopped)", absl::StrCat(n.undelivered())});
  t.AddRow({"records dropped in ranks", absl::StrCat(n.plugin_dropped())});
  t.AddRow({"commands sent / acked / re-sent / dropped / unacked",
            absl::StrCat(n.commands_sent(), " / ", n.commands_acked(), " / ",
                         n.commands_resent(), " / ", n.commands_dropped(),
                         " / ", n.commands_unacked())});
  t.AddRow({"drain reason", n.drain_reason().empty() ? "-" : n.drain_reason()});
  t.Print(std::cout);
}

void AddStatus(CLI::App* app, GlobalOptions* g, int* rc) {
  app->add_subcommand("status", "controller health and counts")
      ->callback([g, rc] {
        if (SplitControllerList(g->controller).size() > 1) {
          *rc = PrintHaStatus(*g);
          return;
        }
        v1::GetStatusResponse r;
        if ((*rc = Call(*g, &v1::Controller::Stub::GetStatus,
                        v1::GetStatusRequest(), &r))) {
          return;
        }
        if (g->output == "json") {
          std::cout << ToJson(r.status()) << "\n";
          return;
        }
        const v1::ControllerStatus& s = r.status();
        Table t({"FIELD", "VALUE"});
        t.AddRow({"controller", g->controller});
        t.AddRow({"version", s.version()});
        t.AddRow({"started", Age(s.start_unix_ns())});
        t.AddRow({"nodes ready/total",
                  absl::StrCat(s.nodes_ready(), "/", s.nodes_total())});
        t.AddRow({"jobs", absl::StrCat(s.jobs())});
        t.AddRow({"communicators", absl::StrCat(s.communicators())});
        t.AddRow({"collectives joined", absl::StrCat(s.collectives_joined())});
        t.AddRow({"open faults", absl::StrCat(s.open_faults())});
        t.AddRow({"last detection cycle",
                  absl::StrFormat("%.3f ms", s.last_detection_cycle_ms())});
        t.AddRow({"database", s.database_path()});
        t.AddRow({"role", Short(v1::ControllerRole_Name(s.role()),
                                "CONTROLLER_ROLE_")});
        if (!s.leader().empty()) t.AddRow({"leader", s.leader()});
        t.Print(std::cout);
      });
}

void AddNodes(CLI::App* app, GlobalOptions* g, int* rc) {
  auto* nodes =
      app->add_subcommand("nodes",
                          "nodes (agents) known to the controller; LOST: "
                          "telemetry records an agent of the node read and "
                          "never delivered (it was killed); with HOST, one "
                          "node in detail");
  static std::string host;
  nodes->add_option("HOST", host, "show this node in detail");
  nodes->callback([g, rc] {
    if (!host.empty()) {
      v1::GetNodeRequest req;
      req.set_host(host);
      v1::GetNodeResponse r;
      if ((*rc = Call(*g, &v1::Controller::Stub::GetNode, req, &r))) return;
      if (g->output == "json") {
        std::cout << ToJson(r.node()) << "\n";
        return;
      }
      PrintNodeDetail(r.node());
      return;
    }
    // Every page (each reply stays under 2 MiB), as one list.
    v1::ListNodesResponse r;
    v1::ListNodesRequest req;
    do {
      v1::ListNodesResponse page;
      if ((*rc = Call(*g, &v1::Controller::Stub::ListNodes, req, &page))) {
        return;
      }
      for (v1::Node& n : *page.mutable_nodes()) *r.add_nodes() = std::move(n);
      req.set_page_token(page.next_page_token());
    } while (!req.page_token().empty());
    if (g->output == "json") {
      std::cout << ToJson(r) << "\n";
      return;
    }
    Table t({"HOST", "STATE", "AGENT", "RANKS", "GPUS", "NICS", "LAST SEEN",
             "LOST", "DRAIN REASON"});
    for (const v1::Node& n : r.nodes()) PrintNode(n, &t);
    t.Print(std::cout);
  });
}

void AddJobs(CLI::App* app, GlobalOptions* g, int* rc) {
  app->add_subcommand("jobs", "training jobs seen in telemetry")
      ->callback([g, rc] {
        v1::ListJobsResponse r;
        if ((*rc = Call(*g, &v1::Controller::Stub::ListJobs,
                        v1::ListJobsRequest(), &r))) {
          return;
        }
        if (g->output == "json") {
          std::cout << ToJson(r) << "\n";
          return;
        }
        Table t(
            {"JOB", "RANKS", "HOSTS", "COMMS", "OPEN FAULTS", "MODE", "SYNC"});
        for (const v1::Job& j : r.jobs()) {
          t.AddRow(
              {j.job_id().empty() ? "(none)" : j.job_id(),
               absl::StrCat(j.n_ranks()), absl::StrCat(j.hosts_size()),
               absl::StrCat(j.comm_hashes_size()),
               absl::StrCat(j.open_faults()),
               Short(v1::PolicyMode_Name(j.policy().mode()), "POLICY_MODE_"),
               SyncSummary(j)});
        }
        t.Print(std::cout);
      });
  auto* comms = app->add_subcommand("comms", "communicators and members");
  static std::string job;
  comms->add_option("--job", job, "only this job's communicators");
  comms->callback([g, rc] {
    v1::ListCommunicatorsRequest req;
    req.set_job_id(job);
    v1::ListCommunicatorsResponse r;
    do {
      v1::ListCommunicatorsResponse page;
      if ((*rc = Call(*g, &v1::Controller::Stub::ListCommunicators, req,
                      &page))) {
        return;
      }
      for (v1::Communicator& c : *page.mutable_communicators()) {
        *r.add_communicators() = std::move(c);
      }
      req.set_page_token(page.next_page_token());
    } while (!req.page_token().empty());
    if (g->output == "json") {
      std::cout << ToJson(r) << "\n";
      return;
    }
    Table t({"COMM", "NAME", "JOB", "RANKS", "JOINED", "LAST SEQ"});
    for (const v1::Communicator& c : r.communicators()) {
      t.AddRow({absl::StrFormat("%x", c.comm_hash()), c.comm_name(), c.job_id(),
                absl::StrCat(c.n_ranks()), absl::StrCat(c.collectives_joined()),
                absl::StrCat(c.last_completed_seq())});
    }
    t.Print(std::cout);
  });
}

}  // namespace

void AddCommands(CLI::App* app, GlobalOptions* g, int* exit_code) {
  AddStatus(app, g, exit_code);
  AddNodes(app, g, exit_code);
  AddJobs(app, g, exit_code);
  AddFaultCommands(app, g, exit_code);
  AddNodeActions(app, g, exit_code);
  AddSyncCommands(app, g, exit_code);
  AddLoraCommands(app, g, exit_code);
  AddMigrateCommands(app, g, exit_code);
  AddActionsCommand(app, g, exit_code);
  AddPlanCommands(app, g, exit_code);
}

int ExitCodeFor(const grpc::Status& s) {
  switch (s.error_code()) {
    case grpc::StatusCode::OK:
      return kExitOk;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return kExitUnreachable;
    case grpc::StatusCode::NOT_FOUND:
      return kExitNotFound;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::PERMISSION_DENIED:
      return kExitRejected;
    default:
      return kExitError;
  }
}

void PrintError(const GlobalOptions& g, const grpc::Status& s) {
  std::cerr << "pitstopctl: " << g.controller << ": "
            << (ExitCodeFor(s) == kExitUnreachable ? "controller unreachable: "
                                                   : "")
            << s.error_message() << "\n";
}

std::shared_ptr<grpc::Channel> CliChannel(const GlobalOptions& g) {
  const std::vector<std::string> list = SplitControllerList(g.controller);
  return CliChannel(g, list.empty() ? g.controller : list[0]);
}

std::shared_ptr<grpc::Channel> CliChannel(const GlobalOptions& g,
                                          const std::string& target) {
  const TlsFiles tls{g.ca, g.cert, g.key};
  if (!tls.enabled()) {
    return grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  }
  if (tls.cert.empty() != tls.key.empty()) {
    std::cerr << "pitstopctl: --cert and --key go together\n";
    std::exit(kExitUsage);
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds =
      TlsClientCredentials(tls);
  if (!creds.ok()) {
    // "tls.ca: ..." -> "--ca: ...".
    std::string msg(creds.status().message());
    if (msg.rfind("tls.", 0) == 0) msg = "--" + msg.substr(4);
    std::cerr << "pitstopctl: " << msg << "\n";
    std::exit(kExitUsage);
  }
  return grpc::CreateChannel(target, *creds);
}

void AddAuth(const GlobalOptions& g, grpc::ClientContext* ctx) {
  if (!g.token.empty()) ctx->AddMetadata("authorization", "Bearer " + g.token);
}

std::string DefaultWho() {
  const char* user = std::getenv("USER");
  return user && *user ? user : "pitstopctl";
}

}  // namespace pitstop::ctl
