// Placement of a multi-LoRA pipeline (mLoRA): which contiguous layers each
// rank holds, from measured per-rank speed and per-layer cost.
//
// The same computation as python/pitstop/torch/placement.py (both are
// tested against tests/controller/trainers/lora/placement_cases.json). A stage
// on rank r holding layers [b, e) takes sum(layer_costs[b..e)) / speed(r)
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
// Several pipelines (max_pipelines > 1): data-parallel replicas of the
// pipeline, each holding every layer and a share of the adapters (adapters
// are independent). The kept ranks are cut into contiguous groups (every
// cut up to 16 ranks, else equal sizes); a group running a adapters takes
// T_g(a) = its best split's sum + (a x micro-batches per adapter - 1) x max;
// adapters go to groups greedily (one each, then each next one to the group
// whose T after it is smallest, the lowest group on ties: optimal for the
// largest T, T_g being non-decreasing), in adapter order; a step takes the
// largest T_g (the pipelines meet at every step's agreement).
// max_layers_per_rank bounds every stage (memory). Ties keep more ranks,
// then fewer pipelines. python/pitstop/torch/placement.py is the same.
//
// Pure functions; thread-compatible.
#ifndef PITSTOP_CONTROLLER_TRAINERS_LORA_PLACEMENT_H_
#define PITSTOP_CONTROLLER_TRAINERS_LORA_PLACEMENT_H_

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

struct Pipeline {
  std::vector<Stage> stages;       // pipeline order, layers contiguous
  std::vector<uint32_t> adapters;  // sorted; empty = all (one pipeline)
  bool operator==(const Pipeline&) const = default;
};

struct Placement {
  std::vector<Pipeline> pipelines;
  std::vector<int32_t> excluded;  // sorted
  Estimate estimate;
  // Every stage of every pipeline, pipeline after pipeline.
  std::vector<Stage> AllStages() const;
};

struct PlacementInput {
  std::map<int32_t, double> speeds;  // rank -> cost units per second
  std::vector<int32_t> ranks;        // pipeline order; empty = sorted speeds
  std::vector<double> layer_costs;   // per micro-batch
  uint32_t micro_batches = 8;        // of a whole step (every adapter)
  double samples_per_micro_batch = 1;
  bool allow_exclude = true;
  uint32_t min_ranks = 1;
  // Several pipelines: the adapter ids (micro_batches a multiple of their
  // number), at most max_pipelines pipelines, stages of at most
  // max_layers_per_rank layers (0 = any).
  std::vector<uint32_t> adapters;
  uint32_t max_pipelines = 1;
  uint32_t max_layers_per_rank = 0;
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

// The estimate of several pipelines meeting every step: micro_batches is of
// the whole step; a pipeline with a of the n_adapters adapters runs
// micro_batches / n_adapters x a (adapters empty: all).
absl::StatusOr<Estimate> EstimatePipelines(
    const std::vector<Pipeline>& pipelines,
    const std::map<int32_t, double>& speeds,
    const std::vector<double>& layer_costs, uint32_t micro_batches,
    double samples_per_micro_batch, uint32_t n_adapters);

// The best contiguous split of all layers over `ranks` (each at least one
// layer, at most max_layers when > 0); requires ranks.size() <=
// layer_costs.size() and valid speeds. Empty when max_layers cannot hold
// the layers.
std::vector<Stage> SplitLayers(const std::vector<int32_t>& ranks,
                               const std::map<int32_t, double>& speeds,
                               const std::vector<double>& layer_costs,
                               uint32_t micro_batches, uint32_t max_layers = 0);

// Ways to cut `kept` (pipeline order) into q contiguous groups.
std::vector<std::vector<std::vector<int32_t>>> RankGroups(
    const std::vector<int32_t>& kept, size_t q);

// Layers whose owner differs between `from` and `to`.
uint32_t MovedLayers(const std::vector<Stage>& from,
                     const std::vector<Stage>& to);

// (layer, rank) pairs a move from `from` to `to` sends anything to (base
// weights or an adapter's state), for the job's `adapters`: the trainer's
// transfers (python/pitstop/torch/multi_lora.py).
uint32_t MovedLayers(const Placement& from, const Placement& to,
                     const std::vector<uint32_t>& adapters);

}  // namespace pitstop::controller::lora

#endif  // PITSTOP_CONTROLLER_TRAINERS_LORA_PLACEMENT_H_
