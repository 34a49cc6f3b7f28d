// pitstopctl plan JOB | links [--job JOB] [--all] [--degrade LINK | --healthy
// LINK]: the controller's live C4P flow plan (docs/planning.md).
#include <CLI/CLI.hpp>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/pitstopctl/commands.h"
#include "tools/pitstopctl/ctl_client.h"
#include "tools/pitstopctl/ctl_format.h"

namespace pitstop::ctl {
namespace {

std::string Health(v1::LinkHealth h) {
  return ShortEnum(v1::LinkHealth_Name(h), "LINK_HEALTH_");
}

void PrintLinks(const google::protobuf::RepeatedPtrField<v1::LinkStatus>& ls) {
  Table t({"LINK", "KIND", "HEALTH", "GBPS", "NOMINAL", "FLOWS", "UTIL", "JOBS",
           "WHY"});
  for (const v1::LinkStatus& l : ls) {
    t.AddRow({l.name(), l.kind(), Health(l.health()),
              absl::StrFormat("%.0f", l.gbps()),
              absl::StrFormat("%.0f", l.nominal_gbps()),
              absl::StrCat(l.flows()),
              absl::StrFormat("%.0f%%", 100 * l.utilisation()),
              l.jobs().empty() ? "-" : absl::StrJoin(l.jobs(), ","),
              l.reason().empty() ? "-" : l.reason()});
  }
  t.Print(std::cout);
}

void PrintPlan(const v1::FlowPlan& p, bool flows) {
  std::cout << "job " << p.job_id() << ": plan epoch " << p.epoch() << ", "
            << Age(p.planned_unix_ns()) << " (" << p.reason() << ")\n"
            << "  " << p.flows() << " flows, " << p.network_flows()
            << " over the network; computed in "
            << absl::StrFormat("%.1f", p.plan_ms()) << " ms\n";
  if (p.crossing_flows() > 0) {
    std::cout << "  re-plan: " << p.crossing_flows()
              << " flows crossed the changed links, " << p.moved_flows()
              << " moved\n";
  }
  if (!p.busiest_link().empty()) {
    std::cout << "  busiest link " << p.busiest_link() << ": "
              << absl::StrFormat("%.2f", p.busiest_link_s() * 1e3)
              << " ms per collective\n";
  }
  if (!p.degraded_links().empty()) {
    std::cout << "  degraded links: " << absl::StrJoin(p.degraded_links(), ", ")
              << "\n";
  }
  if (!p.qps_advice().empty()) std::cout << "  QPs: " << p.qps_advice() << "\n";
  std::cout << "  fabric: " << p.fabric() << "\n";
  if (!p.hosts().empty()) {
    Table h({"HOST", "EPOCH_SENT", "EPOCH_ACKED"});
    for (const v1::FlowPlanHost& x : p.hosts()) {
      h.AddRow({x.host(), absl::StrCat(x.epoch_sent()),
                absl::StrCat(x.epoch_acked())});
    }
    h.Print(std::cout);
  }
  if (!flows) return;
  Table t({"COMM", "CH", "SRC", "DST", "SRC_NIC", "DST_NIC", "PORT", "MOVED",
           "PATH"});
  for (const v1::PlannedFlow& f : p.planned_flows()) {
    t.AddRow({absl::StrCat(absl::Hex(f.comm_hash())), absl::StrCat(f.channel()),
              absl::StrCat(f.src_rank(), "@", f.src_host()),
              absl::StrCat(f.dst_rank(), "@", f.dst_host()), f.src_nic(),
              f.dst_nic(),
              f.udp_src_port() ? absl::StrCat(f.udp_src_port()) : "-",
              f.moved() ? "yes" : "-", absl::StrJoin(f.path(), " ")});
  }
  t.Print(std::cout);
}

}  // namespace

void AddPlanCommands(CLI::App* app, GlobalOptions* g, int* rc) {
  static std::string job;
  static bool summary = false;
  CLI::App* plan = app->add_subcommand(
      "plan",
      "show JOB's live C4P flow plan: its epoch and why it was made (flows "
      "learned, or a re-plan after a link or NIC degraded: how many flows "
      "crossed it and moved), the busiest link, which epoch each host's "
      "agent acked, and per flow (each QP of a channel's connection) the "
      "NICs and the path. Needs a controller started with --fabric.");
  plan->add_option("JOB", job, "job id")->required();
  plan->add_flag("--summary", summary, "leave out the per-flow table");
  plan->callback([g, rc] {
    v1::GetFlowPlanRequest req;
    req.set_job_id(job);
    req.set_summary_only(summary);
    v1::GetFlowPlanResponse r;
    if ((*rc = Call(*g, &v1::Controller::Stub::GetFlowPlan, req, &r))) return;
    if (g->output == "json") {
      std::cout << ToJson(r) << "\n";
      return;
    }
    PrintPlan(r.plan(), !summary);
  });

  static std::string links_job, degrade, healthy, reason;
  static bool all = false;
  static double share = 0;
  CLI::App* links = app->add_subcommand(
      "links",
      "fabric links with planned flows: effective and nominal capacity, "
      "health (HEALTHY, DEGRADED: an operator marked it, SUSPECT: a "
      "COMM_SLOW verdict names it, SLOW: its NIC measures below nominal), "
      "planned flows and their measured utilisation while collectives "
      "run. --degrade / --healthy mark a link (operator role) and re-plan "
      "the jobs crossing it at once.");
  links->add_option("--job", links_job, "only links with flows of this job");
  links->add_flag("--all", all, "every link, also idle healthy ones");
  links->add_option(
      "--degrade", degrade,
      "mark LINK degraded: A->B (one direction), A-B (both), hostN/nicK or "
      "a switch (all its links)");
  links->add_option("--healthy", healthy, "mark LINK healthy again");
  links->add_option("--share", share,
                    "capacity share of a degraded link, in (0, 1) "
                    "(default 0.25)");
  links->add_option("--reason", reason, "why (recorded)");
  links->callback([g, rc] {
    if (!degrade.empty() || !healthy.empty()) {
      if (!degrade.empty() && !healthy.empty()) {
        std::cerr << "pitstopctl links: --degrade and --healthy together\n";
        *rc = 2;
        return;
      }
      v1::SetLinkHealthRequest req;
      req.set_link(degrade.empty() ? healthy : degrade);
      req.set_degraded(!degrade.empty());
      req.set_capacity_share(share);
      req.set_who(DefaultWho());
      req.set_reason(reason);
      v1::SetLinkHealthResponse r;
      if ((*rc = Call(*g, &v1::Controller::Stub::SetLinkHealth, req, &r))) {
        return;
      }
      if (g->output == "json") {
        std::cout << ToJson(r) << "\n";
        return;
      }
      PrintLinks(r.links());
      for (const auto& [j, epoch] : r.replanned()) {
        std::cout << "job " << j << " re-planned: epoch " << epoch << "\n";
      }
      if (r.replanned().empty()) std::cout << "(no job's plan crossed it)\n";
      return;
    }
    v1::ListLinksRequest req;
    req.set_job_id(links_job);
    req.set_all(all);
    v1::ListLinksResponse r;
    if ((*rc = Call(*g, &v1::Controller::Stub::ListLinks, req, &r))) return;
    if (g->output == "json") {
      std::cout << ToJson(r) << "\n";
      return;
    }
    std::cout << "fabric: " << r.fabric() << "\n";
    PrintLinks(r.links());
    if (r.links().empty()) std::cout << "(no planned flows yet)\n";
  });
}

}  // namespace pitstop::ctl
