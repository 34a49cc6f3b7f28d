#!/usr/bin/env python3
"""One rank of a small DDP training job, timed per step (tools/gpu-check.sh).

On a GPU: torch's own `nccl` backend on cuda:0, one rank (NCCL refuses two
ranks of a communicator on one device), bf16 autocast. Each step is a
forward/backward of a small decoder-style MLP stack under
DistributedDataParallel (its gradient buckets are all-reduced through
NCCL) plus the collectives a training loop adds around it: the loss
all-reduced for logging, a metrics all-reduce, a broadcast, an all-gather,
a reduce-scatter and a send/recv to itself (batch_isend_irecv: with one
rank this is the only operation NCCL still plans as a kernel, so the only
one whose profiler events exist; ../shared/docs/nccl-plugin-abi.md §16a).

`--dry-run`: the same script on the CPU with gloo and a tiny model (what
this machine can run, Debian's PyTorch 1.13): gloo there lacks the tensor
all-gather/reduce-scatter and self send/recv, so list all-gather and an
all-reduce stand in and the send/recv is left out (the JSON says which ran).

Writes one JSON object (--out): step times in ms (after --warmup steps), the
collectives issued per step, the loss, versions, and which libnccl /
pitstop library the process had mapped. Exit 0 on success, 1 on an error.
"""

import argparse
import inspect
import json
import os
import statistics
import sys
import tempfile
import time


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dry-run", action="store_true",
                   help="CPU + gloo + tiny model (no GPU needed)")
    p.add_argument("--steps", type=int, default=None,
                   help="timed steps (default 300; dry run 8)")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed steps first (default 30; dry run 2)")
    p.add_argument("--d-model", type=int, default=None)
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--seq", type=int, default=None)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--out", required=True, help="result JSON path")
    a = p.parse_args(argv)
    big = not a.dry_run
    defaults = {"steps": (300, 8), "warmup": (30, 2), "d_model": (1024, 64),
                "layers": (8, 2), "batch": (16, 4), "seq": (256, 32)}
    for k, (gpu, cpu) in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, gpu if big else cpu)
    if a.steps < 1 or a.warmup < 0:
        p.error("--steps must be >= 1 and --warmup >= 0")
    return a


def mapped_libraries():
    """libnccl and pitstop libraries mapped into this process."""
    found = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if "/" in line else ""
                base = os.path.basename(path)
                if base.startswith("libnccl"):
                    found.add(path)
    except OSError:
        pass
    return sorted(found)


def build_model(torch, a):
    nn = torch.nn
    vocab = 8192 if not a.dry_run else 256

    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.norm = nn.LayerNorm(d)
            self.up = nn.Linear(d, 4 * d)
            self.down = nn.Linear(4 * d, d)

        def forward(self, x):
            return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, a.d_model)
            self.blocks = nn.ModuleList(Block(a.d_model) for _ in range(a.layers))
            self.norm = nn.LayerNorm(a.d_model)
            self.head = nn.Linear(a.d_model, vocab)

        def forward(self, tokens):
            x = self.embed(tokens)
            for b in self.blocks:
                x = b(x)
            return self.head(self.norm(x))

    return Model(), vocab


