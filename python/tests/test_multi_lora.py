"""MultiLoraTrainer on 4 real gloo processes: moving layers and adapter
state at an agreed step, a directive late on one rank, a rank dying during
the move, per-adapter checkpoints across placements."""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "lora_worker.py")
WORLD = 4
ADAPTERS = 4
BLOCKS = 6  # layers 0..7
EVEN = [[0, 0, 2], [1, 2, 4], [2, 4, 6], [3, 6, 8]]
# Rank 3 keeps one layer; rank 0 takes three.
SHIFTED = [[0, 0, 3], [1, 3, 5], [2, 5, 7], [3, 7, 8]]
# Rank 1 excluded.
EXCLUDED = [[0, 0, 3], [2, 3, 6], [3, 6, 8]]


def run(tmp_path, name, extra, steps=6, expect_rc=0, timeout=240):
    init = os.path.join(str(tmp_path), name + ".store")
    procs, outs = [], []
    for r in range(WORLD):
        out = os.path.join(str(tmp_path), "%s.%d.json" % (name, r))
        outs.append(out)
        cmd = [sys.executable, WORKER, "--rank", str(r), "--world",
               str(WORLD), "--init", init, "--out", out, "--steps",
               str(steps), "--adapters", str(ADAPTERS), "--blocks",
               str(BLOCKS)] + extra
        # The job a rank reports for is the one its environment names, as
        # a launcher sets it: the agent holds a trainer's report against
        # what the kernel knows of its process (docs/agent.md).
        env = dict(os.environ)
        if "--job" in extra:
            env["PITSTOP_JOB_ID"] = extra[extra.index("--job") + 1]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True,
                                      env=env))
    results = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("%s: a rank hung (> %d s)" % (name, timeout))
        results.append((p.returncode, e))
    if expect_rc == 0:
        for r, (rc, err) in enumerate(results):
            assert rc == 0, "%s rank %d: rc %d\n%s" % (name, r, rc, err)
        return [json.load(open(o)) for o in outs]
    return results


def merged_losses(res):
    """adapter -> {step: loss}, failing on a step reported twice."""
    out = {}
    for r in res:
        for k, ls in r["losses"].items():
            d = out.setdefault(int(k), {})
            for s, v in ls.items():
                assert int(s) not in d, "adapter %s step %s twice" % (k, s)
                d[int(s)] = v
    return out


def checks(res):
    out = {}
    for r in res:
        for k, v in r["checks"].items():
            assert k not in out, "layer %s held by two ranks" % k
            out[k] = v
    return out


def assert_same_training(a, b, steps):
    la, lb = merged_losses(a), merged_losses(b)
    assert sorted(la) == list(range(ADAPTERS))
    for k in range(ADAPTERS):
        assert sorted(la[k]) == list(range(1, steps + 1)), la[k].keys()
        for s in range(1, steps + 1):
            assert la[k][s] == pytest.approx(lb[k][s], rel=1e-6, abs=1e-7), \
                "adapter %d step %d" % (k, s)
    ca, cb = checks(a), checks(b)
    assert sorted(ca) == sorted(cb)
    for key in ca:
        assert ca[key] == pytest.approx(cb[key], rel=1e-6, abs=1e-7), key


def assert_every_step_once(res, steps):
    for r in res:
        for k, per_layer in r["adapter_steps"].items():
            for layer, n in per_layer.items():
                assert n == steps, "rank %d adapter %s layer %s: %d steps" % (
                    r["rank"], k, layer, n)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ref")
    return run(tmp, "ref", ["--start", json.dumps(EVEN)])


def test_move_at_agreed_step_changes_nothing(tmp_path, reference):
    res = run(tmp_path, "move", ["--start", json.dumps(EVEN), "--target",
                                 json.dumps(SHIFTED), "--apply-at", "3"])
    for r in res:
        assert r["moves"] == [3], r
        assert r["span"] == SHIFTED[r["rank"]][1:]
    assert_every_step_once(res, 6)
    assert_same_training(res, reference, 6)


def test_move_excluding_a_rank(tmp_path, reference):
    res = run(tmp_path, "excl", ["--start", json.dumps(EVEN), "--target",
                                 json.dumps(EXCLUDED), "--excluded", "[1]",
                                 "--apply-at", "2", "--probe-every", "2"])
    assert [r["moves"] for r in res] == [[2]] * WORLD
    assert res[1]["span"] is None and res[1]["checks"] == {}
    # The excluded rank times one block every 2 steps (reported to the
    # controller, which brings it back when it has recovered); the others
    # never probe.
    assert [p[0] for p in res[1]["probes"]] == [4, 6], res[1]["probes"]
    assert all(p[1] > 0 for p in res[1]["probes"])
    assert all(r["probes"] == [] for r in res if r["rank"] != 1)
    assert_every_step_once(res, 6)
    assert_same_training(res, reference, 6)


