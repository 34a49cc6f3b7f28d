#!/usr/bin/python3
"""The pitstop library's overhead on the real PyTorch job (docs/pytorch.md,
"Numbers"): step time with the library vs without, side by side in one run.

A real pitstop-controller and one pitstop-agent per emulated node on
loopback stay up for the whole run. Then the demo DDP job
(tools/torch-job/train_lm.py, backend pitstop_nccl over the CPU NCCL
backend) runs ROUNDS times in each configuration, interleaved (off, on, on,
off, off, on, ...: a slow spell of the shared machine falls on both):

  off  no LD_PRELOAD, NCCL_PROFILER_PLUGIN=none: the collectives go through
       the same backend and CPU NCCL, nothing records them
  on   the library LD_PRELOADed (interposer + profiler plugin), each node's
       agent socket and host in the environment: every collective is
       recorded and streamed to the agents and the controller

Each run is one torchrun per node (NODES x RANKS_PER_NODE ranks) training
STEPS steps; its step time is the median of rank 0's per-step wall times
(the job's own log, which DDP's all-reduce makes the job's pace) after the
first SKIP steps. Per round the ratio on/off; the result is the median of
the rounds' ratios, with their spread, and the ratio of the pooled medians.
The controller's count of joined collectives before and after shows the
library was streaming during the 'on' runs (and not during the 'off' ones).

Usage (from the repository root, after a build):
  tools/torch_overhead_bench.py [--rounds 6] [--steps 300] [--skip 30]
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SCRIPT = os.path.join(HERE, "torch-job", "train_lm.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(path, proc, what, log):
    deadline = time.monotonic() + 30
    while not os.path.exists(path):
        if time.monotonic() > deadline or proc.poll() is not None:
            sys.exit("torch_overhead_bench: %s did not start (log %s)" %
                     (what, log))
        time.sleep(0.1)


class Daemons:
    """pitstop-controller and one pitstop-agent per node on loopback."""

    def __init__(self, build, tmp, nodes):
        self.build, self.tmp, self.procs = build, tmp, []
        log = os.path.join(tmp, "daemons.log")
        self.log = open(log, "w")
        port_file = os.path.join(tmp, "port")
        self.procs.append(subprocess.Popen(
            [os.path.join(build, "src/controller/pitstop-controller"),
             "--listen", "127.0.0.1:0", "--port-file", port_file, "--db",
             os.path.join(tmp, "controller.db"), "--metrics-address", "",
             "--log-level", "warn"], stdout=self.log, stderr=self.log))
        wait_for(port_file, self.procs[0], "the controller", log)
        time.sleep(0.1)
        with open(port_file) as f:
            self.controller = "127.0.0.1:%d" % int(f.read().strip())
        self.shm = []
        for i in range(nodes):
            sock = os.path.join(tmp, "agent%d.sock" % i)
            self.procs.append(subprocess.Popen(
                [os.path.join(build, "src/agent/pitstop-agent"),
                 "--ingest-socket", sock, "--controller", self.controller,
                 "--host", "node%d" % i, "--metrics-address", "",
                 "--batch-ms", "200", "--log-level", "warn"],
                stdout=self.log, stderr=self.log))
            shm = os.path.join(tmp, "agent%d-shm.sock" % i)
            wait_for(shm, self.procs[-1], "agent %d" % i, log)
            self.shm.append(shm)

    def joined(self):
        r = subprocess.run(
            [os.path.join(self.build, "tools/pitstopctl/pitstopctl"),
             "--controller", self.controller, "-o", "json", "status"],
            capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            sys.exit("torch_overhead_bench: pitstopctl status: " + r.stderr)
        return int(json.loads(r.stdout).get("collectives_joined", 0))

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()


def run_job(a, daemons, with_library, out):
    """One torchrun per node; returns rank 0's per-step times (ms)."""
    os.makedirs(out, exist_ok=True)
    port = free_port()
    base = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                PYTHONPATH=os.path.join(REPO, "python"),
                PITSTOP_PY_GEN=os.path.join(a.build, "python"),
                LD_LIBRARY_PATH=os.path.join(a.build, "src/nccl/cpu/lib"),
                PITSTOP_CPU_NCCL_STORE_DIR=os.path.join(out, "nccl"))
    base.pop("LD_PRELOAD", None)
    procs = []
    for node in range(a.nodes):
        env = dict(base)
        if with_library:
            env.update(LD_PRELOAD=os.path.join(
                a.build, "plugin/libnccl-profiler-pitstop.so"),
                PITSTOP_AGENT_SOCKET=daemons.shm[node],
                PITSTOP_HOST="node%d" % node, PITSTOP_JOB_ID="overhead")
        else:
            env["NCCL_PROFILER_PLUGIN"] = "none"
        cmd = ["/usr/bin/torchrun", "--nnodes", str(a.nodes), "--node_rank",
               str(node), "--nproc_per_node", str(a.ranks_per_node),
               "--master_addr", "127.0.0.1", "--master_port", str(port),
               "--redirects", "2", "--tee", "2", "--log_dir",
               os.path.join(out, "torchrun%d" % node), SCRIPT, "--backend",
               "pitstop_nccl", "--steps", str(a.steps), "--out", out]
        log = open(os.path.join(out, "torchrun%d.log" % node), "w")
        procs.append((subprocess.Popen(cmd, env=env, stdout=log,
                                       stderr=log), log))
    for p, log in procs:
        if p.wait(timeout=1800) != 0:
            for q, _ in procs:
                q.kill()
            sys.exit("torch_overhead_bench: the job failed (log %s)" %
                     log.name)
    with open(os.path.join(out, "losses-rank0.jsonl")) as f:
        return [json.loads(line)["ms"] for line in f
                if '"loss"' in line]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--skip", type=int, default=30,
                    help="first steps of each run left out (start-up)")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--ranks-per-node", type=int, default=2)
    a = ap.parse_args()
    if a.rounds < 1 or a.steps <= a.skip or a.skip < 0:
        ap.error("need --rounds >= 1 and --steps > --skip >= 0")
    a.build = os.path.abspath(a.build)
    tmp = tempfile.mkdtemp(prefix="pitstop-overhead-")
    daemons = Daemons(a.build, tmp, a.nodes)
    try:
        ratios, pooled = [], {False: [], True: []}
        print("round  off: median step   on: median step   on/off")
        for i in range(a.rounds):
            order = [False, True] if i % 2 == 0 else [True, False]
            med = {}
            for with_library in order:
                out = os.path.join(tmp, "r%d-%s" % (i, "on" if with_library
                                                    else "off"))
                before = daemons.joined()
                ms = run_job(a, daemons, with_library, out)[a.skip:]
                joined = daemons.joined() - before
                if with_library and joined == 0:
                    sys.exit("torch_overhead_bench: the 'on' run of round %d "
                             "reached the controller with no collective: "
                             "the library did not stream" % (i + 1))
                if not with_library and joined != 0:
                    sys.exit("torch_overhead_bench: %d collectives joined "
                             "during an 'off' run" % joined)
                med[with_library] = statistics.median(ms)
                pooled[with_library].extend(ms)
                shutil.rmtree(out, ignore_errors=True)
            ratios.append(med[True] / med[False])
            print("%5d  %14.2f ms  %14.2f ms   %+.2f%%" % (
                i + 1, med[False], med[True], (ratios[-1] - 1) * 100),
                flush=True)
        q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else \
            [ratios[0]] * 3
        print("\nlibrary overhead (on/off - 1), %d rounds of %d steps "
              "(%d x %d ranks):" % (a.rounds, a.steps, a.nodes,
                                    a.ranks_per_node))
        print("  median of the rounds' ratios: %+.2f%% (quartiles %+.2f%% .. "
              "%+.2f%%, min %+.2f%%, max %+.2f%%)" % (
                  (statistics.median(ratios) - 1) * 100, (q[0] - 1) * 100,
                  (q[2] - 1) * 100, (min(ratios) - 1) * 100,
                  (max(ratios) - 1) * 100))
        print("  pooled medians: off %.2f ms, on %.2f ms: %+.2f%%" % (
            statistics.median(pooled[False]), statistics.median(pooled[True]),
            (statistics.median(pooled[True]) /
             statistics.median(pooled[False]) - 1) * 100))
    finally:
        daemons.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
