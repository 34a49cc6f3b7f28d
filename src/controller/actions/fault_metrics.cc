#include "src/controller/actions/fault_metrics.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace pitstop::controller {
namespace {

constexpr int kMaxSuspectSeries = 16;  // per fault

std::string Lower(const std::string& name, const std::string& prefix) {
  return absl::AsciiStrToLower(
      name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name);
}

}  // namespace

FaultMetrics::FaultMetrics(prometheus::Registry* registry)
    : open_(&prometheus::BuildGauge()
                 .Name("pitstop_controller_open_faults")
                 .Help("Faults not resolved, by class and state")
                 .Register(*registry)),
      suspects_(&prometheus::BuildGauge()
                     .Name("pitstop_controller_open_fault_suspects")
                     .Help("1 per suspect of each open fault (at most 16 per "
                           "fault): where the detectors localised it")
                     .Register(*registry)) {}

void FaultMetrics::Remove(Open& o) {
  auto c = counts_.find(o.labels);
  if (c != counts_.end() && --c->second == 0) {
    open_->Remove(&open_->Add(o.labels));
    counts_.erase(c);
  } else if (c != counts_.end()) {
    open_->Add(o.labels).Set(c->second);
  }
  for (prometheus::Gauge* g : o.suspects) suspects_->Remove(g);
  o.suspects.clear();
}

void FaultMetrics::OnFaultChange(const v1::WatchFaultsResponse& change) {
  const v1::Fault& f = change.fault();
  MutexLock lock(&mu_);
  auto it = faults_.find(f.fault_id());
  if (it != faults_.end()) {
    Remove(it->second);
    faults_.erase(it);
  }
  if (f.state() == v1::FAULT_STATE_RESOLVED) return;
  const std::string cls =
      Lower(v1::FaultClass_Name(f.fault_class()), "FAULT_CLASS_");
  Open o;
  o.labels = {{"class", cls},
              {"state", Lower(v1::FaultState_Name(f.state()), "FAULT_STATE_")}};
  const int n = ++counts_[o.labels];
  open_->Add(o.labels).Set(n);
  for (int i = 0; i < f.suspects_size() && i < kMaxSuspectSeries; ++i) {
    const v1::Suspect& s = f.suspects(i);
    prometheus::Gauge& g = suspects_->Add(
        {{"fault_id", f.fault_id()},
         {"class", cls},
         {"level", Lower(v1::SuspectLevel_Name(s.level()), "SUSPECT_LEVEL_")},
         {"host", s.host()},
         {"gpu", absl::StrCat(s.gpu_index())},
         {"global_rank", absl::StrCat(s.global_rank())}});
    g.Set(1);
    o.suspects.push_back(&g);
  }
  faults_[f.fault_id()] = std::move(o);
}

}  // namespace pitstop::controller