def test_directive_late_on_one_rank(tmp_path, reference):
    # Ranks 0, 1, 3 have it before step 1 (apply at 2); rank 2 only before
    # step 5 (after the agreement of step 4): every rank moves after step 5,
    # none earlier.
    res = run(tmp_path, "late", ["--start", json.dumps(EVEN), "--target",
                                 json.dumps(SHIFTED), "--apply-at", "2",
                                 "--offer-at", "2:4"])
    assert [r["moves"] for r in res] == [[5]] * WORLD
    assert_every_step_once(res, 6)
    assert_same_training(res, reference, 6)


def test_rank_dying_during_move_stops_cleanly(tmp_path):
    res = run(tmp_path, "die", ["--start", json.dumps(EVEN), "--target",
                                json.dumps(SHIFTED), "--apply-at", "2",
                                "--die-rank", "3"], expect_rc=3, timeout=120)
    assert res[3][0] == 9  # the crash itself
    for r in range(3):
        rc, err = res[r]
        assert rc == 3, "rank %d rc %d: %s" % (r, rc, err)
        assert "STOPPED: multi-lora rank %d" % r in err, err
        assert "the trainer stops" in err, err
    # At least one survivor names the move (the others may fail on the
    # survivors that stopped first).
    assert any("moving layer" in err for _, err in res[:3]), res


def test_checkpoint_per_adapter_loads_into_another_placement(tmp_path,
                                                             reference):
    ck = str(tmp_path / "ckpt")
    run(tmp_path, "save", ["--start", json.dumps(EVEN), "--save-at", "3",
                           "--ckpt", ck], steps=3)
    for k in range(ADAPTERS):
        names = sorted(os.listdir(os.path.join(ck, "adapter-%d" % k)))
        assert ["layer-%d.pt" % i for i in range(1, BLOCKS + 1)] == sorted(
            n for n in names if n.startswith("layer-"))
    res = run(tmp_path, "load", ["--start", json.dumps(SHIFTED), "--load",
                                 ck], steps=6)
    ca, cb = checks(res), checks(reference)
    for key in cb:
        assert ca[key] == pytest.approx(cb[key], rel=1e-6, abs=1e-7), key
    la, lb = merged_losses(res), merged_losses(reference)
    for k in range(ADAPTERS):
        assert sorted(la[k]) == [4, 5, 6]
        for s in (4, 5, 6):
            assert la[k][s] == pytest.approx(lb[k][s], rel=1e-6)


# Two pipelines of two stages (data-parallel replicas of the base model),
# adapters split 2 + 2; then adapter 1 moves to the second pipeline (3 + 1
# the other way round: its LoRA parameters and AdamW state change process).
TWO = {"pipelines": [{"stages": [[0, 0, 4], [1, 4, 8]], "adapters": [0, 1]},
                     {"stages": [[2, 0, 4], [3, 4, 8]], "adapters": [2, 3]}],
       "excluded": []}
TWO_MOVED = {"pipelines": [{"stages": [[0, 0, 3], [1, 3, 8]],
                            "adapters": [0]},
                           {"stages": [[2, 0, 5], [3, 5, 8]],
                            "adapters": [1, 2, 3]}],
             "excluded": []}


def test_two_pipelines_and_an_adapter_moving_between_them(tmp_path,
                                                          reference):
    # One pipeline -> two pipelines after step 2 (ranks 2 and 3 receive the
    # base layers they lack and adapters 2, 3) -> adapter 1 moves to the
    # second pipeline after step 4; losses and LoRA parameters equal the
    # run that never moved.
    res = run(tmp_path, "pipes", ["--start", json.dumps(EVEN), "--target",
                                  json.dumps(TWO), "--apply-at", "2",
                                  "--then", json.dumps(TWO_MOVED),
                                  "--then-at", "4"])
    assert [r["moves"] for r in res] == [[2, 4]] * WORLD, res
    assert [r["pipeline"] for r in res] == [0, 0, 1, 1]
    assert [r["adapters"] for r in res] == [[0], [0], [1, 2, 3], [1, 2, 3]]
    assert [r["span"] for r in res] == [[0, 3], [3, 8], [0, 5], [5, 8]]
    assert_every_step_once(res, 6)
    assert_same_training(res, reference, 6)


def test_pipelines_from_the_start_equal_one_pipeline(tmp_path, reference):
    res = run(tmp_path, "two", ["--start", json.dumps(TWO)])
    assert [r["moves"] for r in res] == [[]] * WORLD
    assert_every_step_once(res, 6)
    assert_same_training(res, reference, 6)
