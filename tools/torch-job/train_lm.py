#!/usr/bin/python3
"""A plain PyTorch DDP training job: a byte-level decoder-only language model
trained on the fortune cookies of Debian's `fortunes` package.

This is the job of `pitstop sim --scenario torch-*` (docs/pytorch.md): what a
user's torchrun job looks like. pitstop comes from outside: the library in
LD_PRELOAD, the node agent, the controller. The only difference between a run
with and without pitstop's NCCL path is --backend (gloo, or the c10d backend
over the NCCL C API); with the latter the job also takes pitstop's migration
step hook (pitstop.torch.migration: init_process_group, the hook, its call at
the top of the loop), a no-op unless pitstop migrates a rank (docs/pytorch.md
"Migrating a rank of the torch job").

    torchrun --nnodes 1 --nproc_per_node 2 --redirects 2 --tee 2 \\
        tools/torch-job/train_lm.py --steps 100 --out /tmp/lm

(Debian 12's torchrun needs --redirects/--tee set on Python 3.11:
docs/pytorch.md.) Every run with the same flags and world size computes the
same losses and final weights bit for bit: the batches are a pure function
of (seed, step, rank), the reduction order of the backend is fixed, and torch
runs one thread per rank.

Files (--out DIR): losses-rank<R>.jsonl (one line per step: step, loss,
wall-clock step time; eval lines), weights-rank<R>.sha256 (each rank's
final parameters' digest; weights.sha256 too on rank 0), ckpt/step<N>.pt
(rank 0, every --ckpt-every steps: model, optimizer, step; the newest
--keep-ckpts are kept; --resume continues from the newest).

Fault-injection knob for the desync scenario (never set by a user):
--inject-desync RANK:STEP makes RANK issue an all-gather of its loss at STEP
where the others go on into the gradient all-reduce, the shape of a real
desync bug (a collective behind a rank-dependent condition).
"""

import argparse
import hashlib
import json
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

CORPUS_DIR = "/usr/share/games/fortunes"


# ---------------------------------------------------------------- the data

def load_corpus(directory):
    """The fortunes as one byte tensor, cookies separated by a blank line.

    Every regular file of the directory without an extension is a fortune
    file (the .dat files are strfile indexes, the .u8 names symlinks); the
    files are read in name order so every rank and run sees the same bytes.
    """
    if not os.path.isdir(directory):
        raise SystemExit(
            "train_lm.py: corpus directory %s not found: install Debian's "
            "`fortunes` package (tools/install-deps.sh)" % directory)
    cookies = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if "." in name or os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            text = f.read()
        cookies.extend(c.strip(b"\n") for c in text.split(b"\n%\n"))
    data = b"\n\n".join(c for c in cookies if c)
    if len(data) < 1 << 16:
        raise SystemExit("train_lm.py: corpus %s: only %d bytes" %
                         (directory, len(data)))
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()


class Batches:
    """Random windows of the corpus; the last 5% is held out for evaluation.

    train(step, rank) and val(i, rank) are pure functions of their arguments
    (and the seed): a run resumed from a checkpoint, or repeated, draws the
    same batches."""

    def __init__(self, tokens, seq, batch, seed):
        split = len(tokens) * 95 // 100
        self.train_tokens, self.val_tokens = tokens[:split], tokens[split:]
        self.seq, self.batch, self.seed = seq, batch, seed

    def _draw(self, data, key):
        g = torch.Generator().manual_seed(key)
        starts = torch.randint(len(data) - self.seq - 1, (self.batch,),
                               generator=g)
        x = torch.stack([data[s:s + self.seq] for s in starts])
        y = torch.stack([data[s + 1:s + 1 + self.seq] for s in starts])
        return x, y

    def train(self, step, rank):
        return self._draw(self.train_tokens,
                          (self.seed * 1000003 + step) * 4099 + rank)

    def val(self, i, rank):
        return self._draw(self.val_tokens,
                          (self.seed * 7919 + i) * 4099 + rank + (1 << 40))


