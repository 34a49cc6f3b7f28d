#include "src/sim/plan_watch.h"

#include "absl/strings/str_format.h"
#include "pitstop/grpc_util.h"

namespace pitstop::sim {

void PlanWatcher::Poll(double at_s,
                       const std::function<void(const std::string&)>& say) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  v1::GetFlowPlanRequest req;
  req.set_job_id(job_id_);
  req.set_summary_only(true);
  v1::GetFlowPlanResponse resp;
  if (!stub_->GetFlowPlan(&ctx, req, &resp).ok()) return;  // none yet
  last_ = resp.plan();
  const v1::FlowPlan& p = last_;
  if (!epochs_.empty() && epochs_.back().epoch >= p.epoch()) return;
  epochs_.push_back(PlanEpoch{p.epoch(), at_s, p.reason(), p.network_flows(),
                              p.crossing_flows(), p.moved_flows()});
  say(absl::StrFormat(
      "[sim %6.1fs] flow plan epoch %d of %s: %s; %d network flows%s", at_s,
      p.epoch(), job_id_, p.reason(), p.network_flows(),
      p.crossing_flows() > 0
          ? absl::StrFormat(", %d crossed the changed links, %d moved",
                            p.crossing_flows(), p.moved_flows())
          : ""));
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
