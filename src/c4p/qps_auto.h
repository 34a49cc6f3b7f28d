// Choosing the QPs per connection (docs/planning.md, "QPs per
// connection"): with one QP per connection a re-plan around a degraded link
// in an exactly full uplink group can only move whole connections and stops
// at 67% of the healthy bound; with q QPs it moves QPs and recovers more
// (8 QPs: 94%). The QP count is a launch setting of the job
// (NCCL_IB_QPS_PER_CONNECTION, read once by NCCL), so this recommends one:
// the smallest of 1, 2, 4, 8 whose re-plan recovers the target.
//
// Thread-compatible (pure functions over the caller's fabric).
#ifndef PITSTOP_SRC_CONTROLLER_PLAN_QPS_AUTO_H_
#define PITSTOP_SRC_CONTROLLER_PLAN_QPS_AUTO_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "src/c4p/evaluate.h"

namespace pitstop::c4p {

inline constexpr int kMaxAutoQps = 8;
inline constexpr double kQpsTargetRecovery = 0.9;

struct QpsChoice {
  int qps = 1;
  bool automatic = false;
  // Recovery of the healthy bound by the re-plan, per QP count probed.
  std::vector<std::pair<int, double>> tried;
  // What no routing can beat on the degraded fabric: healthy bound over
  // degraded bound (1 = the degraded link costs nothing).
  double bound_recovery = 0;
  std::string why;  // one line for people
  // The launch setting the choice needs ("" for NCCL's default of 1).
  std::string launch;
};

// Evaluate() with a chosen QP count. With one QP per connection first; when
// `o` degrades links and the re-plan recovers less than `target` of the
// healthy bound, probes 2, 4, .. `max_qps` on the same degraded links
// (one ECMP seed, no source-port pinning: the re-plan and the bound do not
// depend on them) and evaluates in full with the smallest that reaches
// `target`, else with the best if it beats one QP by a point. Leaves the
// fabric's capacities as the final Evaluate() left them.
absl::StatusOr<EvalReport> EvaluateAutoQps(Fabric* fabric, const EvalOptions& o,
                                           QpsChoice* choice,
                                           int max_qps = kMaxAutoQps,
                                           double target = kQpsTargetRecovery);

}  // namespace pitstop::c4p

#endif  // PITSTOP_SRC_CONTROLLER_PLAN_QPS_AUTO_H_
