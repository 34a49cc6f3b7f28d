// pitstopctl: faults [--watch], fault show, ack, resolve, drain, uncordon,
// policy get/set.
#include <CLI/CLI.hpp>
#include <chrono>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/pitstopctl/commands.h"
#include "tools/pitstopctl/ctl_client.h"
#include "tools/pitstopctl/ctl_format.h"

namespace pitstop::ctl {
namespace {

struct FaultArgs {
  std::string job;
  bool all = false;
  uint32_t limit = 0;
  bool watch = false;
  bool fail_if_any = false;
  std::string id;
  std::string who;
  std::string note;
  std::string host;
  std::string reason;
};

FaultArgs& Args() {
  static FaultArgs args;
  return args;
}

// Prints one change of the watch.
void PrintChange(const GlobalOptions& g, const v1::WatchFaultsResponse& r) {
  if (g.output == "json") {
    std::cout << ToJson(r) << std::endl;
    return;
  }
  const v1::Fault& f = r.fault();
  std::cout << ShortEnum(v1::WatchFaultsResponse::Change_Name(r.change()),
                         "CHANGE_")
            << "  " << f.fault_id() << "  "
            << ShortEnum(v1::FaultClass_Name(f.fault_class()), "FAULT_CLASS_")
            << "  " << ShortEnum(v1::FaultState_Name(f.state()), "FAULT_STATE_")
            << "  " << SuspectList(f) << "  " << f.summary() << std::endl;
}

// With several controllers (docs/ha.md) a watch that ends UNAVAILABLE (a
// follower, or a leader that stepped down) is opened again at the leader
// it names, else at the next address, for up to kRefollowFor; the open
// faults are printed again (EXISTING) there.
constexpr auto kRefollowFor = std::chrono::seconds(15);

int Watch(const GlobalOptions& g, const FaultArgs& a) {
  const std::vector<std::string> list = SplitControllerList(g.controller);
  std::string target = list.size() > 1 ? list[0] : g.controller;
  size_t next = 0;
  auto give_up = std::chrono::steady_clock::now() + kRefollowFor;
  grpc::Status s;
  for (;;) {
    auto stub = v1::Controller::NewStub(CliChannel(g, target));
    grpc::ClientContext ctx;
    AddAuth(g, &ctx);
    v1::WatchFaultsRequest req;
    req.set_job_id(a.job);
    req.set_include_existing(true);
    auto reader = stub->WatchFaults(&ctx, req);
    v1::WatchFaultsResponse r;
    while (reader->Read(&r)) {
      PrintChange(g, r);
      give_up = std::chrono::steady_clock::now() + kRefollowFor;
    }
    s = reader->Finish();
    if (list.size() <= 1 || s.error_code() != grpc::StatusCode::UNAVAILABLE ||
        std::chrono::steady_clock::now() > give_up) {
      break;
    }
    const std::string hint = LeaderFromMessage(s.error_message());
    const std::string from = target;
    if (!hint.empty() && hint != target) {
      target = hint;
    } else {
      next = (next + 1) % list.size();
      target = list[next];
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    std::cerr << "pitstopctl: " << from << ": " << s.error_message()
              << "; watching at " << target << std::endl;
  }
  if (!s.ok()) PrintError(g, s);
  return ExitCodeFor(s);
}

void AddFaults(CLI::App* app, GlobalOptions* g, int* rc) {
  FaultArgs& a = Args();
  CLI::App* cmd =
      app->add_subcommand("faults", "list faults (open by default)");
  cmd->add_option("--job", a.job, "only this job");
  cmd->add_flag("--all", a.all, "include resolved faults");
  cmd->add_option("--limit", a.limit, "at most this many (newest first)");
  cmd->add_flag("--watch", a.watch,
                "print open faults, then every change as it happens (until "
                "interrupted)");
  cmd->add_flag("--fail-if-any", a.fail_if_any,
                "exit 1 when any fault is listed (for scripts)");
  cmd->callback([g, rc, &a] {
    if (a.watch) {
      *rc = Watch(*g, a);
      return;
    }
    v1::ListFaultsRequest req;
    req.set_job_id(a.job);
    req.set_include_resolved(a.all);
    req.set_limit(a.limit);
    v1::ListFaultsResponse r;
    if ((*rc = Call(*g, &v1::Controller::Stub::ListFaults, req, &r))) return;
    if (g->output == "json") {
      std::cout << ToJson(r) << "\n";
    } else {
      PrintFaultTable({r.faults().begin(), r.faults().end()}, std::cout);
    }
    if (a.fail_if_any && r.faults_size() > 0) *rc = kExitFaultsPresent;
  });
}

void AddFaultShow(CLI::App* app, GlobalOptions* g, int* rc) {
  FaultArgs& a = Args();
  CLI::App* fault = app->add_subcommand("fault", "one fault");
  fault->require_subcommand(1);
  CLI::App* show = fault->add_subcommand(
      "show", "a fault with its suspects, victims and evidence");
  show->add_option("ID", a.id, "fault id, e.g. F12")->required();
  show->callback([g, rc, &a] {
    v1::GetFaultRequest req;
    req.set_fault_id(a.id);
    v1::GetFaultResponse r;
    if ((*rc = Call(*g, &v1::Controller::Stub::GetFault, req, &r))) return;
    if (g->output == "json") {
      std::cout << ToJson(r.fault()) << "\n";
    } else {
      PrintFaultDetails(r.fault(), std::cout);
    }
  });
}

template <typename Req, typename Resp, typename Method>
void AddStateMove(CLI::App* app, GlobalOptions* g, int* rc, const char* name,
                  const char* help, Method method) {
  FaultArgs& a = Args();
  CLI::App* cmd = app->add_subcommand(name, help);
  cmd->add_option("ID", a.id, "fault id")->required();
  cmd->add_option("--who", a.who, "your name (default $USER)");
  cmd->add_option("--note", a.note, "free text kept with the fault");
  cmd->callback([g, rc, &a, method] {
    Req req;
    req.set_fault_id(a.id);
    req.set_who(a.who.empty() ? DefaultWho() : a.who);
    req.set_note(a.note);
    Resp r;
    if ((*rc = Call(*g, method, req, &r))) return;
    if (g->output == "json") {
      std::cout << ToJson(r.fault()) << "\n";
    } else {
      std::cout << r.fault().fault_id() << " is now "
                << ShortEnum(v1::FaultState_Name(r.fault().state()),
                             "FAULT_STATE_")
                << "\n";
    }
  });
}

template <typename Resp>
void PrintNodeResult(const GlobalOptions& g, const Resp& r) {
  if (g.output == "json") {
    std::cout << ToJson(r.node()) << "\n";
    return;
  }
  std::cout << r.node().host() << " is now "
            << ShortEnum(v1::NodeState_Name(r.node().state()), "NODE_STATE_")
            << "\n";
}

void PrintPolicy(const GlobalOptions& g, const std::string& job,
                 const v1::JobPolicy& p) {
  if (g.output == "json") {
    std::cout << ToJson(p) << "\n";
    return;
  }
  Table t({"JOB", "MODE", "WINDOW", "N/M", "MIN EFFECT", "HANG TIMEOUT",
           "WARMUP", "Z"});
  t.AddRow({job, ShortEnum(v1::PolicyMode_Name(p.mode()), "POLICY_MODE_"),
            absl::StrCat(p.window_ms(), " ms"),
            absl::StrCat(p.persistence_n(), "/", p.persistence_m()),
            absl::StrCat(p.min_effect()),
            absl::StrCat("max(", p.hang_timeout_floor_ms(), " ms, ",
                         p.hang_timeout_multiplier(), " x p99), confirmed at ",
                         p.hang_confirm_multiplier(), " x"),
            absl::StrCat(p.warmup_collectives()),
            absl::StrCat(p.z_threshold())});
  t.Print(std::cout);
}

void AddPolicy(CLI::App* app, GlobalOptions* g, int* rc) {
  static std::string job;
  static v1::JobPolicy set;
  CLI::App* policy = app->add_subcommand("policy", "per-job detection policy");
  policy->require_subcommand(1);
  CLI::App* get = policy->add_subcommand("get", "show a job's policy");
  get->add_option("JOB", job, "job id")->required();
  get->callback([g, rc] {
    v1::GetJobPolicyRequest req;
    req.set_job_id(job);
    v1::GetJobPolicyResponse r;
    if ((*rc = Call(*g, &v1::Controller::Stub::GetJobPolicy, req, &r))) return;
    PrintPolicy(*g, job, r.policy());
  });
  CLI::App* put = policy->add_subcommand(
      "set", "set a job's policy; options not given take the defaults");
  put->add_option("JOB", job, "job id")->required();
  static uint32_t window_ms = 0, n = 0, m = 0, floor_ms = 0, warmup = 0;
  static double min_effect = 0, multiplier = 0, confirm = 0, z = 0;
  put->add_option("--window-ms", window_ms, "detection window (ms)");
  put->add_option("--persistence-n", n, "windows that must hit");
  put->add_option("--persistence-m", m, "windows considered");
  put->add_option("--min-effect", min_effect, "minimum effect, e.g. 0.2");
  put->add_option("--hang-timeout-multiplier", multiplier, "k of k x p99");
  put->add_option("--hang-timeout-floor-ms", floor_ms, "hang timeout floor");
  put->add_option("--hang-confirm-multiplier", confirm,
                  "a hang is CONFIRMED once stuck this many hang timeouts "
                  "(SUSPECTED after one; default 1.5)");
  put->add_option("--warmup-collectives", warmup,
                  "collectives before verdicts");
  put->add_option("--z-threshold", z, "robust z-score threshold");
  static std::string mode;
  put->add_option("--mode", mode,
                  "observe (record and notify) or act (actions such as the "
                  "Slurm drain may run)")
      ->check(CLI::IsMember({"observe", "act"}));
  put->callback([g, rc] {
    v1::SetJobPolicyRequest req;
    req.set_job_id(job);
    v1::JobPolicy* p = req.mutable_policy();
    p->set_window_ms(window_ms);
    p->set_persistence_n(n);
    p->set_persistence_m(m);
    p->set_min_effect(min_effect);
    p->set_hang_timeout_multiplier(multiplier);
    p->set_hang_timeout_floor_ms(floor_ms);
    p->set_hang_confirm_multiplier(confirm);
    p->set_warmup_collectives(warmup);
    p->set_z_threshold(z);
    p->set_mode(mode == "act"       ? v1::POLICY_MODE_ACT
                : mode == "observe" ? v1::POLICY_MODE_OBSERVE
                                    : v1::POLICY_MODE_UNSPECIFIED);
    v1::SetJobPolicyResponse r;
    if ((*rc = Call(*g, &v1::Controller::Stub::SetJobPolicy, req, &r))) return;
    PrintPolicy(*g, job, r.policy());
  });
}

// The scheduler's word on a job's hosts (scheduler role; issue #33). No
// HOST without --clear is a usage error: a prolog whose host list came out
// empty must not forget a running job's naming.
void AddJobHosts(CLI::App* app, GlobalOptions* g, int* rc) {
  static std::string job, who;
  static std::vector<std::string> hosts;
  static bool clear = false;
  CLI::App* cmd = app->add_subcommand(
      "job-hosts",
      "name the hosts a job runs on (scheduler role): only they may report "
      "for the job or join its migrations; stored, so a restarted or new "
      "leader keeps it; --clear forgets it at the job's end");
  cmd->add_option("JOB", job, "job id")->required();
  cmd->add_option("HOST", hosts, "host names, as their agents register");
  cmd->add_flag("--clear", clear,
                "forget the job's naming (the job has ended); no HOST");
  cmd->add_option("--who", who, "the scheduler's name (logged and stored)");
  cmd->callback([g, rc] {
    if (hosts.empty() != clear) {
      std::cerr << "pitstopctl job-hosts: "
                << (clear ? "--clear takes no HOST"
                          : "name at least one HOST, or --clear to forget "
                            "the naming")
                << "\n";
      *rc = kExitUsage;
      return;
    }
    v1::SetJobHostsRequest req;
    req.set_job_id(job);
    for (const std::string& h : hosts) req.add_hosts(h);
    req.set_who(who);
    v1::SetJobHostsResponse r;
    if ((*rc = Call(*g, &v1::Controller::Stub::SetJobHosts, req, &r))) return;
    if (g->output == "json") {
      std::cout << ToJson(r) << "\n";
      return;
    }
    if (r.hosts().empty()) {
      std::cout << "job " << r.job_id() << ": naming forgotten\n";
      return;
    }
    std::cout << "job " << r.job_id() << ": " << r.hosts_size()
              << " hosts named: " << absl::StrJoin(r.hosts(), ",") << "\n";
  });
}

}  // namespace

void AddFaultCommands(CLI::App* app, GlobalOptions* g, int* rc) {
  AddFaults(app, g, rc);
  AddFaultShow(app, g, rc);
  AddStateMove<v1::AcknowledgeFaultRequest, v1::AcknowledgeFaultResponse>(
      app, g, rc, "ack", "acknowledge a fault (suspected/confirmed only)",
      &v1::Controller::Stub::AcknowledgeFault);
  AddStateMove<v1::ResolveFaultRequest, v1::ResolveFaultResponse>(
      app, g, rc, "resolve", "mark a fault resolved",
      &v1::Controller::Stub::ResolveFault);
}

void AddNodeActions(CLI::App* app, GlobalOptions* g, int* rc) {
  FaultArgs& a = Args();
  CLI::App* drain = app->add_subcommand(
      "drain", "mark a node drained (recorded; no migration yet)");
  drain->add_option("HOST", a.host, "node host name")->required();
  drain->add_option("--reason", a.reason, "why (required)")->required();
  drain->callback([g, rc, &a] {
    v1::DrainNodeRequest req;
    req.set_host(a.host);
    req.set_reason(a.reason);
    v1::DrainNodeResponse r;
    if ((*rc = Call(*g, &v1::Controller::Stub::DrainNode, req, &r))) return;
    PrintNodeResult(*g, r);
  });
  CLI::App* uncordon =
      app->add_subcommand("uncordon", "undo a drain of a node");
  uncordon->add_option("HOST", a.host, "node host name")->required();
  uncordon->callback([g, rc, &a] {
    v1::UncordonNodeRequest req;
    req.set_host(a.host);
    v1::UncordonNodeResponse r;
    if ((*rc = Call(*g, &v1::Controller::Stub::UncordonNode, req, &r))) {
      return;
    }
    PrintNodeResult(*g, r);
  });
  AddPolicy(app, g, rc);
  AddJobHosts(app, g, rc);
}

}  // namespace pitstop::ctl
