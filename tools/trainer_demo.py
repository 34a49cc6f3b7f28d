#!/usr/bin/python3
"""The local-SGD demo of tools/trainer-demo.sh (docs/policies.md).

A small GPT-style character-level language model trained on the text of
/usr/share/common-licenses by 4 processes through pitstop.torch.EDiT, with
a real pitstop-controller and pitstop-agent on loopback. With --backend
pitstop_nccl the collectives go through the NCCL C API (the CPU NCCL
backend as libnccl.so.2 and the pitstop library LD_PRELOADed, streaming
every collective to the agent), so the controller finds the half-speed rank
from NCCL telemetry and that confirmed straggler fault is what switches the
job (--slow-signal confirmed-faults); --backend gloo (the default, on which
docs/policies.md's numbers were measured) has no telemetry: the step
reports' stragglers switch it. Runs with the same
token budget:

  healthy      no slow rank, sync policy AUTO   (pitstop must not switch)
  slow-sync    rank 3 at half speed, policy OFF (synchronous throughout)
  slow-auto    rank 3 at half speed, policy AUTO (pitstop switches to A-EDiT)

healthy first, then slow-sync-1, slow-auto-1, slow-auto-2, slow-sync-2
(ABBA, --repeats 2). Each rank's step is charged as emulated accelerator
time (DeviceTime): it takes max(its real CPU work, --device-ms), the
slowed rank twice that, slept before its collectives, so synchronous
training waits for it as for a slow GPU and four ranks do not compete for
the machine's cores. The controller's
persistence and the A-EDiT period are given in steps and converted with
the measured step time (calibrate()). Rank 0 snapshots the model at sync
points; the held-out loss of every snapshot is computed after the run,
outside its wall time. The last line printed is

  local-sgd: sync_s=<s> switched_s=<s> speedup=<x> switch_step=<n> healthy_switches=<n>

sync_s / switched_s: the fastest training time of the slow-sync / slow-auto
runs to reach the target loss (slow-sync's held-out loss at 90% of the
budget; the per-run times and per-pair ratios are printed above it);
switch_step: the agreed step of pitstop's switch in slow-auto-1;
healthy_switches: switches the controller sent in the healthy run.

Usage: trainer_demo.py local-sgd [--build DIR] [--budget-steps N] ...
       trainer_demo.py worker ...   (one rank; started by the above)
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))

CORPUS_DIR = "/usr/share/common-licenses"

from trainer_demo_report import median_step, report, summary  # noqa: E402


# --- the collectives' backend ---------------------------------------------------
BACKENDS = ("pitstop_nccl", "gloo")


def backend_env(build, backend, job, rank, shm_socket="", host="demo-node"):
    """Environment of one rank. pitstop_nccl: the CPU NCCL backend of the
    build as libnccl.so.2 and, with an agent (`shm_socket`, its
    shared-memory socket), the pitstop library LD_PRELOADed, reporting as
    `host` and job `job` -- the trainers' job id, so the controller's
    faults and the step reports name the same job. RANK / LOCAL_RANK tell
    the library the rank (torchrun sets them; the demos start ranks
    themselves). Either backend: PITSTOP_JOB_ID, as a launcher sets it,
    because the agent takes a trainer's step reports only for the job its
    process's environment names (docs/agent.md)."""
    if backend != "pitstop_nccl":
        return {"PITSTOP_JOB_ID": job}
    lib = os.path.join(build, "src/nccl/cpu/lib")
    env = {"LD_LIBRARY_PATH": lib + (":" + os.environ["LD_LIBRARY_PATH"]
                                     if os.environ.get("LD_LIBRARY_PATH")
                                     else ""),
           "PITSTOP_JOB_ID": job, "RANK": str(rank), "LOCAL_RANK": str(rank)}
    if shm_socket:
        env.update({
            "LD_PRELOAD": os.path.join(build,
                                       "plugin/libnccl-profiler-pitstop.so"),
            "PITSTOP_AGENT_SOCKET": shm_socket, "PITSTOP_HOST": host})
    return env


