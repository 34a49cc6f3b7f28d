"""EDiT's pseudo-gradient penalty: an anomaly filter on each worker's
pseudo-gradient norm.

Per worker, an exponentially weighted mean and variance of the norm
(alpha 0.02). After ``warmup`` observations of a worker, its z-score
z = (norm - mean) / std decides: z > ``z_threshold`` (3) marks the worker
anomalous for this round: its update is dropped (weight 0) and its
statistics are not updated with the outlier. The other workers are
weighted by softmax(-z) (a worker whose norm is high but below the
threshold counts less), and a kept norm above mean + ``clip_z`` (2) *
std is clipped onto that cap. The clip must sit below the drop threshold
to act at all: a kept norm has z <= z_threshold, so a cap at z_threshold
would never bind. Norms between the two are suspicious but not dropped:
they count, scaled down. Before the warm-up ends all workers weigh the same
and nothing is clipped.

The standard deviation used for z and the cap is at least ``min_rel_std``
(0.1) times the worker's mean: a worker whose norms have been very steady
has an EWMA variance near zero, and without a floor an ordinary 5 %
fluctuation would score z > 3 and a good update would be thrown away.
With the floor a norm must exceed its mean by 30 % (3 x 0.1) before it
can be dropped; loss spikes move the norm by multiples, not percent.

Pure Python floats: every rank feeds the same all-gathered norms in the
same order, so every rank computes the same weights (model consistency).
"""

import math


class PseudoGradientPenalty:
    def __init__(self, world_size, alpha=0.02, warmup=120, z_threshold=3.0,
                 eps=1e-12, min_rel_std=0.1, clip_z=2.0):
        if world_size <= 0:
            raise ValueError("world_size: must be > 0")
        if not 0.0 < alpha <= 1.0:
            raise ValueError("alpha: must be in (0, 1], got %r" % alpha)
        self.world_size = world_size
        self.alpha = alpha
        self.warmup = warmup
        self.z_threshold = z_threshold
        self.eps = eps
        if min_rel_std < 0.0:
            raise ValueError("min_rel_std: must be >= 0, got %r" % min_rel_std)
        self.min_rel_std = min_rel_std
        if not 0.0 < clip_z <= z_threshold:
            raise ValueError("clip_z: must be in (0, z_threshold], got %r"
                             % clip_z)
        self.clip_z = clip_z
        self.mean = [0.0] * world_size
        self.var = [0.0] * world_size
        self.count = [0] * world_size
        self.anomalies = [0] * world_size

    def z_scores(self, norms):
        zs = []
        for i, n in enumerate(norms):
            if self.count[i] < max(self.warmup, 1):
                zs.append(0.0)
            else:
                zs.append((n - self.mean[i]) / self.std(i))
        return zs

    def std(self, i):
        """Worker i's standard deviation as judged: the EWMA one, at least
        min_rel_std x its mean."""
        return max(math.sqrt(self.var[i] + self.eps),
                   self.min_rel_std * abs(self.mean[i]))

    def _observe(self, i, n):
        if self.count[i] == 0:
            self.mean[i] = n
            self.var[i] = 0.0
        else:
            # West's EWMA variance update.
            d = n - self.mean[i]
            incr = self.alpha * d
            self.mean[i] += incr
            self.var[i] = (1.0 - self.alpha) * (self.var[i] + d * incr)
        self.count[i] += 1

    def step(self, norms):
        """One synchronisation round. Returns (weights, clip_scales, anomalous):
        weights sum to 1 over kept workers (all 0 if every worker is
        anomalous), clip_scales multiply each worker's pseudo-gradient."""
        if len(norms) != self.world_size:
            raise ValueError("norms: expected %d, got %d" %
                             (self.world_size, len(norms)))
        zs = self.z_scores(norms)
        anomalous = [(z > self.z_threshold) or not math.isfinite(n)
                     for z, n in zip(zs, norms)]
        scales = []
        for i, n in enumerate(norms):
            if self.count[i] >= max(self.warmup, 1) and not anomalous[i]:
                cap = self.mean[i] + self.clip_z * self.std(i)
                scales.append(min(1.0, cap / n) if n > cap else 1.0)
            else:
                scales.append(1.0)
        kept = [i for i in range(self.world_size) if not anomalous[i]]
        weights = [0.0] * self.world_size
        if kept:
            m = min(zs[i] for i in kept)
            ex = {i: math.exp(-(zs[i] - m)) for i in kept}
            tot = sum(ex.values())
            for i in kept:
                weights[i] = ex[i] / tot
        for i, n in enumerate(norms):
            if anomalous[i]:
                self.anomalies[i] += 1
            else:
                self._observe(i, n)
        return weights, scales, anomalous

    def state_dict(self):
        return {"mean": list(self.mean), "var": list(self.var),
                "count": list(self.count), "anomalies": list(self.anomalies)}