# --------------------------------------------------------------- the model

class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then an MLP."""

    def __init__(self, d_model, heads, seq):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, 4 * d_model)
        self.fc2 = nn.Linear(4 * d_model, d_model)
        # A plain attribute, not a buffer: DDP would broadcast a buffer, and
        # gloo has no bool type.
        self.mask = torch.tril(torch.ones(seq, seq)).bool()

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q = q.view(b, t, h, d // h).transpose(1, 2)
        k = k.view(b, t, h, d // h).transpose(1, 2)
        v = v.view(b, t, h, d // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // h)
        att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class ByteLM(nn.Module):
    """Decoder-only language model over bytes (vocabulary 256, no tokenizer)."""

    def __init__(self, d_model, heads, layers, seq):
        super().__init__()
        self.tok = nn.Embedding(256, d_model)
        self.pos = nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList(
            Block(d_model, heads, seq) for _ in range(layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, 256)

    def forward(self, idx, targets):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, 256), targets.view(-1))


# ---------------------------------------------------------------- the job

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="gloo",
                   help="process-group backend: gloo, or the backend over "
                        "the NCCL C API (docs/pytorch.md)")
    p.add_argument("--corpus", default=CORPUS_DIR)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch", type=int, default=8, help="sequences per rank")
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--eval-every", type=int, default=0,
                   help="evaluate every N steps (0: only at the end)")
    p.add_argument("--eval-batches", type=int, default=4)
    p.add_argument("--ckpt-every", type=int, default=0,
                   help="checkpoint every N steps (0: never)")
    p.add_argument("--keep-ckpts", type=int, default=2,
                   help="checkpoints kept (the newest; older ones deleted)")
    p.add_argument("--resume", action="store_true",
                   help="continue from the newest checkpoint in OUT/ckpt")
    p.add_argument("--duration-s", type=float, default=0,
                   help="stop at the first evaluation after this much wall "
                        "time (needs --eval-every; --steps stays a maximum)")
    p.add_argument("--out", required=True, help="directory for losses, "
                   "checkpoints and the final weights' digest")
    p.add_argument("--inject-desync", default="",
                   help="RANK:STEP, fault injection only (see the docstring)")
    a = p.parse_args(argv)
    for name in ("steps", "batch", "seq", "d_model", "heads", "layers",
                 "keep_ckpts"):
        if getattr(a, name) < 1:
            p.error("--%s: must be >= 1, got %d" %
                    (name.replace("_", "-"), getattr(a, name)))
    if a.duration_s and not a.eval_every:
        p.error("--duration-s needs --eval-every (the ranks agree to stop "
                "in the evaluation's all-reduce)")
    if a.d_model % a.heads:
        p.error("--d-model %d: not a multiple of --heads %d" %
                (a.d_model, a.heads))
    a.desync = None
    if a.inject_desync:
        try:
            r, s = a.inject_desync.split(":")
            a.desync = (int(r), int(s))
        except ValueError:
            p.error("--inject-desync %r: expected RANK:STEP" %
                    a.inject_desync)
    return a


def use_backend(name):
    """Backends other than torch's own register themselves when imported.
    With pitstop's backend the job also takes pitstop's migration step hook
    (pitstop.torch.migration; a no-op unless pitstop migrates): returns
    (init_process_group, Migration or None)."""
    if name in ("gloo", "nccl", "mpi"):
        return dist.init_process_group, None
    import pitstop.torch.nccl_backend  # noqa: F401  registers `name`
    from pitstop.torch import migration
    return migration.init_process_group, migration.Migration


def evaluate(model, batches, n, rank, stop=False):
    """Mean held-out loss over every rank's n batches, and whether any rank
    asked to stop: one all-reduce, so every rank stops after the same step
    (a rank that stopped alone would leave the others in a collective)."""
    model.eval()
    with torch.no_grad():
        total = sum(model.module(*batches.val(i, rank)).item()
                    for i in range(n))
    model.train()
    t = torch.tensor([total, float(n), float(stop)], dtype=torch.float64)
    dist.all_reduce(t)
    return (t[0] / t[1]).item(), t[2].item() > 0


def save_checkpoint(path, model, opt, step):
    tmp = path + ".tmp"
    torch.save({"step": step, "model": model.module.state_dict(),
                "optimizer": opt.state_dict()}, tmp)
    os.replace(tmp, path)  # a reader never sees half a checkpoint


def checkpoint_steps(directory):
    return sorted(int(n[4:-3]) for n in os.listdir(directory)
                  if n.startswith("step") and n.endswith(".pt"))


def newest_checkpoint(directory):
    steps = checkpoint_steps(directory)
    return os.path.join(directory, "step%d.pt" % steps[-1]) if steps else ""


def drop_old_checkpoints(directory, keep):
    for step in checkpoint_steps(directory)[:-keep]:
        os.remove(os.path.join(directory, "step%d.pt" % step))


def weights_digest(model):
    h = hashlib.sha256()
    for name, t in model.module.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def main(argv):
    a = parse_args(argv)
    torch.set_num_threads(1)
    init_process_group, Migration = use_backend(a.backend)
    init_process_group(a.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    ckpt_dir = os.path.join(a.out, "ckpt")
    os.makedirs(ckpt_dir, exist_ok=True)

    batches = Batches(load_corpus(a.corpus), a.seq, a.batch, a.seed)
    torch.manual_seed(a.seed)  # same initial weights on every rank
    model = DDP(ByteLM(a.d_model, a.heads, a.layers, a.seq))
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
    mig = Migration(model, opt) if Migration else None
    start = 0
    if a.resume and newest_checkpoint(ckpt_dir):
        state = torch.load(newest_checkpoint(ckpt_dir))
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["step"]

    log = open(os.path.join(a.out, "losses-rank%d.jsonl" % rank), "a",
               buffering=1)
    t_begin = time.monotonic()
    step = start
    while step < a.steps:
        t0 = time.monotonic()
        if mig:
            step = mig.step(step)  # a joiner joins; a leaver exits here
        x, y = batches.train(step, rank)
        loss = model(x, y)
        if a.desync == (rank, step):
            dist.all_gather([torch.zeros(1) for _ in range(world)],
                            loss.detach().reshape(1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if not (mig and mig.sandbox):  # a joiner's warm-up is not the job's
            log.write(json.dumps({"step": step, "loss": loss.item(),
                                  "ms": (time.monotonic() - t0) * 1e3}) + "\n")
        stop = False
        if a.eval_every and step % a.eval_every == 0:
            val, stop = evaluate(
                model, batches, a.eval_batches, rank,
                a.duration_s and time.monotonic() - t_begin >= a.duration_s)
            log.write(json.dumps({"step": step, "val_loss": val}) + "\n")
        if a.ckpt_every and step % a.ckpt_every == 0:
            if rank == 0:
                save_checkpoint(os.path.join(ckpt_dir, "step%d.pt" % step),
                                model, opt, step)
                drop_old_checkpoints(ckpt_dir, a.keep_ckpts)
            dist.barrier()  # nobody runs ahead of a checkpoint being written
        if stop:
            break
    val, _ = evaluate(model, batches, a.eval_batches, rank)
    log.write(json.dumps({"step": step, "val_loss": val, "final": True}) +
              "\n")
    digest = weights_digest(model)
    with open(os.path.join(a.out, "weights-rank%d.sha256" % rank), "w") as f:
        f.write(digest + "\n")
    if rank == 0:
        with open(os.path.join(a.out, "weights.sha256"), "w") as f:
            f.write(digest + "\n")
        print("train_lm: %d steps, world %d, final val loss %.4f, weights "
              "sha256 %s" % (step, world, val, digest), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
