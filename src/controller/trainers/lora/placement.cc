#include "src/controller/trainers/lora/placement.h"

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
                                 double limit, uint32_t max_layers) {
  const size_t n = prefix.size() - 1, p = ranks.size();
  std::vector<std::vector<double>> best(p + 1,
                                        std::vector<double>(n + 1, kInf));
  std::vector<std::vector<size_t>> cut(p + 1, std::vector<size_t>(n + 1, 0));
  best[0][0] = 0;
  const double lim = limit * (1 + 1e-12);
  for (size_t i = 1; i <= p; ++i) {
    const double speed = speeds.at(ranks[i - 1]);
    for (size_t j = i; j + (p - i) <= n; ++j) {
      const size_t lo = max_layers == 0 || j < max_layers
                            ? i - 1
                            : std::max(i - 1, j - max_layers);
      for (size_t k = lo; k < j; ++k) {
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
  if (in.max_pipelines < 1) {
    return absl::InvalidArgumentError("max_pipelines: must be >= 1");
  }
  if (in.max_pipelines > 1) {
    if (in.adapters.empty()) {
      return absl::InvalidArgumentError(
          "adapters: required for several pipelines");
    }
    if (in.micro_batches % in.adapters.size() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "micro_batches: ", in.micro_batches, " is not a multiple of ",
          in.adapters.size(), " adapters"));
    }
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
                               uint32_t micro_batches, uint32_t max_layers) {
  const size_t n = layer_costs.size();
  if (max_layers > 0 && ranks.size() * max_layers < n) return {};
  std::vector<double> prefix(n + 1, 0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + layer_costs[i];
  std::set<double> limits;
  for (int32_t r : ranks) {
    for (size_t b = 0; b < n; ++b) {
      for (size_t e = b + 1; e <= n; ++e) {
        if (max_layers > 0 && e - b > max_layers) break;
        limits.insert((prefix[e] - prefix[b]) / speeds.at(r));
      }
    }
  }
  double best_step = kInf;
  std::vector<Stage> best;
  for (double limit : limits) {
    std::optional<Split> s =
        MinSumSplit(ranks, speeds, prefix, limit, max_layers);
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

std::vector<std::vector<std::vector<int32_t>>> RankGroups(
    const std::vector<int32_t>& kept, size_t q) {
  constexpr size_t kMaxGroupedRanks = 16;  // more: equal sizes only
  const size_t n = kept.size();
  std::vector<std::vector<std::vector<int32_t>>> out;
  if (q == 0 || q > n) return out;
  auto cut = [&](const std::vector<size_t>& bounds) {
    std::vector<std::vector<int32_t>> g;
    for (size_t i = 0; i + 1 < bounds.size(); ++i) {
      g.emplace_back(kept.begin() + bounds[i], kept.begin() + bounds[i + 1]);
    }
    out.push_back(std::move(g));
  };
  if (n > kMaxGroupedRanks) {
    std::vector<size_t> bounds = {0};
    for (size_t i = 0; i < q; ++i) {
      bounds.push_back(bounds.back() + n / q + (i < n % q ? 1 : 0));
    }
    cut(bounds);
    return out;
  }
  // Cut positions 1..n-1, q - 1 of them, in lexicographic order (as
  // Python's itertools.combinations).
  std::vector<size_t> c(q - 1);
  for (size_t i = 0; i < c.size(); ++i) c[i] = i + 1;
  for (;;) {
    std::vector<size_t> bounds = {0};
    bounds.insert(bounds.end(), c.begin(), c.end());
    bounds.push_back(n);
    cut(bounds);
    // Next combination.
    size_t i = c.size();
    while (i > 0 && c[i - 1] == n - 1 - (c.size() - i)) --i;
    if (i == 0) break;
    ++c[i - 1];
    for (size_t j = i; j < c.size(); ++j) c[j] = c[j - 1] + 1;
  }
  return out;
}

namespace {

struct Candidate {
  double step_s = 0, bottleneck_s = 0;
  std::vector<Pipeline> pipelines;
};

double StageTime(const Stage& s, const std::map<int32_t, double>& speeds,
                 const std::vector<double>& costs) {
  double c = 0;
  for (uint32_t l = s.layer_begin; l < s.layer_end; ++l) c += costs[l];
  return c / speeds.at(s.rank);
}

// Layer splits and adapter shares of `groups`; nullopt when a group cannot
// hold the model.
std::optional<Candidate> PipelinesFor(
    const std::vector<std::vector<int32_t>>& groups, const PlacementInput& in,
    const std::vector<uint32_t>& adapters, uint32_t per_adapter) {
  struct Run {
    double step_s = 0;
    std::vector<Stage> stages;
  };
  std::map<std::pair<size_t, uint32_t>, std::optional<Run>> memo;
  auto run = [&](size_t g, uint32_t a) -> const std::optional<Run>& {
    auto it = memo.find({g, a});
    if (it != memo.end()) return it->second;
    std::optional<Run> r;
    std::vector<Stage> st =
        SplitLayers(groups[g], in.speeds, in.layer_costs, per_adapter * a,
                    in.max_layers_per_rank);
    if (!st.empty()) {
      r = Run{EstimateStages(st, in.speeds, in.layer_costs, per_adapter * a)
                  ->step_s,
              std::move(st)};
    }
    return memo.emplace(std::make_pair(g, a), std::move(r)).first->second;
  };
  const size_t q = groups.size();
  std::vector<uint32_t> counts(q, 1);
  for (size_t g = 0; g < q; ++g) {
    if (!run(g, 1)) return std::nullopt;
  }
  for (size_t extra = q; extra < adapters.size(); ++extra) {
    double best = kInf;
    size_t pick = 0;
    for (size_t g = 0; g < q; ++g) {
      const double t = run(g, counts[g] + 1)->step_s;
      if (t < best * (1 - 1e-12)) {
        best = t;
        pick = g;
      }
    }
    ++counts[pick];
  }
  Candidate c;
  size_t next = 0;
  for (size_t g = 0; g < q; ++g) {
    const Run& r = *run(g, counts[g]);
    c.step_s = std::max(c.step_s, r.step_s);
    for (const Stage& s : r.stages) {
      c.bottleneck_s =
          std::max(c.bottleneck_s, StageTime(s, in.speeds, in.layer_costs));
    }
    Pipeline p;
    p.stages = r.stages;
    p.adapters.assign(adapters.begin() + next,
                      adapters.begin() + next + counts[g]);
    next += counts[g];
    c.pipelines.push_back(std::move(p));
  }
  return c;
}

}  // namespace

std::vector<Stage> Placement::AllStages() const {
  std::vector<Stage> out;
  for (const Pipeline& p : pipelines) {
    out.insert(out.end(), p.stages.begin(), p.stages.end());
  }
  return out;
}

absl::StatusOr<Estimate> EstimatePipelines(
    const std::vector<Pipeline>& pipelines,
    const std::map<int32_t, double>& speeds,
    const std::vector<double>& layer_costs, uint32_t micro_batches,
    double samples_per_micro_batch, uint32_t n_adapters) {
  if (pipelines.empty()) return absl::InvalidArgumentError("pipelines: empty");
  if (pipelines.size() == 1 && pipelines[0].adapters.empty()) {
    return EstimateStages(pipelines[0].stages, speeds, layer_costs,
                          micro_batches, samples_per_micro_batch);
  }
  uint32_t k = n_adapters;
  if (k == 0) {
    for (const Pipeline& p : pipelines) k += p.adapters.size();
  }
  if (k == 0) return absl::InvalidArgumentError("adapters: none");
  const double per_adapter = double(micro_batches) / k;
  Estimate e;
  for (size_t i = 0; i < pipelines.size(); ++i) {
    const Pipeline& p = pipelines[i];
    const double m = per_adapter * (p.adapters.empty() ? k : p.adapters.size());
    // EstimateStages takes whole micro-batches; m may be fractional only
    // for inconsistent input, so compute here.
    absl::StatusOr<Estimate> one =
        EstimateStages(p.stages, speeds, layer_costs, 1);
    if (!one.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("pipelines[", i, "].", one.status().message()));
    }
    const double step = one->step_s + (m - 1) * one->bottleneck_s;
    e.step_s = std::max(e.step_s, step);
    e.bottleneck_s = std::max(e.bottleneck_s, one->bottleneck_s);
  }
  e.samples_per_s = micro_batches * samples_per_micro_batch / e.step_s;
  return e;
}

absl::StatusOr<Placement> ComputePlacement(const PlacementInput& in) {
  if (absl::Status s = Validate(in); !s.ok()) return s;
  std::vector<int32_t> ranks = in.ranks;
  if (ranks.empty()) {
    for (const auto& [r, unused] : in.speeds) ranks.push_back(r);
  }
  const size_t n = in.layer_costs.size();
  const bool several = in.max_pipelines > 1;
  std::vector<uint32_t> adapters = in.adapters;
  std::sort(adapters.begin(), adapters.end());
  std::vector<int32_t> usable(
      ranks.begin(),
      ranks.begin() + (several ? ranks.size() : std::min(n, ranks.size())));
  std::optional<Placement> best;
  auto consider = [&](const std::vector<Pipeline>& pipes, double step_s,
                      double bottleneck_s, const std::vector<int32_t>& drop) {
    Placement p;
    p.pipelines = pipes;
    p.estimate.step_s = step_s;
    p.estimate.bottleneck_s = bottleneck_s;
    p.estimate.samples_per_s =
        in.micro_batches * in.samples_per_micro_batch / step_s;
    // More ranks, then fewer pipelines, unless strictly faster (by more
    // than rounding).
    if (best && !(p.estimate.samples_per_s >
                  best->estimate.samples_per_s * (1 + 1e-9))) {
      return;
    }
    p.excluded = drop;
    for (int32_t r : ranks) {
      if (std::find(usable.begin(), usable.end(), r) == usable.end()) {
        p.excluded.push_back(r);
      }
    }
    std::sort(p.excluded.begin(), p.excluded.end());
    best = std::move(p);
  };
  for (const std::vector<int32_t>& drop : DropCandidates(usable, in)) {
    std::vector<int32_t> kept;
    for (int32_t r : usable) {
      if (std::find(drop.begin(), drop.end(), r) == drop.end()) {
        kept.push_back(r);
      }
    }
    const size_t top = std::min<size_t>(
        {in.max_pipelines, kept.size(), several ? adapters.size() : 1});
    for (size_t q = 1; q <= top; ++q) {
      if (q == 1) {
        if (kept.size() > n) continue;
        std::vector<Stage> st =
            SplitLayers(kept, in.speeds, in.layer_costs, in.micro_batches,
                        in.max_layers_per_rank);
        if (st.empty()) continue;
        absl::StatusOr<Estimate> e =
            EstimateStages(st, in.speeds, in.layer_costs, in.micro_batches, 1);
        if (!e.ok()) return e.status();
        Pipeline p{std::move(st), several ? adapters : std::vector<uint32_t>{}};
        consider({p}, e->step_s, e->bottleneck_s, drop);
        continue;
      }
      const uint32_t per_adapter = in.micro_batches / adapters.size();
      for (const auto& groups : RankGroups(kept, q)) {
        bool fits = true;
        for (const auto& g : groups) fits &= g.size() <= n;
        if (!fits) continue;
        std::optional<Candidate> c =
            PipelinesFor(groups, in, adapters, per_adapter);
        if (c) consider(c->pipelines, c->step_s, c->bottleneck_s, drop);
      }
    }
  }
  if (!best) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_layers_per_rank: ", n, " layers do not fit on ", usable.size(),
        " ranks of ", in.max_layers_per_rank, " layers"));
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

uint32_t MovedLayers(const Placement& from, const Placement& to,
                     const std::vector<uint32_t>& adapters) {
  auto pipe_of = [](const Placement& p, uint32_t a) -> const Pipeline* {
    for (const Pipeline& q : p.pipelines) {
      if (q.adapters.empty() || std::find(q.adapters.begin(), q.adapters.end(),
                                          a) != q.adapters.end()) {
        return &q;
      }
    }
    return nullptr;
  };
  auto owner = [](const Pipeline* q, uint32_t l) -> int64_t {
    if (q == nullptr) return -1;
    for (const Stage& s : q->stages) {
      if (s.layer_begin <= l && l < s.layer_end) return s.rank;
    }
    return -1;
  };
  uint32_t end = 0;
  for (const Stage& s : from.AllStages()) end = std::max(end, s.layer_end);
  for (const Stage& s : to.AllStages()) end = std::max(end, s.layer_end);
  std::set<std::pair<uint32_t, int64_t>> got;
  for (uint32_t l = 0; l < end; ++l) {
    std::set<int64_t> was;
    for (const Pipeline& q : from.pipelines) was.insert(owner(&q, l));
    for (const Pipeline& q : to.pipelines) {
      const int64_t r = owner(&q, l);
      if (!was.contains(r)) got.insert({l, r});
    }
    for (uint32_t a : adapters) {
      const int64_t src = owner(pipe_of(from, a), l);
      const int64_t dst = owner(pipe_of(to, a), l);
      if (src != dst) got.insert({l, dst});
    }
  }
  return got.size();
}

}  // namespace pitstop::controller::lora
