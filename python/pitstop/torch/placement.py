"""Placement of a multi-LoRA pipeline: which layers each rank holds.

A pure function (no torch, no I/O) shared by the trainer and its tests; the
controller has the same computation in C++ (src/controller/lora/placement.h)
and both are tested against the same cases.

Model: the base model is a list of layers with a cost per micro-batch each
(``layer_costs``, arbitrary units, e.g. FLOPs); rank r computes
``speeds[r]`` units per second. A stage on rank r holding layers
[b, e) takes ``sum(layer_costs[b:e]) / speeds[r]`` seconds per micro-batch.
A step pushes ``micro_batches`` micro-batches through the pipeline
(forwards, then backwards, GPipe-style), so it takes about

    sum(stage times) + (micro_batches - 1) * max(stage times)

(fill and drain once, then one micro-batch per bottleneck interval), and
the pipeline's throughput is micro_batches * samples_per_micro_batch / that.

``compute_placement`` keeps the ranks in their pipeline order (layers stay
contiguous, moves stay between neighbours), splits the layers to minimise
that step time (exact: a dynamic programme per candidate bottleneck), and
tries excluding
ranks (every subset for up to 8 ranks, else the slowest ones one by one)
when a shorter pipeline is faster. Ties keep more ranks, then the layer
split closest to the front.
"""

import itertools

__all__ = ["Placement", "compute_placement", "estimate", "split_layers"]


class Placement:
    """Stages in pipeline order: [(rank, layer_begin, layer_end)]."""

    __slots__ = ("stages", "excluded", "step_s", "samples_per_s",
                 "bottleneck_s")

    def __init__(self, stages, excluded=(), step_s=0.0, samples_per_s=0.0,
                 bottleneck_s=0.0):
        self.stages = [tuple(int(v) for v in s) for s in stages]
        self.excluded = sorted(int(r) for r in excluded)
        self.step_s = step_s
        self.samples_per_s = samples_per_s
        self.bottleneck_s = bottleneck_s

    def ranks(self):
        return [s[0] for s in self.stages]

    def owner(self, layer):
        for r, b, e in self.stages:
            if b <= layer < e:
                return r
        raise KeyError("layer %d is in no stage of %r" % (layer, self))

    def layers_of(self, rank):
        for r, b, e in self.stages:
            if r == rank:
                return (b, e)
        return None

    def key(self):
        return (tuple(self.stages), tuple(self.excluded))

    def __eq__(self, other):
        return isinstance(other, Placement) and self.key() == other.key()

    def __hash__(self):
        return hash(self.key())

    def __repr__(self):
        return "Placement(stages=%r, excluded=%r, samples_per_s=%.3f)" % (
            self.stages, self.excluded, self.samples_per_s)

    def to_dict(self):
        return {"stages": [list(s) for s in self.stages],
                "excluded": list(self.excluded),
                "samples_per_s": self.samples_per_s}


def _check(speeds, layer_costs, micro_batches):
    if not layer_costs:
        raise ValueError("layer_costs: empty")
    for i, c in enumerate(layer_costs):
        if not c > 0:
            raise ValueError("layer_costs[%d]: must be > 0, got %r" % (i, c))
    if not speeds:
        raise ValueError("speeds: empty")
    for r, s in speeds.items():
        if not s > 0:
            raise ValueError("speeds[%d]: must be > 0, got %r" % (r, s))
    if micro_batches < 1:
        raise ValueError("micro_batches: must be >= 1, got %r" % micro_batches)


def estimate(stages, speeds, layer_costs, micro_batches,
             samples_per_micro_batch=1):
    """(step_s, samples_per_s, bottleneck_s) of `stages` at `speeds`."""
    times = [sum(layer_costs[b:e]) / speeds[r] for r, b, e in stages]
    bottleneck = max(times)
    step_s = sum(times) + (micro_batches - 1) * bottleneck
    return (step_s, micro_batches * samples_per_micro_batch / step_s,
            bottleneck)


