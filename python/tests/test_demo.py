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


def test_cpu_only_half_speed_sleeps_its_own_compute_including_optimizer():
    # device_s 0: the CPU-only mode of rounds 1-4.
    slow = trainer_demo.DeviceTime(0.0, 2.0)
    # First step: no optimizer step measured yet.
    assert slow.delay_s(0.030) == pytest.approx(0.030)
    slow.after_step({"optimizer": 0.010, "communication": 0.5})
    # Data + forward + backward of this step + the last optimizer step;
    # communication (waiting for others) is not compute.
    assert slow.delay_s(0.030) == pytest.approx(0.040)
    assert trainer_demo.DeviceTime(0.0, 3.0).delay_s(0.01) == pytest.approx(0.02)
    assert trainer_demo.DeviceTime(0.0, 1.0).delay_s(0.05) == 0.0
    with pytest.raises(ValueError):
        trainer_demo.DeviceTime(0.0, 0.5)
    with pytest.raises(ValueError):
        trainer_demo.DeviceTime(-0.1, 1.0)


def test_device_time_is_max_of_host_and_device_then_slowed():
    fast = trainer_demo.DeviceTime(0.100, 1.0)
    # Host work 30 ms of a 100 ms device step: the host waits 70 ms.
    assert fast.delay_s(0.030) == pytest.approx(0.070)
    fast.after_step({"optimizer": 0.010})
    # The previous optimizer step is host work of this step too.
    assert fast.delay_s(0.030) == pytest.approx(0.060)
    # Host slower than the device: no wait, and the step is counted.
    fast.after_step({"optimizer": 0.0})
    assert fast.delay_s(0.150) == 0.0
    assert (fast.steps, fast.host_bound) == (3, 1)
    slow = trainer_demo.DeviceTime(0.100, 2.0)
    # Half speed: the step takes 2 x 100 ms in all, whatever the host took.
    assert slow.delay_s(0.030) == pytest.approx(0.170)
    slow.after_step({"optimizer": 0.020})
    assert 0.030 + 0.020 + slow.delay_s(0.030) == pytest.approx(0.200)
    # Host-bound half speed: twice the host time.
    slow.after_step({"optimizer": 0.0})
    assert slow.delay_s(0.150) == pytest.approx(0.150)


def test_rates_and_speedup_bound():
    ev = [(0.0, 0, 4.0, "sync"), (10.0, 1000, 3.0, "sync"),
          (12.0, 1200, 2.9, "timed"), (16.0, 2200, 2.5, "timed")]
    assert rep.rate_after_switch(ev) == pytest.approx(250.0)
    assert math.isnan(rep.rate_after_switch(ev[:3]))  # one local snapshot
    assert math.isnan(rep.rate_after_switch(ev[:2]))  # never switched
    assert rep.sync_rate(ev[:2]) == pytest.approx(100.0)
    # Issue #16's arithmetic: a third synchronous, r = 1.75 -> 1.40x.
    assert rep.speedup_bound(1 / 3, 1.75) == pytest.approx(1.4)
    assert rep.speedup_bound(0.0, 2.0) == pytest.approx(2.0)
    assert rep.speedup_bound(1.0, 2.0) == pytest.approx(1.0)


def test_host_bound_text():
    assert rep.host_bound_text([{"steps": 3}]) == ""
    assert rep.host_bound_text(
        [{"device_steps": 200, "host_bound": 3},
         {"device_steps": 100, "host_bound": 50}]) == \
        ", host-bound steps 2% 50%"


def test_pair_ratios_and_median_step():
    assert rep.pair_ratios([40.0, 30.0], [20.0, 25.0]) == [2.0, 1.2]
    assert math.isnan(rep.pair_ratios([40.0], [float("nan")])[0])
    res = [{"step_walls": [9.0] * 5 + [0.1, 0.3, 0.2]}]
    assert rep.median_step(res) == 0.2  # the first 5 steps left out
