"""The measurement arithmetic of tools/trainer_demo.py (the local-SGD
demo): interpolation of the time to a target loss and of the loss at a
token count, and the inner learning-rate schedule."""

import argparse
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "tools"))
import trainer_demo  # noqa: E402
import trainer_demo_report as rep  # noqa: E402


EVALS = [(0.0, 0, 4.0, "sync"), (2.0, 1000, 3.0, "sync"),
         (4.0, 2000, 2.0, "timed"), (6.0, 3000, 1.8, "timed")]


def test_time_to_loss_interpolates_between_snapshots():
    # 2.5 is half-way between the snapshots at 2 s (3.0) and 4 s (2.0).
    assert rep.time_to_loss(EVALS, 2.5) == pytest.approx(3.0)
    assert rep.time_to_loss(EVALS, 3.0) == 2.0
    assert rep.time_to_loss(EVALS, 5.0) == 0.0
    assert math.isnan(rep.time_to_loss(EVALS, 1.0))
    # A noisy curve: the first crossing counts.
    noisy = [(0.0, 0, 3.0, "s"), (1.0, 1, 2.0, "s"), (2.0, 2, 2.6, "s"),
             (3.0, 3, 1.0, "s")]
    assert rep.time_to_loss(noisy, 2.5) == pytest.approx(0.5)


def test_loss_at_tokens_interpolates():
    assert rep.loss_at_tokens(EVALS, 1500) == pytest.approx(2.5)
    assert rep.loss_at_tokens(EVALS, 1000) == 3.0
    assert rep.loss_at_tokens(EVALS, 9999) == 1.8  # past the end


def test_lr_schedule_warms_up_then_decays_to_floor():
    args = argparse.Namespace(budget_steps=400, warmup_frac=0.05,
                              min_lr_frac=0.1)
    f = trainer_demo.lr_schedule(args)
    assert f(0) == pytest.approx(1 / 20)
    assert f(19) == pytest.approx(1.0)
    assert f(20) == pytest.approx(1.0)
    assert f(210) == pytest.approx(0.55)  # half-way through the cosine
    assert f(400) == pytest.approx(0.1)
    assert f(600) == pytest.approx(0.1)  # held past the budget
    xs = [f(s) for s in range(20, 401)]
    assert all(b <= a for a, b in zip(xs, xs[1:]))


def test_best_ignores_runs_that_never_reached_the_target():
    assert rep.best([53.4, 48.0, float("nan")]) == 48.0
    assert math.isnan(rep.best([float("nan")]))


def test_half_speed_sleeps_its_own_compute_including_the_optimizer():
    slow = trainer_demo.HalfSpeed(2.0)
    # First step: no optimizer step measured yet.
    assert slow.delay_s(0.030) == pytest.approx(0.030)
    slow.after_step({"optimizer": 0.010, "communication": 0.5})
    # Data + forward + backward of this step + the last optimizer step;
    # communication (waiting for others) is not compute.
    assert slow.delay_s(0.030) == pytest.approx(0.040)
    assert trainer_demo.HalfSpeed(3.0).delay_s(0.01) == pytest.approx(0.02)
    assert trainer_demo.HalfSpeed(1.0).delay_s(0.05) == 0.0
    with pytest.raises(ValueError):
        trainer_demo.HalfSpeed(0.5)


def test_pair_ratios_and_median_step():
    assert rep.pair_ratios([40.0, 30.0], [20.0, 25.0]) == [2.0, 1.2]
    assert math.isnan(rep.pair_ratios([40.0], [float("nan")])[0])
    res = [{"step_walls": [9.0] * 5 + [0.1, 0.3, 0.2]}]
    assert rep.median_step(res) == 0.2  # the first 5 steps left out