def _min_sum_split(ranks, speeds, prefix, limit):
    """Split minimising the sum of stage times with every stage <= limit;
    (sum, stages) or None when no split fits."""
    n, p = len(prefix) - 1, len(ranks)
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(p + 1)]
    cut = [[0] * (n + 1) for _ in range(p + 1)]
    best[0][0] = 0.0
    lim = limit * (1 + 1e-12)
    for i in range(1, p + 1):
        speed = speeds[ranks[i - 1]]
        for j in range(i, n - (p - i) + 1):
            for k in range(i - 1, j):
                if best[i - 1][k] == inf:
                    continue
                t = (prefix[j] - prefix[k]) / speed
                if t > lim:
                    continue
                v = best[i - 1][k] + t
                if v < best[i][j] - 1e-12 * max(1.0, abs(v)):  # earliest wins
                    best[i][j] = v
                    cut[i][j] = k
    if best[p][n] == inf:
        return None
    stages, j = [], n
    for i in range(p, 0, -1):
        k = cut[i][j]
        stages.append((ranks[i - 1], k, j))
        j = k
    stages.reverse()
    return best[p][n], stages


def split_layers(ranks, speeds, layer_costs, micro_batches=8):
    """Contiguous split of the layers over `ranks` (in order, each at least
    one layer) minimising the estimated step time sum + (mb - 1) * max:
    for every candidate bottleneck T (the time of some contiguous layer
    range on some rank) the split with the smallest sum of stage times
    whose stages all take <= T; the best of these is exact. Returns
    [(rank, b, e)]."""
    n, p = len(layer_costs), len(ranks)
    if p > n:
        raise ValueError("%d ranks for %d layers: a stage needs a layer" %
                         (p, n))
    prefix = [0.0]
    for c in layer_costs:
        prefix.append(prefix[-1] + c)
    limits = sorted({(prefix[e] - prefix[b]) / speeds[r] for r in ranks
                     for b in range(n) for e in range(b + 1, n + 1)})
    best = None
    for limit in limits:
        r = _min_sum_split(ranks, speeds, prefix, limit)
        if r is None:
            continue
        total, stages = r
        bott = max((prefix[e] - prefix[b]) / speeds[q] for q, b, e in stages)
        step = total + (micro_batches - 1) * bott
        if best is None or step < best[0] * (1 - 1e-12):
            best = (step, stages)
    return best[1]


def compute_placement(speeds, layer_costs, ranks=None, micro_batches=8,
                      samples_per_micro_batch=1, allow_exclude=True,
                      min_ranks=1):
    """The fastest placement for ranks at measured `speeds`.

    speeds: {rank: units per second}; layer_costs: cost per micro-batch per
    layer; ranks: pipeline order (default: sorted). Raises ValueError naming
    the bad argument."""
    _check(speeds, layer_costs, micro_batches)
    ranks = list(ranks) if ranks is not None else sorted(speeds)
    for r in ranks:
        if r not in speeds:
            raise ValueError("speeds: no speed for rank %d" % r)
    n = len(layer_costs)
    usable = ranks[:n] if len(ranks) > n else ranks
    candidates = [()]
    if allow_exclude and len(usable) > min_ranks:
        max_drop = len(usable) - max(1, min_ranks)
        if len(usable) <= 8:
            for d in range(1, max_drop + 1):
                candidates.extend(itertools.combinations(usable, d))
        else:
            slowest = sorted(usable, key=lambda r: (speeds[r], r))
            candidates.extend(tuple(slowest[:d]) for d in range(1, max_drop + 1))
    best = None
    for drop in candidates:
        kept = [r for r in usable if r not in drop]
        stages = split_layers(kept, speeds, layer_costs, micro_batches)
        step_s, sps, bott = estimate(stages, speeds, layer_costs,
                                     micro_batches, samples_per_micro_batch)
        excluded = list(drop) + [r for r in ranks if r not in usable]
        # Keep more ranks unless excluding is faster by more than rounding.
        if best is None or sps > best.samples_per_s * (1 + 1e-9):
            best = Placement(stages, excluded, step_s, sps, bott)
    return best
