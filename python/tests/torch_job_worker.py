"""One rank of the small real PyTorch job the policy tests run
(test_torch_policies.py): the local-SGD demo's character-level GPT
(tools/trainer_demo.py) trained through pitstop.torch.EDiT on the backend
the test picks (pitstop_nccl: the NCCL C API over the CPU NCCL backend,
with or without the pitstop library preloaded), reporting to an agent.

A slow rank is either emulated accelerator time (--device-ms, x
--slow-factor on --slow-rank, as the demo) or made slow from outside (the
test throttles the process). Ranks train for --seconds of their own clock
and leave together at a sync point; the JSON written to --out has the
switches, the mode, the steps and the profile captures."""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tools"))
sys.path.insert(0, os.path.join(REPO, "python"))


def main():
    ap = argparse.ArgumentParser()
    for a in ("--rank", "--world"):
        ap.add_argument(a, type=int, required=True)
    for a in ("--init", "--out", "--job"):
        ap.add_argument(a, required=True)
    ap.add_argument("--socket", default="")
    ap.add_argument("--backend", default="pitstop_nccl")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--slow-factor", type=float, default=1.0)
    ap.add_argument("--device-ms", type=float, default=0.0)
    a = ap.parse_args()

    import logging

    import torch
    import torch.distributed as dist

    import trainer_demo as td
    from pitstop.client import TrainerClient
    from pitstop.torch import EDiT

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="rank%d %%(message)s" % a.rank)
    torch.set_num_threads(1)
    td.init_backend(a.backend, a.init, a.rank, a.world, timeout_s=120)
    text = td.load_corpus()
    chars = sorted(set(text))
    idx = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([idx[c] for c in text[:200000]], dtype=torch.long)
    margs = argparse.Namespace(embd=64, heads=4, layers=2, block=64)
    torch.manual_seed(0)
    model = td.build_model(len(chars), margs)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    client = TrainerClient(a.job, a.rank, a.world, socket=a.socket) \
        if a.socket else None
    # The control exchange on gloo: the pitstop_nccl communicator carries
    # the gradient all-reduce only (see EDiT's control_group).
    control = dist.new_group(backend="gloo") if a.backend != "gloo" else None
    edit = EDiT(model, opt, client=client, switch_timeout_s=20.0,
                control_group=control)
    device = td.DeviceTime(a.device_ms / 1000.0,
                           a.slow_factor if a.rank == a.slow_rank else 1.0)
    gen = torch.Generator().manual_seed(100 + a.rank)
    t0 = time.monotonic()
    while not edit.stopped:
        edit.begin_step()
        tc = time.perf_counter()
        with edit.phase("data"):
            s = torch.randint(len(data) - 65, (8,), generator=gen)
            x = torch.stack([data[i:i + 64] for i in s])
            y = torch.stack([data[i + 1:i + 65] for i in s])
        with edit.phase("forward"):
            loss = model(x, y)
        with edit.phase("backward"):
            loss.backward()
        with edit.phase("backward"):
            time.sleep(device.delay_s(time.perf_counter() - tc))
        edit.step(tokens=x.numel(), loss=float(loss))
        device.after_step(edit.phase_times)
        if edit.synced and time.monotonic() - t0 >= a.seconds:
            edit.request_stop()
    if client is not None:
        client.flush()
        time.sleep(1.0)
    out = {"rank": a.rank, "pid": os.getpid(), "steps": edit.step_no,
           "mode": edit.mode, "switches": edit.switches,
           "captures": edit.profiler.captures if edit.profiler else [],
           "connected": bool(client and client.connected),
           "consistent": edit.consistent()}
    edit.close()
    with open(a.out, "w") as f:
        json.dump(out, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
