import math
import random

import pytest

from pitstop.torch.penalty import PseudoGradientPenalty


def ewma_reference(xs, alpha):
    """Mean and variance by the textbook recursion, computed separately."""
    mean, var = xs[0], 0.0
    for x in xs[1:]:
        diff = x - mean
        mean = mean + alpha * diff
        var = (1 - alpha) * (var + alpha * diff * diff)
    return mean, var


def test_statistics_match_ewma_recursion():
    rng = random.Random(7)
    p = PseudoGradientPenalty(2, alpha=0.02, warmup=10**9)
    xs0 = [1.0 + 0.1 * rng.gauss(0, 1) for _ in range(500)]
    xs1 = [5.0 + 0.5 * rng.gauss(0, 1) for _ in range(500)]
    for a, b in zip(xs0, xs1):
        p.step([a, b])
    m0, v0 = ewma_reference(xs0, 0.02)
    m1, v1 = ewma_reference(xs1, 0.02)
    assert p.mean[0] == pytest.approx(m0, rel=1e-12)
    assert p.var[0] == pytest.approx(v0, rel=1e-9)
    assert p.mean[1] == pytest.approx(m1, rel=1e-12)
    # Converges to the stream's moments (per worker, not pooled).
    assert p.mean[0] == pytest.approx(1.0, abs=0.05)
    assert math.sqrt(p.var[1]) == pytest.approx(0.5, rel=0.35)


def test_no_verdict_during_warmup_then_spike_is_dropped():
    rng = random.Random(1)
    p = PseudoGradientPenalty(4, alpha=0.02, warmup=120, z_threshold=3.0)
    for r in range(120):
        norms = [1.0 + 0.05 * rng.gauss(0, 1) for _ in range(4)]
        w, s, anom = p.step(norms)
        assert not any(anom)
        assert w == pytest.approx([0.25] * 4)
        assert s == [1.0] * 4
    mean_before = list(p.mean)
    w, s, anom = p.step([1.0, 1.0, 10.0, 1.0])
    assert anom == [False, False, True, False]
    assert w[2] == 0.0
    assert sum(w) == pytest.approx(1.0)
    assert p.mean[2] == mean_before[2]  # the outlier is not learned
    assert p.anomalies == [0, 0, 1, 0]


def test_spike_during_warmup_is_not_judged():
    p = PseudoGradientPenalty(2, alpha=0.02, warmup=120)
    for r in range(119):
        w, s, anom = p.step([50.0 if r == 100 else 1.0, 1.0])
        assert not any(anom) and w == [0.5, 0.5]


def test_moderately_high_norm_is_down_weighted_and_clipped():
    p = PseudoGradientPenalty(3, alpha=0.02, warmup=5, z_threshold=3.0)
    rng = random.Random(3)
    for _ in range(200):
        p.step([1.0 + 0.1 * rng.gauss(0, 1) for _ in range(3)])
    cap = p.mean[1] + 2.0 * p.std(1)  # clip_z 2
    high = p.mean[1] + 2.5 * p.std(1)  # below the threshold: kept
    w, s, anom = p.step([p.mean[0], high, p.mean[2]])
    assert not any(anom)
    assert w[1] < w[0] and w[1] < w[2]  # weighed less
    assert sum(w) == pytest.approx(1.0)
    # ... and clipped onto mean + 2 sd; the ordinary norms are untouched.
    assert s[1] == pytest.approx(cap / high) and s[1] < 1.0
    assert s[0] == 1.0 and s[2] == 1.0


def test_clip_sits_below_the_drop_threshold():
    # A cap at the drop threshold could never bind (a kept norm has
    # z <= 3): it is refused, and so is a non-positive one.
    with pytest.raises(ValueError, match="clip_z"):
        PseudoGradientPenalty(2, z_threshold=3.0, clip_z=3.5)
    with pytest.raises(ValueError, match="clip_z"):
        PseudoGradientPenalty(2, clip_z=0.0)
    # Before the warm-up nothing is clipped.
    p = PseudoGradientPenalty(1, warmup=10)
    for _ in range(5):
        _, s, _ = p.step([1.0])
    _, s, _ = p.step([1.25])
    assert s == [1.0]


def test_non_finite_and_all_anomalous():
    p = PseudoGradientPenalty(2, warmup=0)
    w, s, anom = p.step([float("nan"), 1.0])
    assert anom == [True, False]
    assert w == [0.0, 1.0]
    p2 = PseudoGradientPenalty(2, warmup=3)
    for _ in range(50):
        p2.step([1.0, 1.0])
    p2.var = [1e-4, 1e-4]
    w, s, anom = p2.step([10.0, 10.0])
    assert anom == [True, True]
    assert w == [0.0, 0.0]


def test_bad_arguments():
    with pytest.raises(ValueError, match="world_size"):
        PseudoGradientPenalty(0)
    with pytest.raises(ValueError, match="alpha"):
        PseudoGradientPenalty(2, alpha=0.0)
    with pytest.raises(ValueError, match="norms"):
        PseudoGradientPenalty(2).step([1.0])


def test_steady_worker_keeps_small_fluctuations():
    # A perfectly steady norm has an EWMA variance of ~0: without the
    # relative floor a 5 % fluctuation scores z in the thousands and a
    # good update is dropped.
    p = PseudoGradientPenalty(2, warmup=5)
    for _ in range(50):
        p.step([1.0, 2.0])
    w, s, anom = p.step([1.05, 2.0])
    assert anom == [False, False]
    assert w[0] > 0.0
    assert s == [1.0, 1.0]
    w, s, anom = p.step([1.5, 2.0])  # +50 %: z = 5 against the floor
    assert anom == [True, False]
    strict = PseudoGradientPenalty(2, warmup=5, min_rel_std=0.0)
    for _ in range(50):
        strict.step([1.0, 2.0])
    _, _, anom = strict.step([1.05, 2.0])
    assert anom == [True, False]  # what the floor prevents
    with pytest.raises(ValueError, match="min_rel_std"):
        PseudoGradientPenalty(2, min_rel_std=-1.0)


def test_floor_also_sets_the_clip_cap():
    p = PseudoGradientPenalty(1, warmup=5)
    for _ in range(50):
        p.step([1.0])
    assert p.std(0) == pytest.approx(0.1)
    w, s, anom = p.step([1.2])  # z = 2: kept, at the cap 1.2
    assert not anom[0] and s == [pytest.approx(1.0)]
    cap = p.mean[0] + 2.0 * p.std(0)  # ~1.2 (the 1.2 moved the mean)
    w, s, anom = p.step([1.25])  # z ~ 2.5: kept, clipped onto the cap
    assert not anom[0] and s[0] == pytest.approx(cap / 1.25) and s[0] < 0.97