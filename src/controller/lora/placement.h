// Placement of a multi-LoRA pipeline (mLoRA): which contiguous layers each
// rank holds, from measured per-rank speed and per-layer cost.
//
// The same computation as python/pitstop/torch/placement.py (both are
// tested against tests/controller/lora/placement_cases.json). A stage on
// rank r holding layers [b, e) takes sum(layer_costs[b..e)) / speed(r)
// seconds per micro-batch; a step of `micro_batches` micro-batches takes
// about sum(stage times) + (micro_batches - 1) * max(stage times) (fill and
// drain once, then one micro-batch per bottleneck interval).
//
// ComputePlacement keeps the ranks in pipeline order, splits the layers to
// minimise that step time (exact: for every candidate bottleneck T, a
// dynamic programme for the smallest sum of stage times with every stage
// <= T) and tries excluding ranks (every subset up to 8 ranks, else the
// slowest ones one by one). Ties keep more ranks, then the earliest cuts.
//
// Pure functions; thread-compatible.
#ifndef PITSTOP_CONTROLLER_LORA_PLACEMENT_H_
#define PITSTOP_CONTROLLER_LORA_PLACEMENT_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/statusor.h"

namespace pitstop::controller::lora {

struct Stage {
  int32_t rank = 0;
  uint32_t layer_begin = 0;
  uint32_t layer_end = 0;  // exclusive
  bool operator==(const Stage&) const = default;
};

struct Estimate {
  double step_s = 0;
  double samples_per_s = 0;
  double bottleneck_s = 0;
};

struct Placement {
  std::vector<Stage> stages;      // pipeline order, layers contiguous
  std::vector<int32_t> excluded;  // sorted
  Estimate estimate;
};

struct PlacementInput {
  std::map<int32_t, double> speeds;  // rank -> cost units per second
  std::vector<int32_t> ranks;        // pipeline order; empty = sorted speeds
  std::vector<double> layer_costs;   // per micro-batch
  uint32_t micro_batches = 8;
  double samples_per_micro_batch = 1;
  bool allow_exclude = true;
  uint32_t min_ranks = 1;
};

// InvalidArgument naming the bad field ("layer_costs[3]: ...").
absl::StatusOr<Placement> ComputePlacement(const PlacementInput& in);

// The estimate of `stages` at `speeds`; InvalidArgument for a rank without
// a speed or a layer range outside layer_costs.
absl::StatusOr<Estimate> EstimateStages(const std::vector<Stage>& stages,
                                        const std::map<int32_t, double>& speeds,
                                        const std::vector<double>& layer_costs,
                                        uint32_t micro_batches,
                                        double samples_per_micro_batch = 1);

// The best contiguous split of all layers over `ranks` (each at least one
// layer); requires ranks.size() <= layer_costs.size() and valid speeds.
std::vector<Stage> SplitLayers(const std::vector<int32_t>& ranks,
                               const std::map<int32_t, double>& speeds,
                               const std::vector<double>& layer_costs,
                               uint32_t micro_batches);

// Layers whose owner differs between `from` and `to`.
uint32_t MovedLayers(const std::vector<Stage>& from,
                     const std::vector<Stage>& to);

}  // namespace pitstop::controller::lora

#endif  // PITSTOP_CONTROLLER_LORA_PLACEMENT_H_
