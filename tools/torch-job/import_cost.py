#!/usr/bin/python3
"""What a torch job (and so a joiner started for a migration) pays at
start-up to import pitstop, side by side for two trees of the Python
package (docs/pytorch.md "Joiner start-up").

Each round starts fresh interpreters, one per tree, in alternating order,
that do what tools/torch-job/train_lm.py does before it trains: import
torch, then ``pitstop.torch.nccl_backend`` and ``pitstop.torch.migration``.
Each reports the time from its first line to the end of the pitstop
imports (``pitstop``), and the whole child's wall time is taken from
outside (``process``: interpreter start, torch, pitstop).

    git worktree add /tmp/before <commit> # or any copy of python/
    /usr/bin/python3 tools/torch-job/import_cost.py \\
        --tree before=/tmp/before/python --tree after=python --rounds 10

Prints the medians per tree and each tree's ratio to the first.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

CHILD = r"""
import time
import torch
t0 = time.perf_counter()
import pitstop.torch.nccl_backend  # noqa: F401
from pitstop.torch import migration  # noqa: F401
print("%.6f" % (time.perf_counter() - t0))
"""


def run_once(tree, gen):
    env = dict(os.environ, PYTHONPATH=tree, OMP_NUM_THREADS="1")
    if gen:
        env["PITSTOP_PY_GEN"] = gen
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, check=True,
                         capture_output=True, text=True).stdout
    return float(out.split()[-1]), time.perf_counter() - t0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", action="append", required=True,
                   help="NAME=DIR: a directory holding the pitstop package")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--py-gen", default=os.environ.get("PITSTOP_PY_GEN", ""),
                   help="the build's python directory (the backend's "
                        "extension), default $PITSTOP_PY_GEN")
    a = p.parse_args()
    trees = [t.split("=", 1) for t in a.tree]
    got = {name: ([], []) for name, _ in trees}
    for r in range(a.rounds):
        order = trees if r % 2 == 0 else list(reversed(trees))
        for name, tree in order:
            imp, proc = run_once(os.path.abspath(tree), a.py_gen)
            got[name][0].append(imp)
            got[name][1].append(proc)
    base = None
    for name, _ in trees:
        imp = statistics.median(got[name][0]) * 1e3
        proc = statistics.median(got[name][1]) * 1e3
        if base is None:
            base = (imp, proc)
        print("%-10s pitstop imports %8.1f ms (x%.3f)   process %8.1f ms "
              "(x%.3f)   %d rounds" % (name, imp, imp / base[0], proc,
                                       proc / base[1], a.rounds))


if __name__ == "__main__":
    main()
