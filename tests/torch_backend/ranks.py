"""Runs N ranks of a worker script as real processes (tests only).

Each rank gets RANK, WORLD_SIZE and PITSTOP_TEST_STORE (a c10d FileStore
path in the test's temporary directory, so no port is needed), and the CPU
NCCL backend keeps its rendezvous files there too. The environment of ctest
(PITSTOP_PY_GEN, PYTHONPATH, LD_LIBRARY_PATH) is passed through.
"""

import os
import subprocess
import sys
import time


class RankFailure(AssertionError):
    pass


def start(script, n, tmp, args=(), env=None, preload=None, only=None):
    """Starts the ranks (`only`: just these); returns the Popen objects and
    their log paths."""
    procs, logs = [], []
    for rank in (range(n) if only is None else only):
        e = dict(os.environ)
        # The group's timeout reaches the CPU NCCL backend unless this is
        # set (the tests check that it does).
        e.pop("PITSTOP_CPU_NCCL_TIMEOUT_MS", None)
        e.update({
            "RANK": str(rank),
            "WORLD_SIZE": str(n),
            "PITSTOP_TEST_STORE": os.path.join(tmp, "store"),
            "PITSTOP_CPU_NCCL_STORE_DIR": tmp,
        })
        if preload:
            e["LD_PRELOAD"] = preload
        e.update(env or {})
        log = os.path.join(tmp, "rank%d.log" % rank)
        with open(log, "w") as f:
            procs.append(subprocess.Popen(
                [sys.executable, script, *map(str, args)], env=e, stdout=f,
                stderr=subprocess.STDOUT))
        logs.append(log)
    return procs, logs


def wait(procs, logs, timeout):
    """Waits for every rank; kills all and raises if one is still running
    at `timeout` (a hang is a failure, never waited out)."""
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            for q in procs:
                q.wait()
            raise RankFailure("ranks still running after %ds (hang):\n%s" %
                              (timeout, read_logs(logs)))
    return [p.returncode for p in procs]


def read_logs(logs):
    out = []
    for i, log in enumerate(logs):
        with open(log) as f:
            out.append("--- rank %d ---\n%s" % (i, f.read()[-6000:]))
    return "\n".join(out)


def run(script, n, tmp, args=(), env=None, preload=None, timeout=300):
    """Runs the ranks to completion; returns [(returncode, log text)]."""
    procs, logs = start(script, n, tmp, args, env, preload)
    codes = wait(procs, logs, timeout)
    texts = []
    for log in logs:
        with open(log) as f:
            texts.append(f.read())
    return list(zip(codes, texts))
