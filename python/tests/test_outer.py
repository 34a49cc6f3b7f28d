"""The outer sync's weighting (pitstop.torch.edit.outer_weights)."""

import pytest

from pitstop.torch.edit import outer_weights
from pitstop.torch.penalty import PseudoGradientPenalty


def warmed(world, per_step, steps, rounds=60):
    p = PseudoGradientPenalty(world, warmup=10)
    for _ in range(rounds):
        outer_weights(p, [per_step * k for k in steps], steps)
    return p


def test_rank_that_took_more_steps_is_not_an_anomaly():
    # A-EDiT: rank 0 usually takes 10 local steps per round; this round the
    # machine gave it CPU for 30. Its pseudo-gradient is 3x longer, but per
    # local step it is as usual: kept, and weighted by the steps it took.
    p = warmed(3, 0.01, [10, 10, 5])
    w, s, anom, judged = outer_weights(p, [0.3, 0.1, 0.05], [30, 10, 5])
    assert anom == [False, False, False]
    assert judged == pytest.approx([0.01, 0.01, 0.01])
    assert w == pytest.approx([30 / 45, 10 / 45, 5 / 45])
    # Judged on the raw norm (norm_per_step=False) the same round would
    # drop rank 0's good update.
    q = PseudoGradientPenalty(3, warmup=10)
    for _ in range(60):
        outer_weights(q, [0.1, 0.1, 0.05], [10, 10, 5], norm_per_step=False)
    _, _, anom, _ = outer_weights(q, [0.3, 0.1, 0.05], [30, 10, 5],
                                  norm_per_step=False)
    assert anom[0]


def test_spike_per_step_is_still_dropped():
    p = warmed(2, 0.01, [10, 10])
    w, _, anom, _ = outer_weights(p, [1.0, 0.1], [10, 10])
    assert anom == [True, False]
    assert w == [0.0, 1.0]


def test_without_penalty_weights_follow_steps_or_are_equal():
    w, s, anom, _ = outer_weights(None, [1.0, 1.0], [30, 10])
    assert w == pytest.approx([0.75, 0.25]) and s == [1.0, 1.0]
    w, _, _, _ = outer_weights(None, [1.0, 1.0], [30, 10],
                               weight_by_steps=False)
    assert w == [0.5, 0.5]
    # A rank reporting no steps contributes nothing (and never divides by 0).
    w, _, _, judged = outer_weights(None, [0.0, 1.0], [0, 4])
    assert w == [0.0, 1.0] and judged == [0.0, 0.25]


def test_timed_sync_joins_at_the_last_step_boundary_that_fits():
    from pitstop.torch.edit import timed_sync_due
    # 600 ms period, 100 ms steps: after 500 ms the next step would end at
    # 600 -> sync now; after 450 ms it ends at 550 -> one more step.
    assert timed_sync_due(0.500, 0.100, 600)
    assert not timed_sync_due(0.450, 0.100, 600)
    # A slow rank (250 ms steps) stops at 400 ms instead of running to 650.
    assert timed_sync_due(0.400, 0.250, 600)
    assert not timed_sync_due(0.300, 0.250, 600)
    # No estimate: the first boundary at or past the deadline.
    assert not timed_sync_due(0.599, 0.0, 600)
    assert timed_sync_due(0.600, 0.0, 600)
    # A step longer than the period: every step is a sync point.
    assert timed_sync_due(0.0, 0.9, 600)
