"""Placement of a multi-LoRA pipeline: which layers each rank holds.

A pure function (no torch, no I/O) shared by the trainer and its tests; the
controller has the same computation in C++ (src/controller/trainers/lora/placement.h)
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

Several pipelines (``max_pipelines`` > 1): data-parallel replicas of the
pipeline, each holding every layer (the frozen base is replicated) and a
share of the adapters (adapters are independent: no gradient crosses
pipelines). The kept ranks are cut into contiguous groups in pipeline
order (every cut for up to 16 ranks, else equal sizes); each group's
step time for a micro-batches is T_g(a) = its best split's
sum + (a - 1) x max; adapters go to groups greedily (each group one, then
each next adapter to the group whose step time after it is smallest, the
lowest group on ties: optimal for the largest step time, T_g being
non-decreasing), in adapter order. The pipelines meet at every step's
agreement, so a step takes the largest T_g. ``max_layers_per_rank`` (what
fits in a rank's memory; 0 = no limit) bounds every stage. Ties keep more
ranks, then fewer pipelines.
"""

import itertools

__all__ = ["Placement", "compute_placement", "estimate", "split_layers",
           "estimate_pipelines", "placement_from_directive",
           "validate_placement"]


class Placement:
    """Pipelines, each stages in pipeline order [(rank, layer_begin,
    layer_end)] and the adapters it trains (None: all, one pipeline
    only); excluded ranks hold nothing.

    Placement(stages) is one pipeline; Placement(pipelines=[(stages,
    adapters), ...]) several."""

    __slots__ = ("pipelines", "excluded", "step_s", "samples_per_s",
                 "bottleneck_s")

    def __init__(self, stages=None, excluded=(), step_s=0.0,
                 samples_per_s=0.0, bottleneck_s=0.0, pipelines=None,
                 adapters=None):
        if pipelines is None:
            pipelines = [(stages or [], adapters)]
        self.pipelines = [
            ([tuple(int(v) for v in st) for st in stg],
             None if ad is None else tuple(int(a) for a in ad))
            for stg, ad in pipelines]
        self.excluded = sorted(int(r) for r in excluded)
        self.step_s = step_s
        self.samples_per_s = samples_per_s
        self.bottleneck_s = bottleneck_s

    @property
    def stages(self):
        """Every stage of every pipeline (pipeline after pipeline)."""
        return [st for stg, _ in self.pipelines for st in stg]

    def pipeline_of(self, rank):
        """Index of the pipeline `rank` is in, or None (excluded)."""
        for q, (stg, _) in enumerate(self.pipelines):
            if any(r == rank for r, _, _ in stg):
                return q
        return None

    def ranks(self, pipeline=0):
        return [s[0] for s in self.pipelines[pipeline][0]]

    def adapters_of(self, pipeline, all_adapters):
        ad = self.pipelines[pipeline][1]
        return list(all_adapters) if ad is None else list(ad)

    def pipeline_of_adapter(self, adapter):
        for q, (_, ad) in enumerate(self.pipelines):
            if ad is None or adapter in ad:
                return q
        raise KeyError("adapter %d is in no pipeline of %r" % (adapter, self))

    def owner(self, layer, adapter=None):
        """The rank holding `layer` in `adapter`'s pipeline (default the
        first pipeline)."""
        q = 0 if adapter is None else self.pipeline_of_adapter(adapter)
        for r, b, e in self.pipelines[q][0]:
            if b <= layer < e:
                return r
        raise KeyError("layer %d is in no stage of %r" % (layer, self))

    def owners(self, layer):
        """Every rank holding `layer` (one per pipeline)."""
        return sorted(r for r, b, e in self.stages if b <= layer < e)

    def layers_of(self, rank):
        for r, b, e in self.stages:
            if r == rank:
                return (b, e)
        return None

    def key(self):
        return (tuple((tuple(stg), ad) for stg, ad in self.pipelines),
                tuple(self.excluded))

    def __eq__(self, other):
        return isinstance(other, Placement) and self.key() == other.key()

    def __hash__(self):
        return hash(self.key())

    def __repr__(self):
        if len(self.pipelines) == 1:
            return "Placement(stages=%r, excluded=%r, samples_per_s=%.3f)" % (
                self.stages, self.excluded, self.samples_per_s)
        return "Placement(pipelines=%r, excluded=%r, samples_per_s=%.3f)" % (
            self.pipelines, self.excluded, self.samples_per_s)

    def to_dict(self):
        """The directive's placement dict (pitstop.client.Directive)."""
        return {"pipelines": [{"stages": [list(st) for st in stg],
                               "adapters": None if ad is None else list(ad)}
                              for stg, ad in self.pipelines],
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


def estimate_pipelines(pipelines, speeds, layer_costs, micro_batches,
                       samples_per_micro_batch=1, n_adapters=0):
    """(step_s, samples_per_s, bottleneck_s) of several pipelines
    [(stages, adapters)] meeting every step: micro_batches is of the whole
    step (every adapter); a pipeline with a adapters runs
    micro_batches / n_adapters x a of them (adapters None: all)."""
    if len(pipelines) == 1 and pipelines[0][1] is None:
        return estimate(pipelines[0][0], speeds, layer_costs, micro_batches,
                        samples_per_micro_batch)
    k = n_adapters or sum(len(ad) for _, ad in pipelines)
    per_adapter = micro_batches / k
    step = bott = 0.0
    for stages, ad in pipelines:
        m = per_adapter * (k if ad is None else len(ad))
        st, _, b = estimate(stages, speeds, layer_costs, m)
        step, bott = max(step, st), max(bott, b)
    return step, micro_batches * samples_per_micro_batch / step, bott


def _min_sum_split(ranks, speeds, prefix, limit, max_layers=0):
    """Split minimising the sum of stage times with every stage <= limit
    (and at most max_layers layers, 0 = any); (sum, stages) or None when
    no split fits."""
    n, p = len(prefix) - 1, len(ranks)
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(p + 1)]
    cut = [[0] * (n + 1) for _ in range(p + 1)]
    best[0][0] = 0.0
    lim = limit * (1 + 1e-12)
    for i in range(1, p + 1):
        speed = speeds[ranks[i - 1]]
        for j in range(i, n - (p - i) + 1):
            lo = i - 1 if not max_layers else max(i - 1, j - max_layers)
            for k in range(lo, j):
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


