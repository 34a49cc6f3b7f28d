"""One rank of the EDiT tests (started by test_edit_dist.py as a process).

Usage: edit_worker.py RANK WORLD INIT_FILE SCENARIO OUT_JSON [ARGS_JSON]
"""

import json
import logging
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from pitstop.client import Directive  # noqa: E402
from pitstop.torch import EDiT  # noqa: E402


def make(rank):
    torch.manual_seed(1234 + rank)  # different init per rank: EDiT syncs it
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                torch.nn.Linear(16, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    return model, opt


def train_step(edit, model, rank, step, sleep_s=0.0):
    g = torch.Generator().manual_seed(rank * 100003 + step)
    x = torch.randn(16, 8, generator=g)
    y = torch.randn(16, 4, generator=g)
    edit.begin_step()
    with edit.phase("forward"):
        if sleep_s:
            time.sleep(sleep_s)
        loss = torch.nn.functional.mse_loss(model(x), y)
    with edit.phase("backward"):
        loss.backward()
    edit.step(tokens=16, loss=loss.item())
    return loss.item()


def scenario_orderings(rank, world, args):
    """Rounds of directives, each reaching the ranks at the local steps
    given; the run ends on an agreed stop after every round's steps and
    switches."""
    model, opt = make(rank)
    edit = EDiT(model, opt, penalty_args={"warmup": 3},
                switch_timeout_s=args.get("timeout_s", 30.0))
    rounds = args["rounds"]
    starts = [0]
    for rnd in rounds:
        starts.append(starts[-1] + rnd["steps"])
    directives = [
        Directive(i + 1, rnd["mode"], period_steps=3, period_ms=20,
                  apply_at_step=starts[i] + rnd["apply_in"],
                  reason="round %d" % i) for i, rnd in enumerate(rounds)]
    trace = []
    requested = [False] * len(rounds)
    while not edit.stopped:
        step = edit.step_no
        i = max(j for j in range(len(rounds)) if starts[j] <= step) \
            if step < starts[-1] else len(rounds) - 1
        # Directive ids are 1..len(rounds); every rank sees the same
        # decisions at the same sync point, so the same `done`.
        done = max(edit.agreement.applied_id, edit.agreement.abandoned_upto)
        for j in range(len(rounds)):
            arr = rounds[j]["arrivals"][rank]
            # Round j's directive reaches this rank at its planned step, but
            # never before round j-1's was applied or abandoned: in timed
            # mode a rank on a loaded machine ran a whole round ahead, got
            # the next directive first, and it superseded the pending one
            # (which then never switched, and the run never stopped).
            if (not requested[j] and arr is not None and
                    step >= starts[j] + arr and done >= j):
                requested[j] = True
                edit.request_switch(directives[j])
        # Stop once the last round's directive was applied or abandoned (in
        # timed mode ranks take different numbers of steps).
        if step >= starts[-1] and done >= len(rounds):
            edit.request_stop()
        train_step(edit, model, rank, step, rounds[i].get("sleep_s", 0.0))
        trace.append(edit.mode)
    return {"switches": edit.switches, "abandoned": edit.abandoned,
            "trace": trace, "checksum": edit.checksum(),
            "consistent": edit.consistent(), "steps": edit.step_no,
            "outer_syncs": edit.outer_syncs}


def scenario_timed_slow(rank, world, args):
    model, opt = make(rank)
    edit = EDiT(model, opt, mode="timed", period_ms=args["period_ms"])
    t_end = time.monotonic() + args["seconds"]
    step = 0
    phases = []  # EDiT.phase_times after each step
    while not edit.stopped:
        if time.monotonic() > t_end:
            edit.request_stop()
        train_step(edit, model, rank, step,
                   args["slow_s"] if rank == args["slow_rank"] else 0.0)
        phases.append(edit.phase_times)
        step += 1
    return {"steps": edit.step_no, "outer_syncs": edit.outer_syncs,
            "switches": edit.switches, "checksum": edit.checksum(),
            "consistent": edit.consistent(), "phases": phases}


def scenario_progress(rank, world, args):
    """lr_lambda sees the job's progress: synchronous steps first, then
    A-EDiT with rank `slow_rank` slow; records (step_no, progress) of every
    inner step and the lr the optimizer used."""
    model, opt = make(rank)
    seen = []
    edit = EDiT(model, opt, period_ms=args["period_ms"],
                lr_lambda=lambda s: seen.append(s) or 1.0 / (1.0 + s))
    lrs = []
    step = 0
    while not edit.stopped:
        if step == args["sync_steps"]:
            edit.request_switch(Directive(1, "timed", period_ms=args["period_ms"],
                                          apply_at_step=0, reason="test"))
        if edit.mode != "sync" and edit.outer_syncs >= args["syncs"]:
            edit.request_stop()
        train_step(edit, model, rank, step,
                   args["slow_s"] if rank == args["slow_rank"] else 0.002)
        lrs.append(opt.param_groups[0]["lr"])
        step += 1
    return {"seen": seen, "lrs": lrs, "steps": edit.step_no,
            "total_steps": edit.total_steps,
            "progress": edit.progress_steps, "checksum": edit.checksum()}


def scenario_e2e(rank, world, args):
    """Against a real agent: rank `slow_rank` computes slowly until the
    controller's directive switched the job; then a few more syncs."""
    from pitstop.client import TrainerClient
    model, opt = make(rank)
    client = TrainerClient(args["job"], rank, world, socket=args["socket"],
                           flush_interval_s=0.2)
    edit = EDiT(model, opt, client=client, switch_timeout_s=10.0)
    t_end = time.monotonic() + args["seconds"]
    step = 0
    syncs_after = None
    while not edit.stopped:
        if time.monotonic() > t_end:
            edit.request_stop()
        if edit.mode != "sync" and syncs_after is None:
            syncs_after = edit.outer_syncs
        if syncs_after is not None and edit.outer_syncs >= syncs_after + 3:
            edit.request_stop()
        train_step(edit, model, rank, step,
                   args["slow_s"] if rank == args["slow_rank"] else 0.002)
        step += 1
    client.flush()
    time.sleep(0.5)
    client.close()
    return {"switches": edit.switches, "mode": edit.mode,
            "steps": edit.step_no, "checksum": edit.checksum(),
            "consistent": edit.consistent(), "sent": client.sent,
            "connected": client.connected}


def main():
    rank, world = int(sys.argv[1]), int(sys.argv[2])
    init, scenario, out = sys.argv[3], sys.argv[4], sys.argv[5]
    args = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
    logging.basicConfig(level=logging.INFO,
                        format="rank%d %%(message)s" % rank)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank,
                            world_size=world)
    fn = globals()["scenario_" + scenario]
    res = fn(rank, world, args)
    dist.barrier()
    dist.destroy_process_group()
    with open(out, "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    main()
