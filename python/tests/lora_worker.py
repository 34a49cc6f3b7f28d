"""One rank of the multi-LoRA tests (started by test_multi_lora.py).

Trains a tiny base model with pitstop.torch.MultiLoraTrainer on gloo and
writes what the tests compare to --out (JSON): per-adapter losses by step,
AdamW steps per adapter and layer, a checksum of every LoRA parameter,
the moves made. Exit code 3 and the error on stderr when the trainer
stopped because of a failed peer.
"""

import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from pitstop.client import Directive  # noqa: E402
from pitstop.torch import lora_model as lm  # noqa: E402
from pitstop.torch.multi_lora import (MultiLoraTrainer,  # noqa: E402
                                      PipelineFailed)
from pitstop.torch.placement import Placement  # noqa: E402


def start_placement(j):
    if isinstance(j, list):
        return Placement(j)
    return Placement(pipelines=[(q["stages"], q.get("adapters"))
                                for q in j["pipelines"]],
                     excluded=j.get("excluded", ()))


def placement_dict(j, excluded, adapters):
    if isinstance(j, list):
        return {"pipelines": [{"stages": j,
                               "adapters": list(range(adapters))}],
                "excluded": excluded}
    return j


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--init", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--adapters", type=int, default=4)
    ap.add_argument("--blocks", type=int, default=6)
    ap.add_argument("--start", required=True,
                    help="JSON stages, or a placement dict with pipelines")
    ap.add_argument("--target", default="",
                    help="JSON stages (or a placement dict) to move to")
    # A second move, offered once the first is applied.
    ap.add_argument("--then", default="", help="JSON placement dict")
    ap.add_argument("--then-at", type=int, default=0)
    ap.add_argument("--probe-every", type=int, default=0)
    ap.add_argument("--excluded", default="[]")
    ap.add_argument("--apply-at", type=int, default=0)
    # "rank:step,rank:step": the step after which each rank gets the
    # directive (default: before step 1 on every rank).
    ap.add_argument("--offer-at", default="")
    ap.add_argument("--die-rank", type=int, default=-1)
    ap.add_argument("--save-at", type=int, default=0)
    ap.add_argument("--load", default="")
    ap.add_argument("--ckpt", default="")
    # End to end (test_lora_e2e.py): report to the agent at --socket, emulate
    # --device-ms per block and micro-batch, --slow-rank at half speed, and
    # stop 3 steps after the first move (all ranks move at the same step) or
    # at --steps.
    ap.add_argument("--socket", default="")
    ap.add_argument("--job", default="lora-test")
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--device-ms", type=float, default=0.0)
    ap.add_argument("--until-moved", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + a.init,
                            rank=a.rank, world_size=a.world,
                            timeout=datetime.timedelta(seconds=60))
    cfg = lm.LoraConfig(vocab=24, d_model=16, heads=2, seq=8,
                        blocks=a.blocks, lora_rank=4, micro_batch=2,
                        micro_batches=2, lr=1e-2)
    tokens = torch.randint(cfg.vocab, (4000,),
                           generator=torch.Generator().manual_seed(5))
    data = lm.ShardedCorpus(tokens, a.adapters, cfg)

    def die(layer, src, dst):
        if a.rank == a.die_rank:
            os._exit(9)  # a crash: no cleanup, sockets just close

    block_cost = lm.layer_costs(cfg)[1]

    def throttle(step, units, compute_s):
        t = max(compute_s, units / block_cost * a.device_ms / 1e3)
        return t * (2 if a.rank == a.slow_rank else 1) - compute_s

    client = None
    if a.socket:
        from pitstop.client import TrainerClient
        client = TrainerClient(a.job, a.rank, a.world, socket=a.socket,
                               flush_interval_s=0.2)
    tr = MultiLoraTrainer(cfg, range(a.adapters),
                          start_placement(json.loads(a.start)), data, a.rank,
                          a.world, agreement_timeout_s=60, client=client,
                          throttle=throttle if a.device_ms > 0 else None,
                          move_hook=die if a.die_rank >= 0 else None,
                          probe_every=a.probe_every)
    offer_at = {}
    for item in filter(None, a.offer_at.split(",")):
        r, s = item.split(":")
        offer_at[int(r)] = int(s)
    directive = then = None
    if a.target:
        directive = Directive(
            1, None, apply_at_step=a.apply_at, reason="test",
            placement=placement_dict(json.loads(a.target),
                                     json.loads(a.excluded), a.adapters))
    if a.then:
        then = Directive(2, None, apply_at_step=a.then_at, reason="test 2",
                         placement=placement_dict(json.loads(a.then), [],
                                                  a.adapters))
    if a.load:
        # The checkpoint's placement differs from --start: move first.
        tr.load(a.load)
    try:
        while tr.step_no < a.steps:
            if directive is not None and tr.step_no == offer_at.get(a.rank, 0):
                tr.offer(directive)
            if then is not None and len(tr.moves) == 1:
                tr.offer(then)
                then = None
            tr.train_step()
            if a.save_at and tr.step_no == a.save_at:
                tr.save(a.ckpt)
                dist.barrier()
            if a.until_moved and tr.moves and tr.step_no >= tr.moves[0][0] + 3:
                break
    except PipelineFailed as e:
        sys.stderr.write("STOPPED: %s\n" % e)
        sys.stderr.flush()
        os._exit(3)
    checks = {}
    for (k, i), params in tr.lora.items():
        checks["%d/%d" % (k, i)] = [float(p.data.double().sum())
                                    for p in params.values()]
    out = {"rank": a.rank, "losses": {str(k): v for k, v in
                                      tr.losses.items()},
           "adapter_steps": {str(k): tr.adapter_steps(k)
                             for k in range(a.adapters)},
           "checks": checks, "moves": [m[0] for m in tr.moves],
           "span": tr.span, "step_no": tr.step_no,
           "connected": bool(client and client.connected),
           "move_reasons": [m[2] for m in tr.moves],
           "pipeline": tr.pipeline, "adapters": tr.my_adapters,
           "probes": tr.probes, "abandoned": [list(map(str, x))
                                              for x in tr.abandoned]}
    if client is not None:
        client.flush()
        client.close()
    with open(a.out, "w") as f:
        json.dump(out, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
