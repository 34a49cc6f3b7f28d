#include "src/sim/plan_watch.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pitstop/grpc_util.h"

namespace pitstop::sim {

void PlanWatcher::Poll(double at_s,
                       const std::function<void(const std::string&)>& say) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  v1::GetFlowPlanRequest req;
  req.set_job_id(job_id_);
  req.set_summary_only(false);  // a sim's job has few flows
  v1::GetFlowPlanResponse resp;
  if (!stub_->GetFlowPlan(&ctx, req, &resp).ok()) return;  // none yet
  last_ = resp.plan();
  const v1::FlowPlan& p = last_;
  if (!epochs_.empty() && epochs_.back().epoch >= p.epoch()) return;
  PlanEpoch e;
  e.epoch = p.epoch();
  e.at_s = at_s;
  e.reason = p.reason();
  e.network_flows = p.network_flows();
  e.crossing_flows = p.crossing_flows();
  e.moved_flows = p.moved_flows();
  const std::set<std::string> degraded(p.degraded_links().begin(),
                                       p.degraded_links().end());
  e.degraded_links.assign(degraded.begin(), degraded.end());
  for (const v1::PlannedFlow& f : p.planned_flows()) {
    for (const std::string& l : f.path()) e.link_bytes[l] += f.bytes();
    if (!f.moved()) continue;
    bool off = true;
    for (const std::string& l : f.path()) off &= degraded.count(l) == 0;
    e.moved_off_degraded += off;
  }
  epochs_.push_back(std::move(e));
  say(absl::StrFormat(
      "[sim %6.1fs] flow plan epoch %d of %s: %s; %d network flows, busiest "
      "link %s (%.2f ms per collective)%s",
      at_s, p.epoch(), job_id_, p.reason(), p.network_flows(), p.busiest_link(),
      p.busiest_link_s() * 1e3,
      p.crossing_flows() > 0
          ? absl::StrFormat(
                ", %d crossed the changed links, %d moved (%d off every "
                "degraded link)",
                p.crossing_flows(), p.moved_flows(),
                epochs_.back().moved_off_degraded)
          : ""));
  if (p.planned_flows_size() <= 16) {  // small jobs: every flow
    for (const v1::PlannedFlow& f : p.planned_flows()) {
      std::string path;
      for (const std::string& l : f.path()) {
        absl::StrAppend(&path, path.empty() ? "" : " ", l);
      }
      say(absl::StrFormat("[sim %6.1fs]   rank %d -> %d ch %d: %.1f MiB%s: %s",
                          at_s, f.src_rank(), f.dst_rank(), f.channel(),
                          f.bytes() / (1 << 20), f.moved() ? " (moved)" : "",
                          path));
    }
  }
}

void PlanWatcher::Mark(double at_s, const std::string& link, double share,
                       const std::function<void(const std::string&)>& say) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::SetLinkHealthRequest req;
  req.set_link(link);
  req.set_degraded(true);
  req.set_capacity_share(share);
  req.set_who("pitstop sim");
  req.set_reason("scenario planning.marks");
  v1::SetLinkHealthResponse resp;
  const grpc::Status st = stub_->SetLinkHealth(&ctx, req, &resp);
  if (!st.ok()) {
    say(absl::StrFormat("[sim %6.1fs] marking %s degraded failed: %s", at_s,
                        link, st.error_message()));
    return;
  }
  say(absl::StrFormat(
      "[sim %6.1fs] operator marks %s degraded (%d links at %.0f%%); %d jobs "
      "re-planned",
      at_s, link, resp.links_size(), share * 100, resp.replanned_size()));
}

TunerTableView ReadTunerTable(const std::string& host,
                              const std::string& path) {
  TunerTableView v;
  v.host = host;
  v.path = path;
  std::unique_ptr<tuner::TunerTableReader> r =
      tuner::TunerTableReader::Open(path, &v.error);
  if (r != nullptr) v.entries = r->Entries();
  return v;
}

}  // namespace pitstop::sim
