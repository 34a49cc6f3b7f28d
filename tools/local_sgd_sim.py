#!/usr/bin/python3
"""Token efficiency of the local-SGD switch, in one process
(docs/policies.md, "Training settings and why").

The model, data, inner optimizer and lr schedule of tools/trainer_demo.py,
4 workers simulated in one process without wall-clock effects: W
synchronous steps (gradients averaged), then A-EDiT rounds in which the
fast workers take --fast-h local steps and the slow one --slow-h, an outer
Nesterov step on the pseudo-gradients weighted by local steps (as
pitstop.torch.EDiT with the penalty still in its warm-up). Prints the
held-out loss at 90 % and 100 % of the token budget for synchronous
training and for each switch step, so settings can be compared without the
noise of a shared machine:

  tools/local_sgd_sim.py --switch 40,80,120 --fast-h 10 --slow-h 5

Deterministic for a given seed; one core, about a minute per setting.
"""

import argparse
import copy
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainer_demo import (add_model_args, build_model, evaluate,  # noqa: E402
                          heldout, load_corpus, lr_schedule)


def batches(train, args, world):
    gens = [torch.Generator().manual_seed(1000 + r) for r in range(world)]

    def draw(r):
        s = torch.randint(len(train) - args.block - 1, (args.batch,),
                          generator=gens[r])
        x = torch.stack([train[i:i + args.block] for i in s])
        y = torch.stack([train[i + 1:i + 1 + args.block] for i in s])
        return x, y
    return draw


def set_lr(opt, base, f):
    for g in opt.param_groups:
        g["lr"] = base * f


def run(args, switch, data, vocab, val):
    """Held-out losses at 90 % and 100 % of the budget."""
    world = args.world
    torch.manual_seed(0)
    model = build_model(vocab, args)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    sched = lr_schedule(args)
    draw = batches(data, args, world)
    vx, vy = heldout(val, args)
    budget = args.budget_steps * world
    marks = [0.9 * budget, float(budget)]
    evals = []  # (total steps of all workers, loss)
    total = 0
    step = 0
    while total < budget and (switch < 0 or step < switch):
        set_lr(opt, args.lr, sched(step))
        grads = None
        for r in range(world):
            x, y = draw(r)
            loss = model(x, y)
            g = torch.autograd.grad(loss, list(model.parameters()))
            grads = list(g) if grads is None else [
                a + b for a, b in zip(grads, g)]
        for p, g in zip(model.parameters(), grads):
            p.grad = g / world
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        total += world
        if any(abs(total - m) < world for m in marks):
            evals.append((total, evaluate(model, vx, vy)))
    if total < budget:
        workers = []
        for _ in range(world):
            m = copy.deepcopy(model)
            o = torch.optim.AdamW(m.parameters(), lr=args.lr)
            o.load_state_dict(copy.deepcopy(opt.state_dict()))
            workers.append((m, o))
        glob = [p.detach().clone() for p in model.parameters()]
        buf = [torch.zeros_like(p) for p in glob]
        hs = [args.fast_h] * (world - 1) + [args.slow_h]
        round_total = sum(hs)
        while total < budget:
            deltas = []
            for r, (m, o) in enumerate(workers):
                for k in range(hs[r]):
                    prog = (total + k * round_total / hs[r]) / world
                    set_lr(o, args.lr, sched(prog))
                    x, y = draw(r)
                    loss = m(x, y)
                    loss.backward()
                    o.step()
                    o.zero_grad(set_to_none=True)
                deltas.append([g - p.detach() for g, p in
                               zip(glob, m.parameters())])
            with torch.no_grad():
                for i in range(len(glob)):
                    d = sum(hs[r] / round_total * deltas[r][i]
                            for r in range(world))
                    buf[i].mul_(args.outer_momentum).add_(d)
                    glob[i].sub_(args.outer_lr *
                                 (d + args.outer_momentum * buf[i]))
                for m, _ in workers:
                    for p, g in zip(m.parameters(), glob):
                        p.copy_(g)
            total += round_total
            if any(abs(total - mk) < round_total for mk in marks):
                evals.append((total, evaluate(workers[0][0], vx, vy)))
    return [(mk, at(evals, mk)) for mk in marks]


def at(evals, tokens):
    """Loss at `tokens`, linear between the evaluations around it."""
    prev = None
    for t, loss in evals:
        if t >= tokens:
            if prev is None or t == prev[0]:
                return loss
            return prev[1] + (tokens - prev[0]) / (t - prev[0]) * (
                loss - prev[1])
        prev = (t, loss)
    return evals[-1][1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--switch", default="40,80,120",
                    help="steps of synchronous training before the switch "
                    "(comma-separated); -1: synchronous throughout")
    ap.add_argument("--sync-loss", type=float, default=0.0,
                    help="the synchronous run's loss at the budget, if "
                    "known (skips that run)")
    ap.add_argument("--fast-h", type=int, default=10)
    ap.add_argument("--slow-h", type=int, default=5)
    add_model_args(ap)
    args = ap.parse_args()
    torch.set_num_threads(1)
    text = load_corpus()
    chars = sorted(set(text))
    idx = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([idx[c] for c in text], dtype=torch.long)
    n_val = len(data) // 10
    train, val = data[:-n_val], data[-n_val:]
    base = args.sync_loss or None
    for sw in ([] if base else [-1]) + [int(s) for s in args.switch.split(",")]:
        ev = run(args, sw, train, len(chars), val)
        tot, loss = ev[-1]
        if base is None:
            base = loss
        print("switch %4s H %d/%d outer %.2f/%.2f: held-out loss %s; at "
              "the budget %.4f (%+.2f%% vs sync)" %
              (sw if sw >= 0 else "none", args.fast_h, args.slow_h,
               args.outer_lr, args.outer_momentum,
               " ".join("%.4f@%d" % (l, t) for t, l in ev), loss,
               100 * (loss - base) / base), flush=True)


if __name__ == "__main__":
    main()
