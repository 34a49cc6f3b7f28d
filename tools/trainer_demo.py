#!/usr/bin/python3
"""The local-SGD demo of tools/trainer-demo.sh (docs/policies.md).

A small GPT-style character-level language model trained on the text of
/usr/share/common-licenses by 4 processes (torch.distributed, gloo) through
pitstop.torch.EDiT, with a real pitstop-controller and pitstop-agent on
loopback. Three runs with the same token budget:

  healthy      no slow rank, sync policy AUTO   (pitstop must not switch)
  slow-sync    rank 3 at half speed, policy OFF (synchronous throughout)
  slow-auto    rank 3 at half speed, policy AUTO (pitstop switches to A-EDiT)

The slowed rank sleeps, in its forward phase, as long as its forward and
backward took: it runs at half speed. The last line printed is

  local-sgd: sync_s=<s> switched_s=<s> speedup=<x> switch_step=<n> healthy_switches=<n>

sync_s / switched_s: wall time of slow-sync / slow-auto to reach the target
loss (slow-sync's held-out loss at 90% of the budget); switch_step: the
agreed step of pitstop's switch in slow-auto; healthy_switches: switches
the controller sent in the healthy run.

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


# --- one rank -------------------------------------------------------------------
def worker(args):
    import torch
    import torch.distributed as dist

    from pitstop.client import TrainerClient
    from pitstop.torch import EDiT
    import logging

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="rank%d %%(message)s" % args.rank)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + args.init,
                            rank=args.rank, world_size=args.world)
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
                switch_timeout_s=10.0)
    gen = torch.Generator().manual_seed(1000 + args.rank)
    vgen = torch.Generator().manual_seed(7)
    vstarts = torch.randint(len(val) - args.block - 1, (args.eval_batch,),
                            generator=vgen)
    vx = torch.stack([val[s:s + args.block] for s in vstarts])
    vy = torch.stack([val[s + 1:s + 1 + args.block] for s in vstarts])
    tokens_per_step = args.batch * args.block
    budget = args.budget_steps * args.world * tokens_per_step
    evals = []
    slow = args.rank == args.slow_rank

    def evaluate():
        model.eval()
        with torch.no_grad():
            v = float(model(vx, vy))
        model.train()
        return v

    dist.barrier()
    t0 = time.monotonic()
    last_eval = -1e9
    step_wall = 0.0
    while not edit.stopped:
        edit.begin_step()
        ts = time.perf_counter()
        if args.rank == 0 and edit.synced and (
                time.monotonic() - last_eval >= args.eval_every_s):
            with edit.phase("evaluation"):
                evals.append((time.monotonic() - t0,
                              edit.total_steps * tokens_per_step, evaluate(),
                              edit.mode))
            last_eval = time.monotonic()
        with edit.phase("data"):
            starts = torch.randint(len(train) - args.block - 1,
                                   (args.batch,), generator=gen)
            x = torch.stack([train[s:s + args.block] for s in starts])
            y = torch.stack([train[s + 1:s + 1 + args.block] for s in starts])
        tc = time.perf_counter()
        with edit.phase("forward"):
            loss = model(x, y)
        with edit.phase("backward"):
            loss.backward()
        if slow:
            with edit.phase("forward"):  # half speed: as long again
                time.sleep(time.perf_counter() - tc)
        edit.step(tokens=tokens_per_step, loss=float(loss))
        step_wall += time.perf_counter() - ts
        if edit.synced and edit.total_steps * tokens_per_step >= budget:
            edit.request_stop()
    wall = time.monotonic() - t0
    if args.rank == 0:
        evals.append((wall, edit.total_steps * tokens_per_step, evaluate(),
                      edit.mode))
    overhead_s = 0.0
    if client is not None:
        client.flush()
        time.sleep(0.3)
        overhead_s = client.report_s + client.thread_cpu_s
        client.close()
    out = {"rank": args.rank, "wall_s": wall, "steps": edit.step_no,
           "total_steps": edit.total_steps, "switches": edit.switches,
           "abandoned": edit.abandoned, "evals": evals,
           "outer_syncs": edit.outer_syncs, "step_wall_s": step_wall,
           "report_overhead_s": overhead_s,
           "reports_sent": client.sent if client else 0,
           "reports_dropped": client.dropped if client else 0}
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


def run_job(args, daemons, tmp, name, slow_rank):
    init = os.path.join(tmp, name + ".store")
    procs, outs = [], []
    logf = open(os.path.join(tmp, name + ".log"), "w")
    for r in range(args.world):
        out = os.path.join(tmp, "%s.%d.json" % (name, r))
        outs.append(out)
        cmd = [sys.executable, os.path.abspath(__file__), "worker",
               "--rank", str(r), "--world", str(args.world), "--init", init,
               "--out", out, "--job", name, "--socket", daemons.socket,
               "--slow-rank", str(slow_rank)] + model_flags(args)
        procs.append(subprocess.Popen(cmd, stdout=logf, stderr=logf))
    for p in procs:
        if p.wait(timeout=args.run_timeout_s) != 0:
            for q in procs:
                q.kill()
            sys.exit("trainer_demo: run %s failed (log: %s)" % (name, logf.name))
    res = []
    for o in outs:
        with open(o) as f:
            res.append(json.load(f))
    time.sleep(1.5)  # last reports reach the controller
    job = daemons.ctl("job", name).get("job", {})
    return res, job


def model_flags(args):
    return ["--layers", str(args.layers), "--embd", str(args.embd),
            "--heads", str(args.heads), "--block", str(args.block),
            "--batch", str(args.batch), "--lr", str(args.lr),
            "--budget-steps", str(args.budget_steps),
            "--eval-every-s", str(args.eval_every_s),
            "--eval-batch", str(args.eval_batch),
            "--period-ms", str(args.period_ms),
            "--outer-lr", str(args.outer_lr),
            "--outer-momentum", str(args.outer_momentum)]


def loss_at_tokens(evals, tokens):
    """Held-out loss at `tokens`, linear between the evals around it."""
    prev = None
    for t, tok, loss, _ in evals:
        if tok >= tokens:
            if prev is None or tok == prev[1]:
                return loss
            f = (tokens - prev[1]) / (tok - prev[1])
            return prev[2] + f * (loss - prev[2])
        prev = (t, tok, loss)
    return evals[-1][2]


def time_to_loss(evals, target):
    for t, tok, loss, _ in evals:
        if loss <= target:
            return t
    return float("nan")


def summary(name, res, job, quiet=False):
    r0 = res[0]
    steps = [r["steps"] for r in res]
    overhead = max(r["report_overhead_s"] / max(r["step_wall_s"], 1e-9)
                   for r in res)
    sync = job.get("sync", {})
    sent = [d for d in sync.get("decisions", []) if d.get("sent")]
    if quiet:
        return overhead, len(sent)
    print("%-10s wall %6.1f s, steps per rank %s, outer syncs %d, final loss "
          "%.4f at %d tokens, switches %s, controller decisions sent %d, "
          "report overhead %.3f%% of step time (%d reports sent, %d dropped)" %
          (name, r0["wall_s"], steps, r0["outer_syncs"], r0["evals"][-1][2],
           r0["evals"][-1][1], [(s[0], s[1], s[2]) for s in r0["switches"]],
           len(sent), 100 * overhead, sum(r["reports_sent"] for r in res),
           sum(r["reports_dropped"] for r in res)), flush=True)
    return overhead, len(sent)


def local_sgd(args):
    build = os.path.abspath(args.build)
    for b in ["src/controller/pitstop-controller", "src/agent/pitstop-agent",
              "tools/pitstopctl/pitstopctl", "python/pitstop/v1/trainer_pb2.py"]:
        if not os.path.exists(os.path.join(build, b)):
            sys.exit("trainer_demo: %s missing; build first: cmake --preset "
                     "default && cmake --build --preset default" %
                     os.path.join(build, b))
    os.environ["PITSTOP_PY_GEN"] = os.path.join(build, "python")
    tmp = tempfile.mkdtemp(prefix="pitstop-demo-")
    log = open(os.path.join(tmp, "daemons.log"), "w")
    daemons = Daemons(build, tmp, log)
    print("trainer-demo: %d ranks, GPT %d layers x %d, budget %d steps x %d "
          "ranks x %d tokens; logs in %s" %
          (args.world, args.layers, args.embd, args.budget_steps, args.world,
           args.batch * args.block, tmp), flush=True)
    try:
        daemons.start(args)
        auto = ["--slow-persist-s", str(args.slow_persist_s), "--healthy-s",
                str(args.healthy_s), "--local-mode", "timed", "--period-ms",
                str(args.period_ms), "--apply-lead-steps", "3"]
        daemons.ctl("sync-policy", "healthy", "auto", *auto)
        daemons.ctl("sync-policy", "slow-sync", "off")
        daemons.ctl("sync-policy", "slow-auto", "auto", *auto)
        results = {}
        for name, slow in [("healthy", -1), ("slow-sync", args.world - 1),
                           ("slow-auto", args.world - 1)]:
            if name not in args.runs.split(","):
                continue
            res, job = run_job(args, daemons, tmp, name, slow)
            results[name] = (res, job)
            summary(name, res, job)
    finally:
        daemons.stop()
        log.close()
    if len(results) < 3:  # a partial run (--runs): the summaries above
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    _, healthy_switches = summary("healthy", *results["healthy"], quiet=True)
    s_res, _ = results["slow-sync"]
    a_res, a_job = results["slow-auto"]
    s_evals, a_evals = s_res[0]["evals"], a_res[0]["evals"]
    budget = args.budget_steps * args.world * args.batch * args.block
    target = loss_at_tokens(s_evals, 0.9 * budget)
    sync_s = time_to_loss(s_evals, target)
    switched_s = time_to_loss(a_evals, target)
    s_final = loss_at_tokens(s_evals, budget)
    a_final = loss_at_tokens(a_evals, budget)
    h_final = loss_at_tokens(results["healthy"][0][0]["evals"], budget)
    switches = a_res[0]["switches"]
    switch_step = switches[0][0] if switches else -1
    overheads = [summary(n, *results[n], quiet=True)[0] for n in results]
    print("target loss %.4f (slow-sync at 90%% of the budget); final loss at "
          "%d tokens: healthy %.4f, slow-sync %.4f, slow-auto %.4f (%+.2f%% "
          "vs slow-sync); step-report overhead max %.3f%% of step time" %
          (target, budget, h_final, s_final, a_final,
           100 * (a_final - s_final) / s_final, 100 * max(overheads)))
    decisions = a_job.get("sync", {}).get("decisions", [])
    for d in decisions:
        print("slow-auto decision: %s -> %s: %s [%s]" %
              (d.get("fromMode", d.get("from_mode")),
               d.get("toMode", d.get("to_mode")), d.get("reason"),
               d.get("evidence", {}).get("text")))
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    print("local-sgd: sync_s=%.1f switched_s=%.1f speedup=%.2f switch_step=%d "
          "healthy_switches=%d" % (sync_s, switched_s, sync_s / switched_s,
                                   switch_step, healthy_switches))


def add_model_args(p):
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--embd", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--block", type=int, default=64)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--budget-steps", type=int, default=400,
                   help="token budget, in synchronous steps of every rank")
    p.add_argument("--eval-every-s", type=float, default=1.0)
    p.add_argument("--eval-batch", type=int, default=32)
    p.add_argument("--period-ms", type=int, default=2000,
                   help="A-EDiT sync period")
    p.add_argument("--outer-lr", type=float, default=0.8)
    p.add_argument("--outer-momentum", type=float, default=0.8)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("local-sgd", help="the three runs")
    d.add_argument("--build", default=os.path.join(REPO, "build"))
    d.add_argument("--world", type=int, default=4)
    d.add_argument("--slow-persist-s", type=int, default=10)
    d.add_argument("--healthy-s", type=int, default=120)
    d.add_argument("--run-timeout-s", type=int, default=900)
    d.add_argument("--keep", action="store_true", help="keep the logs")
    d.add_argument("--runs", default="healthy,slow-sync,slow-auto",
                   help="which runs (all three for the summary line)")
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
        local_sgd(args)


if __name__ == "__main__":
    main()
