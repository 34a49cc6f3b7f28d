#!/usr/bin/python3
"""The per-step cost of pitstop's migration step hook on the demo job's
model (docs/pytorch.md "Migrating a rank of the torch job").

Run with the library preloaded and migration on, so the hook does its
whole work (registration check, small-state packing, the library's poll)
while no migration is under way:

    LD_PRELOAD=build/plugin/libnccl-profiler-pitstop.so \\
    PITSTOP_VIRTUALIZE_COMMS=1 PYTHONPATH=python PITSTOP_PY_GEN=build/python \\
    OMP_NUM_THREADS=1 /usr/bin/python3 tools/torch-job/migration_hook_cost.py

Prints microseconds per step for the hook and its two parts.
"""

import importlib.util
import os
import sys
import time

import torch

from pitstop.torch import migration


def main(n=500):
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location(
        "train_lm", os.path.join(here, "train_lm.py"))
    lm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lm)
    torch.manual_seed(1)
    torch.set_num_threads(1)
    model = lm.ByteLM(64, 4, 2, 64)  # the job's defaults
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x, y = torch.randint(256, (8, 64)), torch.randint(256, (8, 64))
    model(x, y).backward()
    opt.step()  # AdamW's state exists, as after the job's first step
    mig = migration.Migration(model, opt)
    if mig.api is None:
        sys.exit("migration_hook_cost.py: the hook is a no-op here: preload "
                 "the library and set PITSTOP_VIRTUALIZE_COMMS=1 (see the "
                 "docstring)")

    def per_step(fn):
        t = time.perf_counter()
        for s in range(n):
            fn(s)
        return (time.perf_counter() - t) / n * 1e6

    hook = per_step(mig.step)
    changed = per_step(lambda s: mig.state.changed())
    capture = per_step(mig.state.capture)
    print("%d registered buffers; hook %.1f us/step (registration check "
          "%.1f us, small-state packing %.1f us)" %
          (len(mig.state.buffers()), hook, changed, capture))


if __name__ == "__main__":
    main()
