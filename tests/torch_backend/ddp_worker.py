#!/usr/bin/python3
"""One rank of a small DDP training run, launched by torchrun
(test_ddp.py): unchanged training code except the backend name.

Two models, trained one after the other in the same process group:
  a) a small MLP with BatchNorm (its buffers are broadcast every step) in
     small gradient buckets, with two no_sync() accumulation micro-steps;
  b) the same with an unused parameter (find_unused_parameters=True: DDP
     all-reduces the used-parameter map too) and the fp16 compression comm
     hook (gradients all-reduced as float16, futures chained with then()).
Writes every rank's final parameters and losses to --out, and for
pitstop_nccl which file each NCCL function call reaches (nccl_bindings).
"""

import argparse
import gc
import json
import os

import torch
import torch.distributed as dist
import torch.distributed.algorithms.ddp_comm_hooks.default_hooks as hooks
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 12


class Net(torch.nn.Module):
    def __init__(self, unused=False):
        super().__init__()
        self.fc1 = torch.nn.Linear(24, 48)
        self.bn = torch.nn.BatchNorm1d(48)
        self.fc2 = torch.nn.Linear(48, 6)
        self.unused = torch.nn.Linear(6, 6) if unused else None

    def forward(self, x):
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


def train(model, ddp, rank, seed):
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(seed + rank)  # each rank its own data
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        with ddp.no_sync():  # accumulate locally, no all-reduce
            for _ in range(2):
                x, y = torch.randn(8, 24, generator=g), torch.randn(8, 6,
                                                                   generator=g)
                ((ddp(x) - y) ** 2).mean().backward()
        x, y = torch.randn(8, 24, generator=g), torch.randn(8, 6, generator=g)
        loss = ((ddp(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    # Parameters and buffers (BatchNorm's running stats: broadcast from rank
    # 0 before each forward, then updated locally).
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return state, losses


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.backend == "pitstop_nccl":
        import pitstop.torch.nccl_backend as nb  # the only code change
    dist.init_process_group(args.backend)
    rank = dist.get_rank()

    torch.manual_seed(1)  # the same initial weights on every rank (DDP
    model_a = Net()       # broadcasts rank 0's anyway)
    ddp_a = DDP(model_a, bucket_cap_mb=0.002)
    state_a, losses_a = train(model_a, ddp_a, rank, 100)

    torch.manual_seed(2)
    model_b = Net(unused=True)
    ddp_b = DDP(model_b, find_unused_parameters=True)
    ddp_b.register_comm_hook(dist.group.WORLD, hooks.fp16_compress_hook)
    state_b, losses_b = train(model_b, ddp_b, rank, 200)

    result = {"a": state_a, "b": state_b, "losses_a": losses_a,
              "losses_b": losses_b}
    torch.save(result, os.path.join(args.out, "%s.%d.pt" % (args.backend,
                                                            rank)))
    if args.backend == "pitstop_nccl":
        with open(os.path.join(args.out, "bindings.%d.json" % rank), "w") as f:
            json.dump({"bindings": nb.nccl_bindings(),
                       "library": nb.nccl_library(),
                       "preload": os.environ.get("LD_PRELOAD", "")}, f)
    print("rank %d losses a %.4f -> %.4f, b %.4f -> %.4f" % (
        rank, losses_a[0], losses_a[-1], losses_b[0], losses_b[-1]),
        flush=True)
    # The DDP objects go first, while the group is alive. torch 1.13's
    # Reducer, when it holds a group's last reference, destroys the group
    # with the interpreter lock held; ProcessGroupGloo's destructor then
    # joins a worker that waits for that lock to free a tensor: a deadlock
    # at exit (seen once in this test, on gloo). pitstop_nccl releases the
    # lock in its destructor (process_group_pitstop_nccl.h).
    del ddp_a, ddp_b
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
