#!/usr/bin/python3
"""Side-by-side timings of the pitstop_nccl torch backend (docs/pytorch.md,
docs/benchmarks.md): all-reduce latency per message size and a DDP training
step, each on gloo, on pitstop_nccl, and on pitstop_nccl with the pitstop
library LD_PRELOADed (no agent), in one run on the same machine.

Usage (from the repository root, after a build):
  /usr/bin/python3 tools/torch_backend_bench.py [--ranks 2] [--iters 200]
      [--build build]

Each configuration starts its ranks afresh (real processes, a FileStore in
a temporary directory); a rank times each operation with a barrier-free
loop after a warm-up and reports the median and p90 of its per-iteration
times; the table shows rank 0's. The three configurations are interleaved
round by round (--rounds) so that load from other processes on the machine
falls on all of them alike.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SIZES = [1 << 10, 1 << 16, 1 << 20, 1 << 22]  # bytes of float32


def rank_main(args):
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    if args.backend == "pitstop_nccl":
        import pitstop.torch.nccl_backend  # noqa: F401
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group(args.backend, init_method="file://" + args.store,
                            rank=rank, world_size=n,
                            timeout=timedelta(seconds=120))
    out = {}

    def timed(fn, iters):
        for _ in range(max(5, iters // 10)):
            fn()
        dist.barrier()
        ts = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        ts.sort()
        return {"median_us": ts[len(ts) // 2] * 1e6,
                "p90_us": ts[int(len(ts) * 0.9)] * 1e6}

    for size in SIZES:
        x = torch.ones(size // 4)
        out["allreduce %d B" % size] = timed(lambda: dist.all_reduce(x),
                                             args.iters)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 16))
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.25)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    batch = (torch.randn(32, 256, generator=g), torch.randn(32, 16, generator=g))

    def step():
        opt.zero_grad()
        ((ddp(batch[0]) - batch[1]) ** 2).mean().backward()
        opt.step()
    out["DDP step (MLP 0.4M params)"] = timed(step, max(20, args.iters // 4))
    if rank == 0:
        with open(args.result, "w") as f:
            json.dump(out, f)
    dist.destroy_process_group()


def run_config(name, backend, preload, args, build, tmp):
    store = os.path.join(tmp, name + "-store")
    result = os.path.join(tmp, name + ".json")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               PITSTOP_PY_GEN=os.path.join(build, "python"),
               PYTHONPATH=os.path.join(os.path.dirname(build), "python"),
               LD_LIBRARY_PATH=os.path.join(build, "src/nccl/cpu/lib"),
               PITSTOP_CPU_NCCL_STORE_DIR=tmp,
               PITSTOP_AGENT_SOCKET=os.path.join(tmp, "no-agent-shm.sock"),
               WORLD_SIZE=str(args.ranks))
    if preload:
        env["LD_PRELOAD"] = os.path.join(build,
                                         "plugin/libnccl-profiler-pitstop.so")
    procs = []
    for r in range(args.ranks):
        procs.append(subprocess.Popen(
            [sys.executable, __file__, "--rank-main", "--backend", backend,
             "--store", store, "--result", result, "--iters",
             str(args.iters)], env=dict(env, RANK=str(r))))
    for p in procs:
        if p.wait(timeout=600) != 0:
            sys.exit("%s: a rank exited with %d" % (name, p.returncode))
    if os.path.exists(store):  # FileStore removes it when all ranks left
        os.unlink(store)
    with open(result) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--build", default="build")
    ap.add_argument("--rank-main", action="store_true")
    ap.add_argument("--backend")
    ap.add_argument("--store")
    ap.add_argument("--result")
    args = ap.parse_args()
    if args.rank_main:
        return rank_main(args)
    build = os.path.abspath(args.build)
    configs = [("gloo", "gloo", False),
               ("pitstop_nccl", "pitstop_nccl", False),
               ("pitstop_nccl+library", "pitstop_nccl", True)]
    runs = {name: [] for name, _, _ in configs}
    with tempfile.TemporaryDirectory(prefix="pitstop-torch-bench-") as tmp:
        for _ in range(args.rounds):
            for name, backend, preload in configs:
                runs[name].append(run_config(name, backend, preload, args,
                                             build, tmp))
    ops = list(runs["gloo"][0])
    print("%d ranks, %d iterations, median of %d rounds' medians (us); "
          "load average %.1f" % (args.ranks, args.iters, args.rounds,
                                 os.getloadavg()[0]))
    head = "%-28s %12s %14s %22s %12s %12s" % (
        "operation", "gloo", "pitstop_nccl", "pitstop_nccl+library",
        "nccl/gloo", "lib/nccl")
    print(head)
    for op in ops:
        med = {name: statistics.median(r[op]["median_us"] for r in runs[name])
               for name in runs}
        print("%-28s %12.1f %14.1f %22.1f %12.2f %12.3f" % (
            op, med["gloo"], med["pitstop_nccl"], med["pitstop_nccl+library"],
            med["pitstop_nccl"] / med["gloo"],
            med["pitstop_nccl+library"] / med["pitstop_nccl"]))


if __name__ == "__main__":
    main()
