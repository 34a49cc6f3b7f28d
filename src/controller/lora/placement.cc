#include "src/controller/lora/placement.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"

namespace pitstop::controller::lora {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Split {
  double total = 0;
  std::vector<Stage> stages;
};

// Smallest sum of stage times with every stage <= limit; nullopt if none.
std::optional<Split> MinSumSplit(const std::vector<int32_t>& ranks,
                                 const std::map<int32_t, double>& speeds,
                                 const std::vector<double>& prefix,
                                 double limit) {
  const size_t n = prefix.size() - 1, p = ranks.size();
  std::vector<std::vector<double>> best(p + 1,
                                        std::vector<double>(n + 1, kInf));
  std::vector<std::vector<size_t>> cut(p + 1, std::vector<size_t>(n + 1, 0));
  best[0][0] = 0;
  const double lim = limit * (1 + 1e-12);
  for (size_t i = 1; i <= p; ++i) {
    const double speed = speeds.at(ranks[i - 1]);
    for (size_t j = i; j + (p - i) <= n; ++j) {
      for (size_t k = i - 1; k < j; ++k) {
        if (best[i - 1][k] == kInf) continue;
        const double t = (prefix[j] - prefix[k]) / speed;
        if (t > lim) continue;
        const double v = best[i - 1][k] + t;
        // Strictly better only: the earliest cut wins ties.
        if (v < best[i][j] - 1e-12 * std::max(1.0, std::fabs(v))) {
          best[i][j] = v;
          cut[i][j] = k;
        }
      }
    }
  }
  if (best[p][n] == kInf) return std::nullopt;
  Split s;
  s.total = best[p][n];
  s.stages.resize(p);
  size_t j = n;
  for (size_t i = p; i >= 1; --i) {
    const size_t k = cut[i][j];
    s.stages[i - 1] =
        Stage{ranks[i - 1], static_cast<uint32_t>(k), static_cast<uint32_t>(j)};
    j = k;
  }
  return s;
}

absl::Status Validate(const PlacementInput& in) {
  if (in.layer_costs.empty()) {
    return absl::InvalidArgumentError("layer_costs: empty");
  }
  for (size_t i = 0; i < in.layer_costs.size(); ++i) {
    if (!(in.layer_costs[i] > 0) || !std::isfinite(in.layer_costs[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layer_costs[", i, "]: must be > 0, got ", in.layer_costs[i]));
    }
  }
  if (in.speeds.empty()) return absl::InvalidArgumentError("speeds: empty");
  for (const auto& [r, s] : in.speeds) {
    if (!(s > 0) || !std::isfinite(s)) {
      return absl::InvalidArgumentError(
          absl::StrCat("speeds[", r, "]: must be > 0, got ", s));
    }
  }
  if (in.micro_batches < 1) {
    return absl::InvalidArgumentError("micro_batches: must be >= 1");
  }
  for (int32_t r : in.ranks) {
    if (!in.speeds.contains(r)) {
      return absl::InvalidArgumentError(
          absl::StrCat("speeds: no speed for rank ", r));
    }
  }
  return absl::OkStatus();
}

// Rank subsets to leave out, smallest first.
std::vector<std::vector<int32_t>> DropCandidates(
    const std::vector<int32_t>& usable, const PlacementInput& in) {
  std::vector<std::vector<int32_t>> out = {{}};
  if (!in.allow_exclude || usable.size() <= std::max<uint32_t>(1, in.min_ranks))
    return out;
  const size_t max_drop = usable.size() - std::max<uint32_t>(1, in.min_ranks);
  if (usable.size() <= 8) {
    for (size_t d = 1; d <= max_drop; ++d) {
      // Combinations of d out of usable, in lexicographic order.
      std::vector<bool> pick(usable.size(), false);
      std::fill(pick.begin(), pick.begin() + d, true);
      do {
        std::vector<int32_t> drop;
        for (size_t i = 0; i < usable.size(); ++i) {
          if (pick[i]) drop.push_back(usable[i]);
        }
        out.push_back(std::move(drop));
      } while (std::prev_permutation(pick.begin(), pick.end()));
    }
    return out;
  }
  std::vector<int32_t> slowest = usable;
  std::stable_sort(slowest.begin(), slowest.end(), [&](int32_t a, int32_t b) {
    return in.speeds.at(a) < in.speeds.at(b);
  });
  for (size_t d = 1; d <= max_drop; ++d) {
    out.emplace_back(slowest.begin(), slowest.begin() + d);
  }
  return out;
}

}  // namespace

absl::StatusOr<Estimate> EstimateStages(const std::vector<Stage>& stages,
                                        const std::map<int32_t, double>& speeds,
                                        const std::vector<double>& layer_costs,
                                        uint32_t micro_batches,
                                        double samples_per_micro_batch) {
  if (stages.empty()) return absl::InvalidArgumentError("stages: empty");
  Estimate e;
  double sum = 0;
  for (size_t i = 0; i < stages.size(); ++i) {
    const Stage& s = stages[i];
    auto it = speeds.find(s.rank);
    if (it == speeds.end() || !(it->second > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("stages[", i, "]: no speed for rank ", s.rank));
    }
    if (s.layer_end > layer_costs.size() || s.layer_begin >= s.layer_end) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stages[", i, "]: layers [", s.layer_begin, ", ", s.layer_end,
          ") outside the model's ", layer_costs.size()));
    }
    double cost = 0;
    for (uint32_t l = s.layer_begin; l < s.layer_end; ++l) {
      cost += layer_costs[l];
    }
    const double t = cost / it->second;
    sum += t;
    e.bottleneck_s = std::max(e.bottleneck_s, t);
  }
  e.step_s = sum + (std::max<uint32_t>(micro_batches, 1) - 1) * e.bottleneck_s;
  e.samples_per_s = micro_batches * samples_per_micro_batch / e.step_s;
  return e;
}