class Collectives:
    """The non-DDP collectives of one step, by what the backend supports."""

    def __init__(self, torch, dist, device, backend):
        self.torch, self.dist = torch, dist
        self.nccl = backend == "nccl"
        f32 = dict(dtype=torch.float32, device=device)
        self.metrics = torch.ones(16 * 1024, **f32)           # 64 KiB
        self.bcast = torch.ones(256 * 1024, **f32)            # 1 MiB
        self.gather_in = torch.ones(64 * 1024, **f32)         # 256 KiB
        self.gather_out = torch.zeros(64 * 1024, **f32)       # world 1
        self.scatter_in = torch.ones(1024 * 1024, **f32)      # 4 MiB
        self.scatter_out = torch.zeros(1024 * 1024, **f32)
        self.p2p_send = torch.ones(256 * 1024, **f32)         # 1 MiB
        self.p2p_recv = torch.zeros(256 * 1024, **f32)
        self.issued = {}

    def _count(self, name):
        self.issued[name] = self.issued.get(name, 0) + 1

    def run(self, loss):
        dist = self.dist
        logged = loss.detach().float().clone()
        dist.all_reduce(logged)
        self._count("all_reduce (loss, 4 B)")
        dist.all_reduce(self.metrics)
        self._count("all_reduce (metrics, 64 KiB)")
        dist.broadcast(self.bcast, 0)
        self._count("broadcast (1 MiB)")
        if self.nccl:
            dist.all_gather_into_tensor(self.gather_out, self.gather_in)
            self._count("all_gather_into_tensor (256 KiB)")
            dist.reduce_scatter_tensor(self.scatter_out, self.scatter_in)
            self._count("reduce_scatter_tensor (4 MiB)")
            ops = [dist.P2POp(dist.isend, self.p2p_send, 0),
                   dist.P2POp(dist.irecv, self.p2p_recv, 0)]
            for req in dist.batch_isend_irecv(ops):
                req.wait()
            self._count("send/recv to self (1 MiB)")
        else:
            dist.all_gather([self.gather_out], self.gather_in)
            self._count("all_gather (256 KiB)")
            dist.all_reduce(self.scatter_in)  # gloo 1.13: no reduce-scatter
            self._count("all_reduce (4 MiB, for reduce_scatter)")
        return logged


def main(argv):
    a = parse_args(argv)
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    if a.dry_run:
        device, backend = torch.device("cpu"), "gloo"
    else:
        if not torch.cuda.is_available():
            print("job.py: no CUDA device (use --dry-run on a CPU)",
                  file=sys.stderr)
            return 1
        device, backend = torch.device("cuda", 0), "nccl"
        torch.cuda.set_device(device)
    torch.manual_seed(a.seed)
    store = tempfile.mkstemp(prefix="gpu-check-store-")[1]
    os.unlink(store)  # FileStore creates it; no port to pick
    kwargs = {}
    params = inspect.signature(dist.init_process_group).parameters
    if backend == "nccl" and "device_id" in params:
        kwargs["device_id"] = device  # eager communicator init (2.3+)
    dist.init_process_group(backend, init_method="file://" + store, rank=0,
                            world_size=1, **kwargs)
    model, vocab = build_model(torch, a)
    model = model.to(device)
    ddp = DDP(model, device_ids=[0] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3, momentum=0.9)
    coll = Collectives(torch, dist, device, backend)
    gen = torch.Generator(device="cpu").manual_seed(a.seed)
    tokens = torch.randint(0, vocab, (a.batch, a.seq + 1), generator=gen).to(device)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def step():
        opt.zero_grad(set_to_none=True)
        if device.type == "cuda":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = ddp(inputs)
        else:
            logits = ddp(inputs)
        loss = torch.nn.functional.cross_entropy(
            logits.float().reshape(-1, vocab), targets.reshape(-1))
        loss.backward()
        opt.step()
        return coll.run(loss)

    losses, step_ms = [], []
    for i in range(a.warmup + a.steps):
        sync()
        t0 = time.perf_counter()
        logged = step()
        sync()
        t1 = time.perf_counter()
        if i >= a.warmup:
            step_ms.append((t1 - t0) * 1e3)
        if i == 0 or i == a.warmup + a.steps - 1:
            losses.append(float(logged))
    total_steps = a.warmup + a.steps
    nccl_version = None
    if backend == "nccl":
        v = torch.cuda.nccl.version()
        nccl_version = ".".join(map(str, v)) if isinstance(v, tuple) else v
    result = {
        "backend": backend,
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "nccl_version": nccl_version,
        "params": sum(p.numel() for p in model.parameters()),
        "steps": a.steps,
        "warmup": a.warmup,
        "total_steps": total_steps,
        "step_ms": step_ms,
        "median_step_ms": statistics.median(step_ms),
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "collectives_per_step": {k: v // total_steps for k, v in coll.issued.items()},
        "ddp_bucket_cap_mb": 25,
        "nccl_libraries_mapped": mapped_libraries(),
        "env": {k: os.environ.get(k) for k in
                ("NCCL_PROFILER_PLUGIN", "LD_PRELOAD", "PITSTOP_STATS_FILE")},
    }
    dist.destroy_process_group()
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"job.py: {backend} on {result['device']}: {a.steps} steps, median "
          f"{result['median_step_ms']:.3f} ms, loss {losses[0]:.3f} -> "
          f"{losses[-1]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