def backend_missing(build, backend):
    """What pitstop_nccl needs from the build and lacks (empty: ok)."""
    if backend != "pitstop_nccl":
        return []
    need = ["src/nccl/cpu/lib/libnccl.so.2",
            "plugin/libnccl-profiler-pitstop.so"]
    gen = os.path.join(build, "python/pitstop/torch")
    missing = [os.path.join(build, n) for n in need
               if not os.path.exists(os.path.join(build, n))]
    if not (os.path.isdir(gen) and any(f.startswith("_nccl_backend.")
                                       for f in os.listdir(gen))):
        missing.append(os.path.join(gen, "_nccl_backend.*.so"))
    return missing


def init_backend(backend, init, rank, world, timeout_s=300):
    """init_process_group on a FileStore (`init`), either backend."""
    import datetime

    import torch.distributed as dist
    if backend == "pitstop_nccl":
        import pitstop.torch.nccl_backend  # noqa: F401 (registers it)
    dist.init_process_group(backend, init_method="file://" + init,
                            rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))


# --- data and model -----------------------------------------------------------
def load_corpus():
    parts = []
    for name in sorted(os.listdir(CORPUS_DIR)):
        path = os.path.join(CORPUS_DIR, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                parts.append(f.read())
    text = "\n".join(parts)
    if len(text) < 10000:
        sys.exit("trainer_demo: %s holds only %d characters" %
                 (CORPUS_DIR, len(text)))
    return text


def build_model(vocab, args):
    import torch
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self, d, heads, block):
            super().__init__()
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(),
                                     nn.Linear(4 * d, d))
            self.heads = heads
            self.register_buffer(
                "mask", torch.tril(torch.ones(block, block)).bool())

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            h = self.heads
            q = q.view(b, t, h, d // h).transpose(1, 2)
            k = k.view(b, t, h, d // h).transpose(1, 2)
            v = v.view(b, t, h, d // h).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(d // h)
            att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
            y = att.softmax(-1) @ v
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            d = args.embd
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(args.block, d)
            self.blocks = nn.Sequential(
                *[Block(d, args.heads, args.block) for _ in range(args.layers)])
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab)

        def forward(self, idx, targets):
            t = idx.shape[1]
            x = self.tok(idx) + self.pos(torch.arange(t))
            logits = self.head(self.ln(self.blocks(x)))
            return nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    return GPT()


def lr_schedule(args):
    """The inner learning rate, as a multiplier of --lr, over the job's
    progress in synchronous-equivalent steps (EDiT.progress_steps: every
    rank's tokens count): linear warm-up over --warmup-frac of the budget,
    then cosine decay to --min-lr-frac at the budget (held there after).
    The schedule of nanoGPT / DiLoCo / EDiT's inner optimizer; decaying
    the rate also shrinks local SGD's drift between outer syncs."""
    total = float(args.budget_steps)
    warm = max(1.0, args.warmup_frac * total)

    def f(step):
        if step < warm:
            return (step + 1) / warm
        p = min(1.0, (step - warm) / max(1.0, total - warm))
        return args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (
            1 + math.cos(math.pi * p))
    return f


def heldout(val, args):
    """--eval-batch fixed held-out sequences: the same for every snapshot
    of every run, so differences between runs are not sampling noise."""
    import torch
    g = torch.Generator().manual_seed(7)
    starts = torch.randint(len(val) - args.block - 1, (args.eval_batch,),
                           generator=g)
    vx = torch.stack([val[s:s + args.block] for s in starts])
    vy = torch.stack([val[s + 1:s + 1 + args.block] for s in starts])
    return vx, vy


def evaluate(model, vx, vy, chunk=32):
    import torch
    model.eval()
    tot = 0.0
    with torch.no_grad():
        for i in range(0, len(vx), chunk):
            n = len(vx[i:i + chunk])
            tot += float(model(vx[i:i + chunk], vy[i:i + chunk])) * n
    model.train()
    return tot / len(vx)


# --- one rank -------------------------------------------------------------------
class DeviceTime:
    """Emulated accelerator time of one rank's step (the setting issue #16
    describes: a slow GPU, not a CPU share). On an accelerator the host
    issues a step's kernels asynchronously and waits for the device before
    the gradient all-reduce, so the step's compute takes max(host time,
    device time). Here the host work is the real step on the CPU -- data,
    forward and backward of this step plus the optimizer step of the
    previous one (which runs inside EDiT.step after the all-reduce) -- and
    the device time is a fixed `device_s` per step (one micro-batch of
    --batch x --block tokens). `factor` slows the device: 2 is half speed,
    so the slowed rank's step takes 2 x max(host, device). The difference
    is slept before EDiT.step, so in synchronous training the other ranks
    wait for it in the all-reduce, as they wait for a slow GPU.

    With device time well above the host time, four ranks on a machine
    with two cores do not compete for them (each sleeps most of its step)
    and half speed is half the rank's own step, not a share of a loaded
    CPU. device_s 0 is the CPU-only mode of earlier rounds: the slowed
    rank sleeps (factor - 1) x its own host compute."""

    def __init__(self, device_s=0.0, factor=1.0):
        if factor < 1.0:
            raise ValueError("slow factor: at least 1, got %r" % factor)
        if device_s < 0.0:
            raise ValueError("device time: at least 0, got %r" % device_s)
        self.device_s = device_s
        self.factor = factor
        self.last_optimizer_s = 0.0
        self.steps = 0
        self.host_bound = 0  # steps whose host time exceeded device_s

    def delay_s(self, compute_s):
        """Seconds to sleep after this step's data, forward and backward,
        which took `compute_s` of wall time."""
        host = max(0.0, compute_s) + self.last_optimizer_s
        self.steps += 1
        if self.device_s > 0.0 and host > self.device_s:
            self.host_bound += 1
        return max(0.0, self.factor * max(host, self.device_s) - host)

    def after_step(self, phase_times):
        """EDiT.phase_times after EDiT.step: the optimizer step's time."""
        self.last_optimizer_s = phase_times.get("optimizer", 0.0)


def worker(args):
    import torch
    import torch.distributed as dist

    from pitstop.client import TrainerClient
    from pitstop.torch import EDiT
    import logging

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="rank%d %%(message)s" % args.rank)
    torch.set_num_threads(1)
    init_backend(args.backend, args.init, args.rank, args.world)
    text = load_corpus()
    chars = sorted(set(text))
    idx = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([idx[c] for c in text], dtype=torch.long)
    n_val = len(data) // 10
    train, val = data[:-n_val], data[-n_val:]
    torch.manual_seed(0)
    model = build_model(len(chars), args)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    client = None
    if args.socket:
        client = TrainerClient(args.job, args.rank, args.world,
                               socket=args.socket)
    edit = EDiT(model, opt, mode="sync", client=client,
                period_ms=args.period_ms, outer_lr=args.outer_lr,
                outer_momentum=args.outer_momentum,
                lr_lambda=lr_schedule(args),
                min_sync_steps=args.min_sync_steps,
                switch_timeout_s=10.0,
                # The control exchange on gloo: the pitstop_nccl communicator
                # carries the gradient all-reduce only, whose late rank the
                # straggler detector needs in (nearly) every collective.
                control_group=(dist.new_group(backend="gloo")
                               if args.backend != "gloo" else None))
    gen = torch.Generator().manual_seed(1000 + args.rank)
    tokens_per_step = args.batch * args.block
    budget = args.budget_steps * args.world * tokens_per_step
    device = DeviceTime(args.device_ms / 1000.0,
                        args.slow_factor if args.rank == args.slow_rank
                        else 1.0)
    snaps = []  # rank 0: (train_s, tokens, mode, parameters) at sync points

    def snapshot(train_s):
        with torch.no_grad():
            snaps.append((train_s, edit.total_steps * tokens_per_step,
                          edit.mode, [p.detach().clone()
                                      for p in model.parameters()]))

    dist.barrier()
    t0 = time.monotonic()
    snap_s = 0.0  # time spent taking snapshots: not training time
    last_snap = -1e9
    step_wall = 0.0
    step_walls = []
    while not edit.stopped:
        edit.begin_step()
        ts = time.perf_counter()
        if args.rank == 0 and edit.synced and (
                time.monotonic() - last_snap >= args.eval_every_s):
            s0 = time.monotonic()
            snapshot(s0 - t0 - snap_s)
            last_snap = time.monotonic()
            snap_s += last_snap - s0
        tc = time.perf_counter()
        with edit.phase("data"):
            starts = torch.randint(len(train) - args.block - 1,
                                   (args.batch,), generator=gen)
            x = torch.stack([train[s:s + args.block] for s in starts])
            y = torch.stack([train[s + 1:s + 1 + args.block] for s in starts])
        with edit.phase("forward"):
            loss = model(x, y)
        with edit.phase("backward"):
            loss.backward()
        # The device finishing the step (DeviceTime): before the
        # all-reduce / the outer sync's collectives, so in synchronous
        # training the other ranks wait for a slowed rank there.
        with edit.phase("backward"):
            time.sleep(device.delay_s(time.perf_counter() - tc))
        edit.step(tokens=tokens_per_step, loss=float(loss))
        device.after_step(edit.phase_times)
        step_walls.append(time.perf_counter() - ts)
        step_wall += step_walls[-1]
        if edit.synced and (edit.total_steps * tokens_per_step >=
                            budget * args.run_frac):
            edit.request_stop()
    wall = time.monotonic() - t0 - snap_s
    if args.rank == 0:
        snapshot(wall)
    overhead_s = 0.0
    if client is not None:
        client.flush()
        time.sleep(0.3)
        overhead_s = client.report_s + client.thread_cpu_s
        client.close()
    # Held-out loss of every snapshot, after training (not in its wall
    # time), split over the ranks: rank 0 hands the snapshots over a file.
    snap_file = args.init + ".snaps.pt"
    if args.rank == 0:
        torch.save(snaps, snap_file)
    dist.barrier()
    snaps = torch.load(snap_file)
    vx, vy = heldout(val, args)
    mine = {}
    for i in range(args.rank, len(snaps), args.world):
        with torch.no_grad():
            for p, v in zip(model.parameters(), snaps[i][3]):
                p.copy_(v)
        mine[i] = evaluate(model, vx, vy)
    dist.barrier()
    if args.rank == 0:
        os.unlink(snap_file)
    out = {"rank": args.rank, "wall_s": wall, "steps": edit.step_no,
           "total_steps": edit.total_steps, "switches": edit.switches,
           "abandoned": edit.abandoned, "eval_part": mine,
           "snaps": [s[:3] for s in snaps],
           "outer_syncs": edit.outer_syncs, "step_wall_s": step_wall,
           "step_walls": step_walls if args.rank == 0 else [],
           "report_overhead_s": overhead_s,
           "reports_sent": client.sent if client else 0,
           "reports_dropped": client.dropped if client else 0,
           "device_steps": device.steps, "host_bound": device.host_bound}
    with open(args.out, "w") as f:
        json.dump(out, f)
    dist.barrier()
    dist.destroy_process_group()


# --- the orchestrator -------------------------------------------------------------
class Daemons:
    """A real pitstop-controller and pitstop-agent on loopback."""

    def __init__(self, build, tmp, log):
        self.build, self.tmp, self.log = build, tmp, log
        self.procs = []

    def start(self, args):
        port_file = os.path.join(self.tmp, "port")
        ctl = [os.path.join(self.build, "src/controller/pitstop-controller"),
               "--listen", "127.0.0.1:0", "--port-file", port_file,
               "--db", os.path.join(self.tmp, "controller.db"),
               "--metrics-address", "", "--sync-policy", "advise",
               "--sync-slow-persist-s", str(args.slow_persist_s),
               "--sync-healthy-s", str(args.healthy_s),
               "--sync-period-ms", str(args.period_ms)]
        self.procs.append(subprocess.Popen(ctl, stdout=self.log,
                                           stderr=self.log))
        deadline = time.monotonic() + 30
        while not os.path.exists(port_file):
            if time.monotonic() > deadline or self.procs[0].poll() is not None:
                sys.exit("trainer_demo: the controller did not start (log: %s)"
                         % self.log.name)
            time.sleep(0.1)
        with open(port_file) as f:
            self.port = int(f.read().strip())
        self.controller = "127.0.0.1:%d" % self.port
        self.socket = os.path.join(self.tmp, "agent.sock")
        # The library's socket: the agent's default pairing.
        self.shm_socket = os.path.join(self.tmp, "agent-shm.sock")
        agent = [os.path.join(self.build, "src/agent/pitstop-agent"),
                 "--ingest-socket", self.socket, "--controller",
                 self.controller, "--metrics-address", "", "--batch-ms",
                 "500", "--host", "demo-node"]
        self.procs.append(subprocess.Popen(agent, stdout=self.log,
                                           stderr=self.log))
        deadline = time.monotonic() + 30
        while not os.path.exists(self.socket):
            if time.monotonic() > deadline or self.procs[1].poll() is not None:
                sys.exit("trainer_demo: the agent did not start (log: %s)"
                         % self.log.name)
            time.sleep(0.1)

    def ctl(self, *argv):
        cmd = [os.path.join(self.build, "tools/pitstopctl/pitstopctl"),
               "--controller", self.controller, "-o", "json"] + list(argv)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            sys.exit("trainer_demo: %s failed: %s" % (" ".join(cmd), r.stderr))
        return json.loads(r.stdout) if r.stdout.strip() else {}

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()


def run_ranks(script, world, tmp, name, flags, timeout_s, prog, env=None):
    """Starts `world` ranks of `script` ("worker" subcommand, --rank,
    --world, --init, --out plus `flags`; `env(rank)`: more environment),
    waits for all (killing all when one fails: the run exits naming its
    log) and returns their JSON outputs in rank order. Shared by the
    local-SGD and multi-LoRA demos."""
    init = os.path.join(tmp, name + ".store")
    procs, outs = [], []
    logf = open(os.path.join(tmp, name + ".log"), "w")
    for r in range(world):
        out = os.path.join(tmp, "%s.%d.json" % (name, r))
        outs.append(out)
        cmd = [sys.executable, os.path.abspath(script), "worker",
               "--rank", str(r), "--world", str(world), "--init", init,
               "--out", out] + list(flags)
        procs.append(subprocess.Popen(
            cmd, stdout=logf, stderr=logf,
            env=dict(os.environ, **(env(r) if env else {}))))
    for p in procs:
        if p.wait(timeout=timeout_s) != 0:
            for q in procs:
                q.kill()
            sys.exit("%s: run %s failed (log: %s)" % (prog, name, logf.name))
    res = []
    for o in outs:
        with open(o) as f:
            res.append(json.load(f))
    return res


def run_job(args, daemons, tmp, name, slow_rank, extra=()):
    build = os.path.abspath(args.build)
    res = run_ranks(__file__, args.world, tmp, name,
                    ["--job", name, "--socket",
                     daemons.socket if daemons else "",
                     "--slow-rank", str(slow_rank)] + model_flags(args) +
                    list(extra), args.run_timeout_s, "trainer_demo",
                    env=lambda r: backend_env(
                        build, args.backend, name, r,
                        daemons.shm_socket if daemons else ""))
    losses = {}
    for r in res:
        losses.update({int(i): v for i, v in r["eval_part"].items()})
    res[0]["evals"] = [(t, tok, losses[i], mode)
                       for i, (t, tok, mode) in enumerate(res[0]["snaps"])]
    if daemons is None:
        return res, {}
    time.sleep(1.5)  # last reports reach the controller
    job = daemons.ctl("job", name).get("job", {})
    return res, job


def settle(args, given, step_s, source):
    """Converts the settings given in steps into wall-clock ones with the
    measured time of a healthy synchronous step (flags given explicitly in
    seconds / ms are kept)."""
    if not given["period_ms"]:
        args.period_ms = max(100, int(round(args.period_steps * step_s * 1000)))
    if not given["slow_persist_s"]:
        # A slowed synchronous step takes at most --slow-factor healthy ones.
        args.slow_persist_s = max(1, int(round(
            args.persist_steps * args.slow_factor * step_s)))
    if not given["eval_every_s"]:
        args.eval_every_s = args.period_ms / 1000.0
    print("%s: %.1f ms per healthy synchronous step -> A-EDiT period %d ms "
          "(%d steps), slow_persist_s %d (%d slowed steps), snapshots every "
          "%.2f s" % (source, 1000 * step_s, args.period_ms, args.period_steps,
                      args.slow_persist_s, args.persist_steps,
                      args.eval_every_s), flush=True)


def calibrate(args, tmp):
    """The machine's speed, in seconds per synchronous step of the healthy
    job (4 ranks on the shared cores, no agent): the demo's wall-clock
    settings are set in steps and converted with it, so that the A-EDiT
    period spans the same number of local steps and the switch comes at
    the same fraction of the run on a loaded or a quiet machine (a fixed
    10 s of persistence is a seventh of a run at load 12 and most of it
    on an idle machine)."""
    # The faster of two short runs: one can land on a stall of the shared
    # machine (a 35-step run once measured 960 ms per step, the healthy
    # run right after it 97 ms).
    best = None
    for k in range(2):
        res, _ = run_job(args, None, tmp, "calibrate-%d" % k, -1,
                         ["--budget-steps", str(args.calibrate_steps),
                          "--eval-every-s", "1e9", "--eval-batch", "1",
                          "--period-ms", "1000"])
        step_s = median_step(res)
        best = step_s if best is None else min(best, step_s)
    return best


def model_flags(args):
    return ["--layers", str(args.layers), "--embd", str(args.embd),
            "--heads", str(args.heads), "--block", str(args.block),
            "--batch", str(args.batch), "--lr", str(args.lr),
            "--budget-steps", str(args.budget_steps),
            "--warmup-frac", str(args.warmup_frac),
            "--min-lr-frac", str(args.min_lr_frac),
            "--min-sync-steps", str(args.min_sync_steps),
            "--slow-factor", str(args.slow_factor),
            "--device-ms", str(args.device_ms),
            "--run-frac", str(args.run_frac),
            "--eval-every-s", str(args.eval_every_s),
            "--eval-batch", str(args.eval_batch),
            "--period-ms", str(args.period_ms),
            "--outer-lr", str(args.outer_lr),
            "--outer-momentum", str(args.outer_momentum),
            "--backend", args.backend]


def local_sgd(args):
    build = os.path.abspath(args.build)
    missing = [os.path.join(build, b) for b in [
        "src/controller/pitstop-controller", "src/agent/pitstop-agent",
        "tools/pitstopctl/pitstopctl", "python/pitstop/v1/trainer_pb2.py"]
        if not os.path.exists(os.path.join(build, b))]
    missing += backend_missing(build, args.backend)
    if missing:
        sys.exit("trainer_demo: %s missing; build first: cmake --preset "
                 "default && cmake --build --preset default" %
                 ", ".join(missing))
    os.environ["PITSTOP_PY_GEN"] = os.path.join(build, "python")
    tmp = tempfile.mkdtemp(prefix="pitstop-demo-")
    log = open(os.path.join(tmp, "daemons.log"), "w")
    daemons = Daemons(build, tmp, log)
    print("trainer-demo: %d ranks on %s, GPT %d layers x %d, budget %d "
          "steps x %d ranks x %d tokens, the switch on %s; logs in %s" %
          (args.world, args.backend, args.layers, args.embd,
           args.budget_steps, args.world, args.batch * args.block,
           args.slow_signal, tmp), flush=True)
    given = {k: getattr(args, k) > 0
             for k in ("period_ms", "slow_persist_s", "eval_every_s")}
    settle(args, given, calibrate(args, tmp), "calibration runs")
    # Run order: the healthy run, then the slowed runs in ABBA order
    # (slow-sync, slow-auto, slow-auto, slow-sync, ...): a machine whose
    # load drifts during the demo biases neither side, and neither is
    # always the first run after the daemons start.
    plan = [("healthy", -1, "healthy")]
    for k in range(args.repeats):
        pair = [("slow-sync", "slow-sync-%d" % (k + 1)),
                ("slow-auto", "slow-auto-%d" % (k + 1))]
        for kind, name in (pair if k % 2 == 0 else reversed(pair)):
            plan.append((name, args.world - 1, kind))
    wanted = args.runs.split(",")
    plan = [p for p in plan if p[2] in wanted]
    results = {}
    try:
        daemons.start(args)
        for name, slow, kind in plan:
            if kind == "slow-sync":
                daemons.ctl("sync-policy", name, "off")
            else:
                # The A-EDiT period in a fast rank's local steps (the
                # controller converts it with the fast ranks' measured
                # compute per step at the switch); period_ms is the
                # fallback when no step time is measured yet.
                timed = (["--timed-period-steps", str(args.local_steps)]
                         if args.local_steps > 0 and not given["period_ms"]
                         else [])
                daemons.ctl("sync-policy", name, "auto", "--slow-persist-s",
                            str(args.slow_persist_s), "--healthy-s",
                            str(args.healthy_s), "--local-mode", "timed",
                            "--period-ms", str(args.period_ms),
                            "--apply-lead-steps", "3", "--slow-signal",
                            args.slow_signal, *timed)
            res, job = run_job(args, daemons, tmp, name, slow)
            results[name] = (kind, res, job)
            summary(name, res, job)
            if kind == "healthy":
                # 400 steps of the job itself measure the machine better
                # than the short calibration run: the slowed runs use it.
                settle(args, given, median_step(res), "healthy run")
    finally:
        daemons.stop()
        log.close()
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    kinds = {k for k, _, _ in results.values()}
    if kinds != {"healthy", "slow-sync", "slow-auto"}:
        return  # a partial run (--runs): the summaries above
    report(args, results)


def add_model_args(p):
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--embd", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--block", type=int, default=64)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-2,
                   help="peak inner lr (AdamW), tuned for synchronous "
                   "training: 3e-3 / 6e-3 / 1e-2 / 2e-2 end at 2.36 / 2.09 "
                   "/ 1.94 / 1.92 held-out loss with the cosine schedule")
    p.add_argument("--budget-steps", type=int, default=400,
                   help="token budget, in synchronous steps of every rank")
    p.add_argument("--warmup-frac", type=float, default=0.05,
                   help="inner lr warm-up, fraction of the budget")
    p.add_argument("--min-lr-frac", type=float, default=0.1,
                   help="inner lr at the end of the cosine decay, x --lr")
    p.add_argument("--eval-every-s", type=float, default=0.0,
                   help="snapshot the model for evaluation at most this "
                   "often (at sync points; evaluated after the run); "
                   "0: the A-EDiT period")
    p.add_argument("--eval-batch", type=int, default=256,
                   help="held-out sequences per evaluation")
    p.add_argument("--period-ms", type=int, default=0,
                   help="A-EDiT sync period; 0: --period-steps healthy "
                   "steps, measured by the calibration")
    p.add_argument("--run-frac", type=float, default=1.1,
                   help="train to this multiple of the budget (the lr "
                   "schedule ends at the budget and holds its floor): a "
                   "run that needs a few %% more tokens than slow-sync "
                   "still gets a time to the target")
    p.add_argument("--min-sync-steps", type=int, default=120,
                   help="post-local SGD (EDiT's min_sync_steps): the first "
                   "steps stay synchronous whatever the controller asks "
                   "(tools/local_sgd_sim.py: switching at step 40 / 60 / "
                   "80 / 100 / 120 of 400 ends +5.3 / +5.2 / +2.2 / +3.1 / "
                   "+0.2 %% in held-out loss)")
    p.add_argument("--slow-factor", type=float, default=2.0,
                   help="the slowed rank's compute takes this many times "
                   "as long (2: half speed)")
    p.add_argument("--device-ms", type=float, default=100.0,
                   help="emulated accelerator time per step (one "
                   "micro-batch of --batch x --block tokens, forward, "
                   "backward and optimizer): a step's compute takes "
                   "max(its real CPU time, this), x --slow-factor on the "
                   "slowed rank (DeviceTime); 0: CPU only, as rounds 1-4")
    p.add_argument("--outer-lr", type=float, default=1.0)
    p.add_argument("--outer-momentum", type=float, default=0.5)
    p.add_argument("--backend", choices=BACKENDS, default="gloo",
                   help="the collectives' backend: pitstop_nccl (the NCCL C "
                   "API over the build's CPU NCCL backend, the pitstop "
                   "library preloaded: NCCL telemetry reaches the "
                   "controller; the switch then waits for its confirmed "
                   "straggler fault) or gloo (default: no telemetry, the step "
                   "reports' stragglers switch; the measured setting)")


