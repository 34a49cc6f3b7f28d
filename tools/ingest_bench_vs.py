#!/usr/bin/python3
"""Two builds of controller_ingest_bench side by side, in turns.

Issue #30's ingest target: batch accepted and joined within 5 ms at p99 at
16,384 ranks, without and with a standby node registered and a migration in
progress (--standby 1; 2: started by policy ACT), the old binary (one ControllerCore) against the new
one (services), in one run. Each round runs, for --standby 0 then 1, the old
binary then the new one (A B A B ...), one mode each (--mode, default the
default configuration: inbox, detectors on a copy off the lock), so a drift of
the shared machine's load hits both alike. Prints every run's row, then per
configuration the median of each figure and the new/old ratio of the medians
and of each round's pair.

A run that exits non-zero (with --standby 1: its migration left PREPARING),
prints no row, or failed a batch makes the whole call exit 1.

  /usr/bin/python3 tools/ingest_bench_vs.py --old OLD/controller_ingest_bench \\
      --new build/tests/controller/controller_ingest_bench \\
      --ranks 16384 --seconds 10 --rounds 3
"""

import argparse
import os
import statistics
import subprocess
import sys

# Columns of the bench's table row (tests/controller/ingest_bench.cc).
COLUMNS = [
    "mode", "batches", "p50", "p99", "p99.9", "max", "joined p50",
    "joined p99", "joined max", "queued", "syncs", "open faults",
    "collectives joined", "errors", "last cycle"
]
SHOWN = ["p50", "p99", "joined p50", "joined p99", "joined max"]
# --standby: 0 none, 1 a standby and a migration started by hand, 2 the same
# started by policy ACT.
STANDBY = {0: "no", 1: "by hand", 2: "policy ACT"}


def run_once(binary, args, standby):
    cmd = [
        binary, "--ranks", str(args.ranks), "--seconds",
        str(args.seconds), "--mode", args.mode, "--standby",
        str(standby)
    ] + args.extra.split()
    load = os.getloadavg()[0]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=args.seconds * 10 + 120)
    row, migration = None, ""
    for line in p.stdout.splitlines():
        if line.startswith("| ") and not line.startswith("| mode"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == len(COLUMNS):
                row = dict(zip(COLUMNS, cells))
        if line.strip().startswith("migration "):
            migration = line.strip()
    problems = []
    if p.returncode != 0:
        problems.append(f"exit {p.returncode}")
    if row is None:
        problems.append("no table row")
    elif int(row["errors"]) != 0:
        problems.append(f"{row['errors']} batches failed")
    if standby and "(in progress)" not in migration:
        problems.append(f"migration not in progress: {migration or 'no line'}")
    return {"row": row, "load": load, "migration": migration,
            "problems": problems, "cmd": " ".join(cmd)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", required=True, help="the old build's binary")
    ap.add_argument("--new", required=True, help="the new build's binary")
    ap.add_argument("--ranks", type=int, default=16384)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mode", default="copy")
    ap.add_argument("--extra", default="",
                    help="more flags for both, e.g. '--writer 0'")
    ap.add_argument("--standby", default="0,1",
                    help="configurations to run, comma-separated")
    args = ap.parse_args()
    for b in (args.old, args.new):
        if not os.access(b, os.X_OK):
            sys.exit(f"--old/--new: {b} is not an executable")
    configs = [int(s) for s in args.standby.split(",")]
    if any(s not in STANDBY for s in configs):
        sys.exit(f"--standby: {args.standby} is not a list of 0, 1, 2")
    runs = {(s, w): [] for s in configs for w in ("old", "new")}
    bad = []
    print(f"{args.ranks} ranks, {args.seconds} s, mode {args.mode} "
          f"{args.extra}, {args.rounds} rounds (old then new)")
    print("| round | standby + migration | build | load | " +
          " | ".join(f"{c} ms" for c in SHOWN) + " | migration |")
    print("|---" * (5 + len(SHOWN)) + "|")
    for r in range(1, args.rounds + 1):
        for s in configs:
            for who, binary in (("old", args.old), ("new", args.new)):
                res = run_once(binary, args, s)
                runs[(s, who)].append(res)
                row = res["row"] or {}
                print(f"| {r} | {STANDBY[s]} | {who} | "
                      f"{res['load']:.1f} | " +
                      " | ".join(row.get(c, "-") for c in SHOWN) +
                      f" | {res['migration'] or '-'} |", flush=True)
                if res["problems"]:
                    bad.append(f"round {r} {who} standby={s}: "
                               f"{'; '.join(res['problems'])} "
                               f"({res['cmd']})")
    print()
    print("| standby + migration | figure | old median | new median | "
          "new/old (medians) | new/old per round |")
    print("|---|---|---|---|---|---|")
    for s in configs:
        old = [x["row"] for x in runs[(s, "old")] if x["row"]]
        new = [x["row"] for x in runs[(s, "new")] if x["row"]]
        for c in SHOWN:
            o = [float(x[c]) for x in old]
            n = [float(x[c]) for x in new]
            if not o or not n:
                continue
            mo, mn = statistics.median(o), statistics.median(n)
            pairs = ", ".join(f"{b / a:.2f}" if a > 0 else "-"
                              for a, b in zip(o, n))
            ratio = f"{mn / mo:.2f}" if mo > 0 else "-"
            print(f"| {STANDBY[s]} | {c} ms | {mo:.3f} | "
                  f"{mn:.3f} | {ratio} | {pairs} |")
    if bad:
        print("\nINVALID runs:\n  " + "\n  ".join(bad))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