def split_layers(ranks, speeds, layer_costs, micro_batches=8, max_layers=0):
    """Contiguous split of the layers over `ranks` (in order, each at least
    one layer, at most max_layers when > 0) minimising the estimated step
    time sum + (mb - 1) * max: for every candidate bottleneck T (the time
    of some contiguous layer range on some rank) the split with the
    smallest sum of stage times whose stages all take <= T; the best of
    these is exact. Returns [(rank, b, e)], or None when the ranks cannot
    hold the layers within max_layers."""
    n, p = len(layer_costs), len(ranks)
    if p > n:
        raise ValueError("%d ranks for %d layers: a stage needs a layer" %
                         (p, n))
    if max_layers and p * max_layers < n:
        return None
    prefix = [0.0]
    for c in layer_costs:
        prefix.append(prefix[-1] + c)
    limits = sorted({(prefix[e] - prefix[b]) / speeds[r] for r in ranks
                     for b in range(n) for e in range(b + 1, n + 1)
                     if not max_layers or e - b <= max_layers})
    best = None
    for limit in limits:
        r = _min_sum_split(ranks, speeds, prefix, limit, max_layers)
        if r is None:
            continue
        total, stages = r
        bott = max((prefix[e] - prefix[b]) / speeds[q] for q, b, e in stages)
        step = total + (micro_batches - 1) * bott
        if best is None or step < best[0] * (1 - 1e-12):
            best = (step, stages)
    return None if best is None else best[1]


