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