def main():
    ap = argparse.ArgumentParser(prog="tools/trainer-demo.sh",
                                 description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("local-sgd", help="the three runs")
    d.add_argument("--build", default=os.path.join(REPO, "build"))
    d.add_argument("--world", type=int, default=4)
    d.add_argument("--slow-persist-s", type=int, default=0,
                   help="controller's slow_persist_s; 0: --persist-steps "
                   "slowed steps, measured by the calibration")
    d.add_argument("--local-steps", type=int, default=10,
                   help="A-EDiT period in local steps of a fast rank (the "
                   "controller's timed_period_steps: (N + 1/2) x the fast "
                   "ranks' compute per step at the switch; the slow rank "
                   "takes about N / --slow-factor); 0 or an explicit "
                   "--period-ms: the period in ms")
    d.add_argument("--period-steps", type=int, default=8,
                   help="period_ms in healthy synchronous steps: the "
                   "A-EDiT period with --local-steps 0 (the controller's "
                   "fallback otherwise) and the snapshot interval")
    d.add_argument("--persist-steps", type=int, default=60,
                   help="slow_persist_s in slowed synchronous steps (60: "
                   "~17 s with the default --device-ms, close to the "
                   "controller's default 20 s; the directive still reaches "
                   "every rank before --min-sync-steps)")
    d.add_argument("--calibrate-steps", type=int, default=30)
    d.add_argument("--healthy-s", type=int, default=120)
    d.add_argument("--run-timeout-s", type=int, default=900)
    d.add_argument("--slow-signal", default="",
                   choices=["", "confirmed-faults", "steps-or-faults"],
                   help="what switches the job (the sync policy's "
                   "slow_signal): confirmed-faults (a straggler the "
                   "controller confirmed from NCCL telemetry; the default "
                   "with --backend pitstop_nccl) or steps-or-faults (step "
                   "reports too; the default with gloo)")
    d.add_argument("--keep", action="store_true", help="keep the logs")
    d.add_argument("--runs", default="healthy,slow-sync,slow-auto",
                   help="which runs (all three for the summary line)")
    d.add_argument("--repeats", type=int, default=2,
                   help="slow-sync/slow-auto pairs, in ABBA order")
    add_model_args(d)
    w = sub.add_parser("worker", help="one rank (internal)")
    for a in ["--rank", "--world", "--slow-rank"]:
        w.add_argument(a, type=int, required=True)
    for a in ["--init", "--out", "--job"]:
        w.add_argument(a, required=True)
    w.add_argument("--socket", default="")
    add_model_args(w)
    args = ap.parse_args()
    if args.cmd == "worker":
        worker(args)
    else:
        check_args(ap, args)
        local_sgd(args)


RUNS = ("healthy", "slow-sync", "slow-auto")


def check_args(ap, args):
    """Refuses what cannot run before any daemon or rank starts."""
    bad = []
    if args.world < 2:
        bad.append("--world %d: at least 2 ranks (one of them slowed)"
                   % args.world)
    if args.calibrate_steps < 10:
        bad.append("--calibrate-steps %d: at least 10 (the first 5 are "
                   "warm-up and not timed)" % args.calibrate_steps)
    if args.repeats < 1:
        bad.append("--repeats must be >= 1")
    runs = [r for r in args.runs.split(",") if r]
    unknown = [r for r in runs if r not in RUNS]
    if unknown or not runs:
        bad.append("--runs %r: a comma-separated subset of %s"
                   % (args.runs, ",".join(RUNS)))
    if args.embd % args.heads:
        bad.append("--embd %d is not a multiple of --heads %d"
                   % (args.embd, args.heads))
    if args.budget_steps < 1 or args.device_ms < 0 or args.slow_factor < 1:
        bad.append("--budget-steps >= 1, --device-ms >= 0 and "
                   "--slow-factor >= 1 are required")
    if not args.slow_signal:
        args.slow_signal = ("confirmed-faults" if args.backend == "pitstop_nccl"
                            else "steps-or-faults")
    elif args.slow_signal == "confirmed-faults" and args.backend == "gloo":
        bad.append("--slow-signal confirmed-faults needs --backend "
                   "pitstop_nccl (gloo's collectives send no telemetry)")
    if bad:
        ap.error("; ".join(bad))


if __name__ == "__main__":
    main()