MAX_GROUPED_RANKS = 16  # more kept ranks: only equal-size groups


def rank_groups(kept, q):
    """Ways to cut `kept` (pipeline order) into q contiguous groups: every
    cut for up to MAX_GROUPED_RANKS ranks, else the equal sizes (larger
    groups first)."""
    n = len(kept)
    if n > MAX_GROUPED_RANKS:
        sizes = [n // q + (1 if i < n % q else 0) for i in range(q)]
        bounds = [0]
        for z in sizes:
            bounds.append(bounds[-1] + z)
        return [[kept[bounds[i]:bounds[i + 1]] for i in range(q)]]
    out = []
    for cuts in itertools.combinations(range(1, n), q - 1):
        b = (0,) + cuts + (n,)
        out.append([kept[b[i]:b[i + 1]] for i in range(q)])
    return out


def _pipelines_for(groups, speeds, layer_costs, adapters, per_adapter,
                   max_layers):
    """Layer splits and adapter shares of `groups`: (step_s, bottleneck_s,
    [(stages, adapters)]) or None when a group cannot hold the model."""
    memo = {}

    def run(g, a):
        if (g, a) not in memo:
            st = split_layers(groups[g], speeds, layer_costs,
                              per_adapter * a, max_layers)
            memo[(g, a)] = None if st is None else (
                estimate(st, speeds, layer_costs, per_adapter * a)[0], st)
        return memo[(g, a)]

    q = len(groups)
    counts = [1] * q
    for g in range(q):
        if run(g, 1) is None:
            return None
    for _ in range(len(adapters) - q):
        pick = None
        for g in range(q):
            t = run(g, counts[g] + 1)[0]
            if pick is None or t < pick[0] * (1 - 1e-12):
                pick = (t, g)
        counts[pick[1]] += 1
    pipes, step, bott, nxt = [], 0.0, 0.0, 0
    for g in range(q):
        t, stages = run(g, counts[g])
        step = max(step, t)
        bott = max(bott, estimate(stages, speeds, layer_costs, 1)[2])
        pipes.append((stages, adapters[nxt:nxt + counts[g]]))
        nxt += counts[g]
    return step, bott, pipes


def compute_placement(speeds, layer_costs, ranks=None, micro_batches=8,
                      samples_per_micro_batch=1, allow_exclude=True,
                      min_ranks=1, adapters=None, max_pipelines=1,
                      max_layers_per_rank=0):
    """The fastest placement for ranks at measured `speeds`.

    speeds: {rank: units per second}; layer_costs: cost per micro-batch per
    layer; ranks: pipeline order (default: sorted); micro_batches: of a
    whole step (every adapter); adapters: adapter ids (needed for
    max_pipelines > 1; micro_batches must be a multiple of their number).
    Raises ValueError naming the bad argument, or when no placement fits
    max_layers_per_rank."""
    _check(speeds, layer_costs, micro_batches)
    ranks = list(ranks) if ranks is not None else sorted(speeds)
    for r in ranks:
        if r not in speeds:
            raise ValueError("speeds: no speed for rank %d" % r)
    if max_pipelines < 1:
        raise ValueError("max_pipelines: must be >= 1, got %r" % max_pipelines)
    adapters = None if adapters is None else sorted(int(a) for a in adapters)
    if max_pipelines > 1:
        if not adapters:
            raise ValueError("adapters: required for several pipelines")
        if micro_batches % len(adapters):
            raise ValueError("micro_batches: %d is not a multiple of %d "
                             "adapters" % (micro_batches, len(adapters)))
    n = len(layer_costs)
    usable = ranks[:n] if len(ranks) > n and max_pipelines == 1 else ranks
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
        excluded = list(drop) + [r for r in ranks if r not in usable]
        top = min(max_pipelines, len(kept), len(adapters or ()) or 1)
        for q in range(1, top + 1):
            if q == 1:
                if len(kept) > n:
                    continue
                stages = split_layers(kept, speeds, layer_costs,
                                      micro_batches, max_layers_per_rank)
                if stages is None:
                    continue
                step_s, sps, bott = estimate(stages, speeds, layer_costs,
                                             micro_batches,
                                             samples_per_micro_batch)
                pipes = [(stages, adapters if max_pipelines > 1 else None)]
                cands = [(step_s, sps, bott, pipes)]
            else:
                cands = []
                per_adapter = micro_batches // len(adapters)
                for groups in rank_groups(kept, q):
                    if any(len(g) > n for g in groups):
                        continue
                    r = _pipelines_for(groups, speeds, layer_costs, adapters,
                                       per_adapter, max_layers_per_rank)
                    if r is not None:
                        cands.append((r[0], micro_batches *
                                      samples_per_micro_batch / r[0], r[1],
                                      r[2]))
            for step_s, sps, bott, pipes in cands:
                # More ranks, then fewer pipelines, unless strictly faster
                # (by more than rounding).
                if best is None or sps > best.samples_per_s * (1 + 1e-9):
                    best = Placement(excluded=excluded, step_s=step_s,
                                     samples_per_s=sps, bottleneck_s=bott,
                                     pipelines=pipes)
    if best is None:
        raise ValueError("max_layers_per_rank: %d layers do not fit on %d "
                         "ranks of %d layers" % (n, len(usable),
                                                 max_layers_per_rank))
    return best


def placement_from_directive(d, n_layers, world, adapters=None):
    """Placement of a directive's placement dict, or (None, reason)."""
    p = d.placement or {}
    pipes = p.get("pipelines") or []
    try:
        if not pipes:
            raise ValueError("placement: no pipelines")
        pl = Placement(pipelines=[(q["stages"], q.get("adapters") or None)
                                  for q in pipes],
                       excluded=p.get("excluded", ()))
        validate_placement(pl, n_layers, world, adapters)
    except (ValueError, KeyError, TypeError) as e:
        return None, str(e)
    return pl, ""


def validate_placement(pl, n_layers, world, adapters=None):
    """ValueError naming what is wrong with `pl` (for `adapters`, the
    job's adapter ids, when given)."""
    if not pl.pipelines:
        raise ValueError("placement: no pipelines")
    seen = set()
    several = len(pl.pipelines) > 1
    owned = []
    for q, (stages, ad) in enumerate(pl.pipelines):
        where = "pipelines[%d]." % q if several else ""
        if not stages:
            raise ValueError("%splacement: no stages" % where)
        nxt = 0
        for i, (r, b, e) in enumerate(stages):
            if not 0 <= r < world:
                raise ValueError("%sstages[%d].rank %d: not in world of %d" %
                                 (where, i, r, world))
            if r in seen:
                raise ValueError("%sstages[%d].rank %d: holds two stages" %
                                 (where, i, r))
            seen.add(r)
            if b != nxt or e <= b:
                raise ValueError("%sstages[%d]: layers [%d, %d) do not "
                                 "continue at %d" % (where, i, b, e, nxt))
            nxt = e
        if nxt != n_layers:
            raise ValueError("%splacement: layers end at %d, the model has %d"
                             % (where, nxt, n_layers))
        if ad is None:
            if several:
                raise ValueError("%sadapters: required with several "
                                 "pipelines" % where)
            continue
        if not ad:
            raise ValueError("%sadapters: empty" % where)
        owned += list(ad)
    if owned:
        if len(set(owned)) != len(owned):
            raise ValueError("adapters: %s in two pipelines" %
                             sorted({a for a in owned if owned.count(a) > 1}))
        if adapters is not None and sorted(owned) != sorted(adapters):
            raise ValueError("adapters: pipelines train %s, the job has %s" %
                             (sorted(owned), sorted(adapters)))
    for r in pl.excluded:
        if r in seen:
            raise ValueError("excluded rank %d also holds a stage" % r)
