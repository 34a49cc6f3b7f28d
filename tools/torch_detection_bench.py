#!/usr/bin/python3
"""Detection latency on the real PyTorch job (docs/pytorch.md, "Numbers").

Runs each torch fault scenario of `pitstop sim` N times (a fresh controller,
agents and torchrun job each time, run i with --seed i), reads each
report's score line:

  NON_COMM_SLOW: FOUND and localised (F1, first seen 5.0 s, confirmed 8.0 s
  after the injection)

and prints one line per run, then per scenario the runs that passed and the
latencies' p50 / p90 / max. Percentiles are nearest-rank (p90 of 5 runs is
the slowest): a latency target holds for p90 only if 90% of the runs meet
it; a run in which the fault never appeared (or never confirmed) counts
as "never", the slowest. First seen = the fault's first appearance on
WatchFaults after the injection (what the emulated scenarios report);
confirmed = its first appearance there in state CONFIRMED.

Usage (from the repository root, after a build):
  tools/torch_detection_bench.py [--runs 5] [--scenarios torch-straggler,...]
                                 [--pitstop build/tools/pitstop/pitstop]
  tools/torch_detection_bench.py --healthy-s 600   # also the long healthy run

Exit status: 0 when every run passed, 1 otherwise.
"""

import argparse
import math
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
FAULTS = ["torch-straggler", "torch-hang", "torch-crash", "torch-desync"]
SCORE = re.compile(r"^  ([A-Z_]+): FOUND and localised \((F\d+), first seen "
                   r"([0-9.]+) s(?:, confirmed ([0-9.]+) s)? after")
VERDICT = re.compile(r"^  verdict: (PASS|FAIL)")
TRAINED = re.compile(r"^  rank 0 trained (\d+) steps; wall time ([0-9.]+) s")


def nearest_rank(values, p):
    """The smallest value with at least p% of the values at or below it."""
    v = sorted(values)
    return v[max(0, math.ceil(p / 100.0 * len(v)) - 1)] if v else float("nan")


def run_once(pitstop, scenario, extra):
    """One run; returns a dict of what its report says."""
    cmd = [pitstop, "sim", "--scenario", scenario, "-q"] + extra
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    out = {"scenario": scenario, "exit": p.returncode, "passed": False,
           "first": None, "confirmed": None, "fault": "", "steps": 0,
           "wall": time.monotonic() - t0, "text": p.stdout}
    for line in p.stdout.splitlines():
        m = SCORE.match(line)
        if m:
            out["fault"] = m.group(1)
            out["first"] = float(m.group(3))
            if m.group(4) is not None:
                out["confirmed"] = float(m.group(4))
        m = VERDICT.match(line)
        if m:
            out["passed"] = m.group(1) == "PASS" and p.returncode == 0
        m = TRAINED.match(line)
        if m:
            out["steps"] = int(m.group(1))
    return out


def fmt(x):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return "never" if math.isinf(x) else "%.1f s" % x


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--scenarios", default=",".join(FAULTS))
    ap.add_argument("--pitstop",
                    default=os.path.join(REPO, "build/tools/pitstop/pitstop"))
    ap.add_argument("--healthy-s", type=float, default=0,
                    help="also run torch-healthy this long (s), once")
    ap.add_argument("--show-failed", action="store_true",
                    help="print the whole report of a run that failed")
    a = ap.parse_args()
    if a.runs < 1:
        ap.error("--runs: must be >= 1, got %d" % a.runs)
    scenarios = [s for s in a.scenarios.split(",") if s]
    for s in scenarios:
        if s not in FAULTS:
            ap.error("--scenarios: %r is not one of %s" % (s, ", ".join(FAULTS)))
    if not os.access(a.pitstop, os.X_OK):
        sys.exit("torch_detection_bench: %s is not built (cmake --build build "
                 "--target pitstop pitstop_torch_nccl)" % a.pitstop)

    results = {s: [] for s in scenarios}
    ok = True
    # Interleaved (straggler, hang, ... then again): a slow spell of the
    # machine spreads over every scenario instead of spoiling one.
    for i in range(a.runs):
        for s in scenarios:
            # Run i uses seed i: another job seed (weights, batches) and,
            # for torch-hang, another point of the step for the stop.
            r = run_once(a.pitstop, s, ["--seed", str(i + 1)])
            results[s].append(r)
            ok &= r["passed"]
            print("run %d %-16s %s  %-14s first seen %-7s confirmed %-7s "
                  "(%.0f s wall)" % (i + 1, s, "PASS" if r["passed"] else
                                     "FAIL", r["fault"] or "-", fmt(r["first"]),
                                     fmt(r["confirmed"]), r["wall"]),
                  flush=True)
            if not r["passed"] and a.show_failed:
                print(r["text"])

    print("\n| scenario | expected | passed | first seen p50 / p90 / max | "
          "confirmed p50 / p90 / max |")
    print("|---|---|---|---|---|")
    for s in scenarios:
        rs = results[s]
        # A run that never showed it counts as slowest, not as absent.
        firsts = [math.inf if r["first"] is None else r["first"] for r in rs]
        confs = [math.inf if r["confirmed"] is None else r["confirmed"]
                 for r in rs]
        fault = next((r["fault"] for r in rs if r["fault"]), "-")
        print("| %s | %s | %d/%d | %s / %s / %s | %s / %s / %s |" % (
            s, fault, sum(r["passed"] for r in rs), len(rs),
            fmt(nearest_rank(firsts, 50)), fmt(nearest_rank(firsts, 90)),
            fmt(max(firsts) if firsts else None),
            fmt(nearest_rank(confs, 50)), fmt(nearest_rank(confs, 90)),
            fmt(max(confs) if confs else None)))

    if a.healthy_s > 0:
        r = run_once(a.pitstop, "torch-healthy",
                     ["--duration-s", "%g" % a.healthy_s])
        ok &= r["passed"]
        faults = "no fault" if "  no fault" in r["text"] else "FAULTS (below)"
        print("\ntorch-healthy --duration-s %g: %s, %s, rank 0 trained %d "
              "steps, %.0f s wall" % (a.healthy_s, "PASS" if r["passed"]
                                      else "FAIL", faults, r["steps"],
                                      r["wall"]))
        if not r["passed"]:
            print(r["text"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
