#!/usr/bin/python3
"""The multi-LoRA demo of tools/trainer-demo.sh (docs/policies.md).

4 LoRA adapters on a frozen GPT-style character-level base model (12
layers: embedding, 10 blocks, head) cut into 4 pipeline stages over 4 gloo
processes (pitstop.torch.MultiLoraTrainer), each adapter on its own shard of
/usr/share/common-licenses, with a real pitstop-controller and
pitstop-agent on loopback. Four runs of the same steps:

  healthy      no slow rank, lora policy AUTO   (pitstop must not move)
  slowed       rank --slow-rank at half speed from --slow-from, policy OFF
  rescheduled  the same slowdown, policy AUTO   (pitstop moves layers)
  reference    no slowdown, the rescheduled run's placement change forced
               at the same step (policy OFF): training must be identical

Each stage runs its layers' forward and backward for real on the CPU and
takes max(that, emulated accelerator time), the accelerator time being
--device-ms-per-block per block and micro-batch (scaled by each layer's
cost): kernels are issued asynchronously, so a stage costs the longer of
the two. 4 ranks share a machine with few cores (and, on a shared machine,
other work): real compute alone would make the CPU, not the pipeline, the
bottleneck, and its noise the result. The slowed rank takes twice its
stage time: half speed. The last line printed is

  multi-lora: healthy=<samples/s> slowed=<samples/s> rescheduled=<samples/s> moved_at_step=<n> lost_steps=<n>

healthy: steps 10..end; slowed: from --slow-from + 3; rescheduled: from the
move + 2 (steady state after it); lost_steps: (adapter, step) pairs missing
or repeated in the rescheduled run plus AdamW step counts that differ from
the steps trained. It also prints the largest difference between the
rescheduled and reference runs' per-adapter losses (must be ~0).

Usage: lora_demo.py multi-lora [--build DIR] [--steps N] ...
       lora_demo.py worker ...   (one rank; started by the above)
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, HERE)

SAMPLES_WINDOW_SKIP = 10


def worker(a):
    import logging

    import torch
    import torch.distributed as dist

    from pitstop.client import Directive, TrainerClient
    from pitstop.torch import lora_model as lm
    from pitstop.torch.multi_lora import MultiLoraTrainer, PipelineFailed
    from pitstop.torch.placement import compute_placement
    from trainer_demo import init_backend, load_corpus

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="rank%d %%(message)s" % a.rank)
    torch.set_num_threads(1)
    init_backend(a.backend, a.init, a.rank, a.world, timeout_s=120)
    text = load_corpus()
    chars = sorted(set(text))
    idx = {c: i for i, c in enumerate(chars)}
    tokens = torch.tensor([idx[c] for c in text], dtype=torch.long)
    cfg = lm.LoraConfig(vocab=len(chars), d_model=a.d_model, heads=4,
                        seq=a.seq, blocks=a.blocks, lora_rank=8,
                        micro_batch=a.micro_batch,
                        micro_batches=a.micro_batches, lr=a.lr)
    data = lm.ShardedCorpus(tokens, a.adapters, cfg)
    costs = lm.layer_costs(cfg)
    block_cost = costs[1]
    start = compute_placement({r: 1.0 for r in range(a.world)}, costs,
                              micro_batches=a.adapters * a.micro_batches,
                              allow_exclude=False)
    slow = a.rank == a.slow_rank

    def throttle(step, units, compute_s):
        # An accelerator runs the kernels the CPU issues asynchronously: the
        # stage takes max(CPU time, device time); half speed: twice that.
        t = max(compute_s, units / block_cost * a.device_ms_per_block / 1e3)
        if slow and step >= a.slow_from:
            t *= 2
        return t - compute_s

    client = TrainerClient(a.job, a.rank, a.world, socket=a.socket) \
        if a.socket else None
    tr = MultiLoraTrainer(cfg, range(a.adapters), start, data, a.rank,
                          a.world, client=client, throttle=throttle,
                          agreement_timeout_s=60, probe_every=a.probe_every)
    if a.force_move:
        step, placement = json.loads(a.force_move)
        tr.offer(Directive(1, None, apply_at_step=step, reason="reference",
                           placement=placement))
    ends = []
    dist.barrier()
    try:
        while tr.step_no < a.steps:
            tr.train_step()
            ends.append(time.monotonic())
    except PipelineFailed as e:
        sys.stderr.write("STOPPED: %s\n" % e)
        os._exit(3)
    if client is not None:
        client.flush()
        time.sleep(0.5)
        client.close()
    out = {"rank": a.rank, "ends": ends,
           "losses": {str(k): v for k, v in tr.losses.items()},
           "adapter_steps": {str(k): tr.adapter_steps(k)
                             for k in range(a.adapters)},
           "moves": [(m[0], m[1], m[3], m[4]) for m in tr.moves],
           "start": start.stages, "span": tr.span,
           "busy_s": tr.busy_s, "stage_wall_s": tr.stage_wall_s,
           "samples_per_step": a.adapters * a.micro_batches * a.micro_batch}
    with open(a.out, "w") as f:
        json.dump(out, f)
    dist.barrier()
    dist.destroy_process_group()


def run_job(args, daemons, tmp, name, slow_rank, force_move=""):
    from trainer_demo import backend_env, run_ranks
    build = os.path.abspath(args.build)
    flags = ["--job", name, "--slow-rank", str(slow_rank), "--force-move",
             force_move] + model_flags(args)
    if daemons is not None:
        flags += ["--socket", daemons.socket]
    res = run_ranks(__file__, args.world, tmp, name, flags,
                    args.run_timeout_s, "lora_demo",
                    env=lambda r: backend_env(
                        build, args.backend, name, r,
                        daemons.shm_socket if daemons else ""))
    job = {}
    if daemons is not None:
        time.sleep(1.5)  # the last reports reach the controller
        job = daemons.ctl("job", name).get("job", {})
    return res, job


def model_flags(args):
    return ["--steps", str(args.steps), "--adapters", str(args.adapters),
            "--blocks", str(args.blocks), "--d-model", str(args.d_model),
            "--seq", str(args.seq), "--micro-batch", str(args.micro_batch),
            "--micro-batches", str(args.micro_batches), "--lr", str(args.lr),
            "--slow-from", str(args.slow_from),
            "--device-ms-per-block", str(args.device_ms_per_block),
            "--probe-every", str(args.probe_every),
            "--backend", args.backend]


def throughput(res, first_step):
    """Samples/s of steps first_step..end (rank 0's step end times)."""
    ends = res[0]["ends"]
    n = len(ends) - first_step
    if first_step < 1 or n < 2:
        return float("nan")
    return n * res[0]["samples_per_step"] / (ends[-1] - ends[first_step - 1])


def merged(res):
    """adapter -> {step: loss} and the count of repeated (adapter, step)."""
    out, repeated = {}, 0
    for r in res:
        for k, ls in r["losses"].items():
            d = out.setdefault(int(k), {})
            for s, v in ls.items():
                repeated += int(s) in d
                d[int(s)] = v
    return out, repeated


def lost_steps(res, args):
    losses, repeated = merged(res)
    lost = repeated
    for k in range(args.adapters):
        got = set(losses.get(k, {}))
        lost += len(set(range(1, args.steps + 1)) ^ got)
    for r in res:
        for k, per_layer in r["adapter_steps"].items():
            lost += sum(abs(n - args.steps) for n in per_layer.values())
    return lost


def multi_lora(args):
    from trainer_demo import Daemons
    build = os.path.abspath(args.build)
    for b in ["src/controller/pitstop-controller", "src/agent/pitstop-agent",
              "tools/pitstopctl/pitstopctl", "python/pitstop/v1/trainer_pb2.py"]:
        if not os.path.exists(os.path.join(build, b)):
            sys.exit("lora_demo: %s missing; build first: cmake --preset "
                     "default && cmake --build --preset default" %
                     os.path.join(build, b))
    os.environ["PITSTOP_PY_GEN"] = os.path.join(build, "python")
    tmp = tempfile.mkdtemp(prefix="pitstop-lora-demo-")
    log = open(os.path.join(tmp, "daemons.log"), "w")
    daemons = Daemons(build, tmp, log)
    print("trainer-demo multi-lora: %d ranks, %d adapters, %d blocks x %d, "
          "%d steps, rank %d at half speed from step %d; logs in %s" %
          (args.world, args.adapters, args.blocks, args.d_model, args.steps,
           args.slow_rank, args.slow_from, tmp), flush=True)
    results = {}
    try:
        daemons.start(types.SimpleNamespace(slow_persist_s=20, healthy_s=60,
                                            period_ms=2000))
        auto = ["--slow-persist-s", str(args.persist_s), "--apply-lead-steps",
                "3", "--move-s-per-layer", "0.05", "--horizon-s", "120"]
        for name, pol in [("healthy", "auto"), ("slowed", "off"),
                          ("rescheduled", "auto"), ("reference", "off")]:
            daemons.ctl("lora-policy", name, pol, *auto)
            daemons.ctl("sync-policy", name, "off")
        for name, slow in [("healthy", -1), ("slowed", args.slow_rank),
                           ("rescheduled", args.slow_rank)]:
            results[name] = run_job(args, daemons, tmp, name, slow)
            report(name, *results[name])
        moves = results["rescheduled"][0][0]["moves"]
        if not moves:
            sys.exit("lora_demo: pitstop did not move the rescheduled run "
                     "(log: %s)" % log.name)
        step, placement = moves[0][:2]
        results["reference"] = run_job(
            args, daemons, tmp, "reference", -1,
            json.dumps([step, placement]))
        report("reference", *results["reference"])
    finally:
        daemons.stop()
        log.close()
    h = throughput(results["healthy"][0], SAMPLES_WINDOW_SKIP)
    s = throughput(results["slowed"][0], args.slow_from + 3)
    moved_at = moves[0][0]
    r = throughput(results["rescheduled"][0], moved_at + 2)
    lost = lost_steps(results["rescheduled"][0], args)
    a, _ = merged(results["rescheduled"][0])
    b, _ = merged(results["reference"][0])
    diff = max(abs(a[k][st] - b[k][st]) for k in a for st in a[k])
    final = {k: (a[k][args.steps], b[k][args.steps]) for k in sorted(a)}
    healthy_moves = len(results["healthy"][0][0]["moves"])
    print("placement: start %s -> %s excluded %s after step %d (%d layers "
          "moved in %.3f s)" % (results["rescheduled"][0][0]["start"],
                                [q["stages"] for q in placement["pipelines"]],
                                placement["excluded"], moved_at, moves[0][2],
                                moves[0][3]))
    print("final loss per adapter (rescheduled / reference): %s; largest "
          "per-step loss difference %.3g; healthy run moves %d" %
          (", ".join("%d: %.5f/%.5f" % (k, x, y)
                     for k, (x, y) in final.items()), diff, healthy_moves))
    print("stage busy (compute / step wall) per rank, healthy run: %s "
          "(GPipe bubble (P-1)/(M+P-1) = %.2f)" % (
              ", ".join("%.2f" % (x["busy_s"] / x["stage_wall_s"])
                        for x in results["healthy"][0]
                        if x["stage_wall_s"] > 0),
              (args.world - 1.0) / (args.adapters * args.micro_batches +
                                    args.world - 1)))
    print("targets: rescheduled/healthy %.3f (>= %.3f), rescheduled/slowed "
          "%.2f (>= 1.3)" % (r / h, 0.85 * 3.5 / 4, r / s))
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    print("multi-lora: healthy=%.1f slowed=%.1f rescheduled=%.1f "
          "moved_at_step=%d lost_steps=%d" % (h, s, r, moved_at, lost))


def report(name, res, job):
    lora = job.get("lora", {})
    decisions = lora.get("decisions", [])
    print("%-11s %d steps, moves %s, controller: %d decisions%s" %
          (name, len(res[0]["ends"]),
           [(m[0], [q["stages"] for q in m[1]["pipelines"]],
             m[1]["excluded"]) for m in res[0]["moves"]], len(decisions),
           "".join("\n            decision: %s" % d.get("reason", "")
                   for d in decisions)), flush=True)


def add_model_args(p):
    p.add_argument("--steps", type=int, default=60,
                   help="training steps of each run (default 60)")
    p.add_argument("--adapters", type=int, default=4,
                   help="LoRA adapters trained at once (default 4)")
    p.add_argument("--blocks", type=int, default=10,
                   help="transformer blocks of the base model (default 10)")
    p.add_argument("--d-model", type=int, default=32,
                   help="model width (default 32)")
    p.add_argument("--seq", type=int, default=16,
                   help="characters per sample (default 16)")
    p.add_argument("--micro-batch", type=int, default=2,
                   help="samples per micro-batch (default 2)")
    p.add_argument("--micro-batches", type=int, default=2,
                   help="per adapter per step (default 2)")
    p.add_argument("--lr", type=float, default=3e-3,
                   help="AdamW learning rate (default 3e-3)")
    p.add_argument("--slow-from", type=int, default=15,
                   help="the slow rank runs at half speed from this step "
                   "(default 15)")
    p.add_argument("--device-ms-per-block", type=float, default=25.0,
                   help="emulated accelerator time per block and "
                   "micro-batch (forward + backward; default 25)")
    p.add_argument("--probe-every", type=int, default=5,
                   help="an excluded rank times one block every N steps "
                   "(default 5)")
    p.add_argument("--backend", choices=("pitstop_nccl", "gloo"),
                   default="gloo",
                   help="the pipeline's point-to-point and agreement "
                   "collectives: pitstop_nccl (the NCCL C API over the "
                   "build's CPU NCCL backend, the pitstop library preloaded: "
                   "NCCL telemetry reaches the controller; not measured "
                   "yet) or gloo (default)")


def check_args(ap, args):
    """Refuses what cannot run before any daemon or rank starts."""
    bad = []
    for name in ["world", "steps", "adapters", "blocks", "d_model", "seq",
                 "micro_batch", "micro_batches", "persist_s", "run_timeout_s",
                 "probe_every"]:
        if getattr(args, name) < 1:
            bad.append("--%s must be >= 1" % name.replace("_", "-"))
    if args.world < 2:
        bad.append("--world must be >= 2 (a pipeline of stages)")
    if args.world > args.blocks + 2:
        bad.append("--world %d: more stages than the %d layers "
                   "(--blocks + embedding + head)" % (args.world,
                                                      args.blocks + 2))
    if not 0 <= args.slow_rank < args.world:
        bad.append("--slow-rank %d: not a rank of --world %d"
                   % (args.slow_rank, args.world))
    if not 0 <= args.slow_from < args.steps:
        bad.append("--slow-from %d: not a step of --steps %d"
                   % (args.slow_from, args.steps))
    if args.device_ms_per_block < 0 or args.lr <= 0:
        bad.append("--device-ms-per-block must be >= 0 and --lr > 0")
    if bad:
        ap.error("; ".join(bad))


def main():
    ap = argparse.ArgumentParser(prog="tools/trainer-demo.sh",
                                 description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("multi-lora", help="the four runs")
    d.add_argument("--build", default=os.path.join(REPO, "build"),
                   help="build directory with the daemons and pitstopctl "
                   "(default: build/ of this checkout)")
    d.add_argument("--world", type=int, default=4,
                   help="ranks = pipeline stages (default 4)")
    d.add_argument("--slow-rank", type=int, default=1,
                   help="the rank slowed to half speed (default 1)")
    d.add_argument("--persist-s", type=int, default=2,
                   help="lora policy: a better placement holds this long "
                   "(s, >= 1; default 2)")
    d.add_argument("--run-timeout-s", type=int, default=900,
                   help="each run is stopped after this long (default 900)")
    d.add_argument("--keep", action="store_true", help="keep the logs")
    add_model_args(d)
    w = sub.add_parser("worker", help="one rank (internal)")
    for x in ["--rank", "--world", "--slow-rank"]:
        w.add_argument(x, type=int, required=True)
    for x in ["--init", "--out", "--job"]:
        w.add_argument(x, required=True)
    w.add_argument("--socket", default="")
    w.add_argument("--force-move", default="")
    add_model_args(w)
    args = ap.parse_args()
    if args.cmd == "multi-lora":
        check_args(ap, args)
    if args.cmd == "worker":
        worker(args)
    else:
        multi_lora(args)


if __name__ == "__main__":
    main()