std::vector<Stage> SplitLayers(const std::vector<int32_t>& ranks,
                               const std::map<int32_t, double>& speeds,
                               const std::vector<double>& layer_costs,
                               uint32_t micro_batches) {
  const size_t n = layer_costs.size();
  std::vector<double> prefix(n + 1, 0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + layer_costs[i];
  std::set<double> limits;
  for (int32_t r : ranks) {
    for (size_t b = 0; b < n; ++b) {
      for (size_t e = b + 1; e <= n; ++e) {
        limits.insert((prefix[e] - prefix[b]) / speeds.at(r));
      }
    }
  }
  double best_step = kInf;
  std::vector<Stage> best;
  for (double limit : limits) {
    std::optional<Split> s = MinSumSplit(ranks, speeds, prefix, limit);
    if (!s) continue;
    double bott = 0;
    for (const Stage& st : s->stages) {
      bott = std::max(bott, (prefix[st.layer_end] - prefix[st.layer_begin]) /
                                speeds.at(st.rank));
    }
    const double step = s->total + (micro_batches - 1.0) * bott;
    if (step < best_step * (1 - 1e-12)) {
      best_step = step;
      best = std::move(s->stages);
    }
  }
  return best;
}

absl::StatusOr<Placement> ComputePlacement(const PlacementInput& in) {
  if (absl::Status s = Validate(in); !s.ok()) return s;
  std::vector<int32_t> ranks = in.ranks;
  if (ranks.empty()) {
    for (const auto& [r, unused] : in.speeds) ranks.push_back(r);
  }
  const size_t n = in.layer_costs.size();
  std::vector<int32_t> usable(ranks.begin(),
                              ranks.begin() + std::min(n, ranks.size()));
  std::optional<Placement> best;
  for (const std::vector<int32_t>& drop : DropCandidates(usable, in)) {
    std::vector<int32_t> kept;
    for (int32_t r : usable) {
      if (std::find(drop.begin(), drop.end(), r) == drop.end()) {
        kept.push_back(r);
      }
    }
    Placement p;
    p.stages = SplitLayers(kept, in.speeds, in.layer_costs, in.micro_batches);
    absl::StatusOr<Estimate> e =
        EstimateStages(p.stages, in.speeds, in.layer_costs, in.micro_batches,
                       in.samples_per_micro_batch);
    if (!e.ok()) return e.status();
    p.estimate = *e;
    // Keep more ranks unless excluding is faster by more than rounding.
    if (best && !(p.estimate.samples_per_s >
                  best->estimate.samples_per_s * (1 + 1e-9))) {
      continue;
    }
    p.excluded = drop;
    for (size_t i = usable.size(); i < ranks.size(); ++i) {
      p.excluded.push_back(ranks[i]);
    }
    std::sort(p.excluded.begin(), p.excluded.end());
    best = std::move(p);
  }
  return *best;
}

uint32_t MovedLayers(const std::vector<Stage>& from,
                     const std::vector<Stage>& to) {
  auto owner = [](const std::vector<Stage>& st, uint32_t l) -> int64_t {
    for (const Stage& s : st) {
      if (s.layer_begin <= l && l < s.layer_end) return s.rank;
    }
    return -1;
  };
  uint32_t n = 0, end = 0;
  for (const Stage& s : from) end = std::max(end, s.layer_end);
  for (const Stage& s : to) end = std::max(end, s.layer_end);
  for (uint32_t l = 0; l < end; ++l) {
    if (owner(from, l) != owner(to, l)) ++n;
  }
  return n;
}

}  // namespace pitstop::controller::lora
