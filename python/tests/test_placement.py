"""compute_placement: the shared hand-worked cases (the C++ test reads the
same file) and a brute force over every contiguous split."""

import itertools
import json
import os
import random

import pytest

from pitstop.torch.placement import compute_placement, estimate, split_layers

CASES = os.path.join(os.path.dirname(__file__), "..", "..", "tests",
                     "controller", "lora", "placement_cases.json")


def load_cases():
    with open(CASES) as f:
        return json.load(f)["cases"]


@pytest.mark.parametrize("case", load_cases(), ids=lambda c: c["name"])
def test_shared_cases(case):
    speeds = {int(r): float(s) for r, s in case["speeds"].items()}
    p = compute_placement(speeds, case["layer_costs"],
                          micro_batches=case["micro_batches"])
    assert p.excluded == case["excluded"]
    assert [e - b for _, b, e in p.stages] == case["layers_per_stage"]
    assert p.step_s == pytest.approx(case["step_s"])
    assert p.bottleneck_s == pytest.approx(case["bottleneck_s"])
    assert p.samples_per_s == pytest.approx(case["micro_batches"] /
                                            case["step_s"])
    # Stages contiguous, in rank order, covering every layer once.
    assert p.stages[0][1] == 0 and p.stages[-1][2] == len(case["layer_costs"])
    for a, b in zip(p.stages, p.stages[1:]):
        assert a[2] == b[1] and a[0] < b[0]


def brute_force(ranks, speeds, costs, mb):
    n, best = len(costs), None
    for cuts in itertools.combinations(range(1, n), len(ranks) - 1):
        bounds = (0,) + cuts + (n,)
        stages = [(r, bounds[i], bounds[i + 1]) for i, r in enumerate(ranks)]
        step = estimate(stages, speeds, costs, mb)[0]
        best = step if best is None else min(best, step)
    return best


def test_split_is_optimal_against_brute_force():
    rnd = random.Random(17)
    for _ in range(60):
        p = rnd.randint(1, 4)
        n = rnd.randint(p, 9)
        ranks = list(range(p))
        speeds = {r: rnd.choice([0.25, 0.5, 1.0, 1.5, 2.0]) for r in ranks}
        costs = [rnd.choice([1.0, 2.0, 3.0, 0.5]) for _ in range(n)]
        mb = rnd.randint(1, 8)
        stages = split_layers(ranks, speeds, costs, mb)
        got = estimate(stages, speeds, costs, mb)[0]
        assert got == pytest.approx(brute_force(ranks, speeds, costs, mb)), (
            speeds, costs, mb, stages)


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match=r"layer_costs\[1\]"):
        compute_placement({0: 1.0}, [1.0, 0.0])
    with pytest.raises(ValueError, match=r"speeds\[2\]"):
        compute_placement({0: 1.0, 2: -1.0}, [1.0, 1.0])
    with pytest.raises(ValueError, match="no speed for rank 5"):
        compute_placement({0: 1.0}, [1.0], ranks=[0, 5])


def test_more_ranks_than_layers_leaves_the_rest_out():
    p = compute_placement({0: 1.0, 1: 1.0, 2: 1.0}, [1.0, 1.0],
                          micro_batches=4)
    assert len(p.stages) <= 2
    assert 2 in p.excluded
