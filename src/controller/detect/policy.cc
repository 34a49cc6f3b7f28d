// JobPolicy defaults and validation.
#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/controller/detect/detection_engine.h"
#include "src/controller/detect/hang_detector.h"

namespace pitstop::controller {

v1::JobPolicy DefaultJobPolicy() {
  v1::JobPolicy p;
  p.set_mode(v1::POLICY_MODE_OBSERVE);
  p.set_window_ms(1000);
  p.set_persistence_n(3);
  p.set_persistence_m(5);
  p.set_min_effect(0.2);
  p.set_hang_timeout_multiplier(10);
  p.set_hang_timeout_floor_ms(5000);
  p.set_hang_confirm_multiplier(kDefaultHangConfirmMultiplier);
  p.set_warmup_collectives(20);
  p.set_z_threshold(3.5);
  return p;
}

namespace {

v1::JobPolicy ResolveAgainst(const v1::JobPolicy& policy,
                             const v1::JobPolicy& d) {
  v1::JobPolicy p = policy;
  if (p.mode() == v1::POLICY_MODE_UNSPECIFIED) p.set_mode(d.mode());
  if (p.window_ms() == 0) p.set_window_ms(d.window_ms());
  if (p.persistence_n() == 0) p.set_persistence_n(d.persistence_n());
  if (p.persistence_m() == 0) {
    p.set_persistence_m(std::max(d.persistence_m(), p.persistence_n()));
  }
  if (p.min_effect() == 0) p.set_min_effect(d.min_effect());
  if (p.hang_timeout_multiplier() == 0) {
    p.set_hang_timeout_multiplier(d.hang_timeout_multiplier());
  }
  if (p.hang_timeout_floor_ms() == 0) {
    p.set_hang_timeout_floor_ms(d.hang_timeout_floor_ms());
  }
  if (p.hang_confirm_multiplier() == 0) {
    p.set_hang_confirm_multiplier(d.hang_confirm_multiplier());
  }
  if (p.warmup_collectives() == 0) {
    p.set_warmup_collectives(d.warmup_collectives());
  }
  if (p.z_threshold() == 0) p.set_z_threshold(d.z_threshold());
  return p;
}

}  // namespace

v1::JobPolicy ResolvePolicy(const v1::JobPolicy& policy,
                            const v1::JobPolicy& defaults) {
  return ResolveAgainst(policy, ResolveAgainst(defaults, DefaultJobPolicy()));
}

absl::Status ValidatePolicy(const v1::JobPolicy& policy,
                            const v1::JobPolicy& defaults) {
  // NaN compares false with everything and would slip through every range
  // check below (min_effect NaN switches slow detection off): the raw
  // fields are checked before zeros are resolved to defaults.
  const std::pair<double, const char*> doubles[] = {
      {policy.min_effect(), "policy.min_effect"},
      {policy.hang_timeout_multiplier(), "policy.hang_timeout_multiplier"},
      {policy.hang_confirm_multiplier(), "policy.hang_confirm_multiplier"},
      {policy.z_threshold(), "policy.z_threshold"}};
  for (const auto& [v, field] : doubles) {
    if (!std::isfinite(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": ", v, " is not a finite number"));
    }
  }
  const v1::JobPolicy p = ResolvePolicy(policy, defaults);
  if (p.persistence_n() > p.persistence_m()) {
    return absl::InvalidArgumentError(
        absl::StrCat("policy.persistence_n: ", p.persistence_n(),
                     " is more than policy.persistence_m ", p.persistence_m()));
  }
  if (p.persistence_m() > 1000) {
    return absl::InvalidArgumentError("policy.persistence_m: at most 1000");
  }
  // Ranges (docs/reliability.md): beyond them the detector does nothing
  // useful (a 1 ms window never holds two collectives; a 0.0001 effect
  // flags noise).
  struct Range {
    double value;
    double lo, hi;
    const char* field;
  };
  const Range ranges[] = {
      {static_cast<double>(p.window_ms()), kMinWindowMs, kMaxWindowMs,
       "policy.window_ms"},
      {p.min_effect(), 0.01, 100, "policy.min_effect"},
      {p.hang_timeout_multiplier(), 1, 1000, "policy.hang_timeout_multiplier"},
      {static_cast<double>(p.hang_timeout_floor_ms()), 100, 86'400'000,
       "policy.hang_timeout_floor_ms"},
      {p.hang_confirm_multiplier(), 1, 10, "policy.hang_confirm_multiplier"},
      {static_cast<double>(p.warmup_collectives()), 0, 1'000'000,
       "policy.warmup_collectives"},
      {p.z_threshold(), 0.5, 100, "policy.z_threshold"},
  };
  for (const Range& r : ranges) {
    if (r.value < r.lo || r.value > r.hi) {
      return absl::InvalidArgumentError(absl::StrCat(
          r.field, ": ", r.value, " not in [", r.lo, ", ", r.hi, "]"));
    }
  }
  if (!v1::PolicyMode_IsValid(p.mode())) {
    return absl::InvalidArgumentError(
        absl::StrCat("policy.mode: unknown value ", p.mode()));
  }
  return absl::OkStatus();
}

}  // namespace pitstop::controller
