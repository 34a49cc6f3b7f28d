#include "src/c4p/nic_capacity.h"

#include <algorithm>
#include <cmath>

namespace pitstop::c4p {

void NicCapacityModel::Observe(const std::string& nic, double nominal_gbps,
                               uint64_t bytes, uint64_t busy_ns) {
  if (bytes < options_.min_bytes || busy_ns < options_.min_busy_ns ||
      nominal_gbps <= 0) {
    return;
  }
  const double sample =
      std::min(nominal_gbps,
               static_cast<double>(bytes) * 8 / static_cast<double>(busy_ns));
  State& s = nics_[nic];
  s.nominal_gbps = nominal_gbps;
  if (s.samples == 0) {
    s.gbps = sample;
  } else {
    const double a = sample > s.gbps ? options_.alpha_up : options_.alpha_down;
    s.gbps += a * (sample - s.gbps);
  }
  ++s.samples;
}

NicCapacityModel::Estimate NicCapacityModel::Get(const std::string& nic,
                                                 double nominal_gbps) const {
  auto it = nics_.find(nic);
  if (it == nics_.end()) return Estimate{nominal_gbps, nominal_gbps, 0};
  const State& s = it->second;
  const bool warm = s.samples >= options_.warmup;
  return Estimate{s.nominal_gbps, warm ? s.gbps : s.nominal_gbps, s.samples};
}

std::vector<int> NicCapacityModel::ApplyTo(Fabric* fabric,
                                           double min_change) const {
  std::vector<int> changed;
  for (const auto& [name, s] : nics_) {
    const int gpu = fabric->FindNode(name);
    if (gpu < 0 || fabric->node(gpu).kind != NodeKind::kGpu) continue;
    for (int up : fabric->nic_uplinks(gpu)) {
      for (int l : {up, up ^ 1}) {
        const FabricLink& fl = fabric->link(l);
        const Estimate e = Get(name, fl.nominal_gbps);
        // The sample rate is the NIC's; scale to each port's nominal.
        const double share = s.nominal_gbps > 0 ? e.gbps / s.nominal_gbps : 1.0;
        const double gbps = fl.nominal_gbps * std::min(1.0, share);
        if (std::abs(gbps - fl.gbps) > min_change * fl.nominal_gbps) {
          fabric->SetCapacity(l, gbps);
          changed.push_back(l);
        }
      }
    }
  }
  return changed;
}

}  // namespace pitstop::c4p
