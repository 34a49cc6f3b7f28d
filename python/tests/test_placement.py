"""compute_placement: the shared hand-worked cases (the C++ test reads the
same file) and a brute force over every contiguous split."""

import itertools
import json
import os
import random

import pytest

from pitstop.torch.placement import (compute_placement, estimate,
                                     estimate_pipelines, split_layers)

CASES = os.path.join(os.path.dirname(__file__), "..", "..", "tests",
                     "controller", "trainers", "lora", "placement_cases.json")


def load_cases():
    with open(CASES) as f:
        return json.load(f)["cases"]


@pytest.mark.parametrize("case", load_cases(), ids=lambda c: c["name"])
def test_shared_cases(case):
    speeds = {int(r): float(s) for r, s in case["speeds"].items()}
    p = compute_placement(speeds, case["layer_costs"],
                          micro_batches=case["micro_batches"],
                          adapters=case.get("adapters"),
                          max_pipelines=case.get("max_pipelines", 1),
                          max_layers_per_rank=case.get("max_layers_per_rank",
                                                       0))
    assert p.excluded == case["excluded"]
    if "pipelines" in case:
        assert [([e - b for _, b, e in stg], list(ad))
                for stg, ad in p.pipelines] == [
            (q["layers_per_stage"], q["adapters"]) for q in case["pipelines"]]
    else:
        assert len(p.pipelines) == 1 and p.pipelines[0][1] is None
        assert [e - b for _, b, e in p.stages] == case["layers_per_stage"]
    assert p.step_s == pytest.approx(case["step_s"])
    assert p.bottleneck_s == pytest.approx(case["bottleneck_s"])
    assert p.samples_per_s == pytest.approx(case["micro_batches"] /
                                            case["step_s"])
    # Stages contiguous, in rank order, covering every layer once.
    for stages, _ in p.pipelines:
        assert stages[0][1] == 0 and stages[-1][2] == len(case["layer_costs"])
        for a, b in zip(stages, stages[1:]):
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


# -- several pipelines ---------------------------------------------------------

def compositions(total, parts, lo=1, hi=None):
    """Every way to write total as `parts` ordered summands in [lo, hi]."""
    if parts == 0:
        if total == 0:
            yield ()
        return
    for first in range(lo, (hi or total) + 1):
        if first > total:
            break
        for rest in compositions(total - first, parts - 1, lo, hi):
            yield (first,) + rest


def brute_force_pipelines(ranks, speeds, costs, mb_per_adapter, n_adapters,
                          max_pipelines, max_layers):
    """Largest samples/s over every kept subset, contiguous rank groups,
    adapter count per group and layer split per group."""
    n, best = len(costs), 0.0
    for keep in range(1, len(ranks) + 1):
        for kept in itertools.combinations(ranks, keep):
            for q in range(1, min(max_pipelines, keep, n_adapters) + 1):
                for sizes in compositions(keep, q, 1, n):
                    groups, at = [], 0
                    for z in sizes:
                        groups.append(kept[at:at + z])
                        at += z
                    for counts in compositions(n_adapters, q):
                        step = 0.0
                        for g, a in zip(groups, counts):
                            m = mb_per_adapter * a
                            gbest = None
                            for split in compositions(n, len(g), 1,
                                                      max_layers or n):
                                b, stages = 0, []
                                for r, z in zip(g, split):
                                    stages.append((r, b, b + z))
                                    b += z
                                t = estimate(stages, speeds, costs, m)[0]
                                gbest = t if gbest is None else min(gbest, t)
                            if gbest is None:
                                step = None
                                break
                            step = max(step, gbest)
                        if step:
                            best = max(best, mb_per_adapter * n_adapters /
                                       step)
    return best


def test_several_pipelines_are_optimal_against_brute_force():
    rnd = random.Random(1717)
    for _ in range(40):
        p = rnd.randint(1, 5)
        n = rnd.randint(2, 6)
        k = rnd.randint(1, 4)
        mpa = rnd.randint(1, 3)
        max_layers = rnd.choice([0, 0, 2, 3, 4])
        if max_layers and max_layers * p < n:
            max_layers = 0
        speeds = {r: rnd.choice([0.25, 0.5, 1.0, 2.0]) for r in range(p)}
        costs = [rnd.choice([1.0, 2.0, 0.5]) for _ in range(n)]
        got = compute_placement(speeds, costs, micro_batches=mpa * k,
                                adapters=list(range(k)), max_pipelines=3,
                                max_layers_per_rank=max_layers)
        want = brute_force_pipelines(list(range(p)), speeds, costs, mpa, k, 3,
                                     max_layers)
        assert got.samples_per_s == pytest.approx(want), (
            speeds, costs, k, mpa, max_layers, got)
        # The placement is what it claims: every pipeline holds every layer
        # within max_layers, adapters split, estimate consistent.
        seen = []
        for stages, ad in got.pipelines:
            assert stages[0][1] == 0 and stages[-1][2] == n
            for a, b in zip(stages, stages[1:]):
                assert a[2] == b[1]
            assert all(not max_layers or e - b <= max_layers
                       for _, b, e in stages)
            seen += list(ad)
        assert sorted(seen) == list(range(k))
        assert estimate_pipelines(got.pipelines, speeds, costs,
                                  mpa * k)[1] == pytest.approx(got.samples_per_s)


def test_two_pipelines_of_two_when_a_rank_holds_half_the_model():
    # 4 ranks, 8 layers, a rank holds at most 4 (memory): one pipeline of 4
    # stages or two of 2. Healthy: two pipelines (a shorter pipeline has
    # smaller bubbles), adapters 2 + 2.
    costs = [1.0] * 8
    even = {r: 1.0 for r in range(4)}
    p = compute_placement(even, costs, micro_batches=8, adapters=[0, 1, 2, 3],
                          max_pipelines=2, max_layers_per_rank=4)
    assert p.pipelines == [([(0, 0, 4), (1, 4, 8)], (0, 1)),
                           ([(2, 0, 4), (3, 4, 8)], (2, 3))]
    assert p.step_s == pytest.approx(4 + 4 + 3 * 4)  # m = 4: 8 + 3 x 4
    # Rank 3 at half speed: its pipeline trains one adapter, the other three.
    slow = dict(even)
    slow[3] = 0.5
    p = compute_placement(slow, costs, micro_batches=8, adapters=[0, 1, 2, 3],
                          max_pipelines=2, max_layers_per_rank=4)
    assert [ad for _, ad in p.pipelines] == [(0, 1, 2), (3,)]
    # Without the pipeline option the old single pipeline is kept.
    one = compute_placement(slow, costs, micro_batches=8,
                            max_layers_per_rank=4)
    assert len(one.pipelines) == 1 and one.pipelines[0][1] is None


def test_max_layers_that_cannot_fit_is_an_error():
    with pytest.raises(ValueError, match="max_layers_per_rank"):
        compute_placement({0: 1.0, 1: 1.0}, [1.0] * 8, max_layers_per_rank=3)
    with pytest.raises(ValueError, match="adapters"):
        compute_placement({0: 1.0}, [1.0], max_pipelines=2)
    with pytest.raises(ValueError, match="multiple"):
        compute_placement({0: 1.0}, [1.0], micro_batches=3, adapters=[0, 1],
                          max_pipelines=2)
