"""End to end: 4 gloo ranks of a multi-LoRA pipeline (rank 2 at half speed)
-> real pitstop-agent -> real pitstop-controller with the AUTO lora policy
-> placement directive -> every rank moves layers at the same step, no
adapter loses a step. Needs the built daemons ($PITSTOP_BUILD_DIR, default
<repo>/build)."""

import json

from test_e2e import ctl, daemons  # noqa: F401  (pytest fixture)
from test_multi_lora import ADAPTERS, EVEN, WORLD, merged_losses, run


def layouts(reason):
    """(current, proposed) layer layouts of a decision's reason,
    "...; r0:[0,2) ... -> r0:[0,3) ...: 52.9 -> 64.4 samples/s ..."."""
    cur, new = reason.split("; ", 1)[1].split(" -> ")[:2]
    return cur, new.split(": ")[0]


def test_slow_stage_gets_fewer_layers(daemons, tmp_path):  # noqa: F811
    addr, sock, log = daemons
    ctl(addr, "lora-policy", "lora-e2e", "auto", "--slow-persist-s", "1",
        "--apply-lead-steps", "2")
    ctl(addr, "sync-policy", "lora-e2e", "off")
    res = run(tmp_path, "e2e", ["--start", json.dumps(EVEN), "--socket", sock,
                                "--job", "lora-e2e", "--slow-rank", "2",
                                "--device-ms", "10", "--until-moved"],
              steps=300, timeout=280)
    moved_at = res[0]["moves"]
    assert moved_at, open(log).read()[-3000:]
    for r in res:
        assert r["connected"]
        assert r["moves"] == moved_at, res
    steps = res[0]["step_no"]
    assert steps == moved_at[0] + 3
    # The slow rank holds fewer layers than it did (2 of 8), the others
    # together hold the rest; nobody lost or repeated a step.
    spans = {r["rank"]: r["span"] for r in res}
    assert spans[2] is None or spans[2][1] - spans[2][0] < 2, spans
    losses = merged_losses(res)
    for k in range(ADAPTERS):
        assert sorted(losses[k]) == list(range(1, steps + 1))
    for r in res:
        for k, per_layer in r["adapter_steps"].items():
            assert set(per_layer.values()) <= {steps}, (r["rank"], k)
    job = ctl(addr, "job", "lora-e2e")["job"]
    lora = job["lora"]
    sent = [d for d in lora["decisions"] if d.get("sent")]
    assert sent, lora["decisions"]
    assert "rank 2 at 0." in sent[0]["evidence"]["text"], sent[0]
    assert int(sent[0]["apply_at_step"]) <= moved_at[0]
    assert lora["moves_applied"] == "1" or lora["moves_applied"] == 1
    # On a loaded machine the 3 steps after the move take long enough for
    # the policy to judge the new layout and send a further move; the run
    # stops before it is applied (moves_applied is 1, and every rank saw the
    # same single move above), and it is decided from the moved layout.
    for before, d in zip(sent, sent[1:]):
        assert int(d["apply_at_step"]) > int(before["apply_at_step"]), sent
        assert layouts(d["reason"])[0] == layouts(before["reason"])[1], sent
    assert 2 in lora["slow_ranks"]
    assert len(res) == WORLD
