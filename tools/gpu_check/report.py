#!/usr/bin/env python3
"""Reads what tools/gpu-check.sh ran and says whether the library worked.

  report.py stats --mode profiler|preload DIR [--label TEXT]
      Checks the PITSTOP_STATS_FILE JSONs of one run (DIR/stats-*.json) and
      prints what the library counted. Exit 1, with the reason, when NCCL did
      not load the library as its profiler (no file, no init call), when it
      emitted no event, or (preload) when the interposer saw no call.

  report.py final --runs DIR --out DIR [--target-pct 0.3] [--command TEXT]
      DIR/rep<k>-<mode>/ (mode: baseline, profiler, preload) each hold the
      job's job.json (step times) and, for the two library modes, the stats
      files. Checks every run as above, compares step times per repetition
      (the three ways ran interleaved, so each repetition is a side-by-side
      trio), writes result.json and result.md under --out and prints the
      summary. Exit 0 when every check passed (the overhead target is
      reported, not enforced), 1 otherwise.
"""

import argparse
import glob
import json
import os
import statistics
import sys

MODES = ("baseline", "profiler", "preload")
COLLECTIVES = ("AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce",
               "AlltoAll", "Gather", "Scatter", "Send", "Recv")
# Interposed entry point -> the function name in op records.
INTERPOSED = {"ncclAllReduce": "AllReduce", "ncclAllGather": "AllGather",
              "ncclReduceScatter": "ReduceScatter",
              "ncclBroadcast": "Broadcast", "ncclBcast": "Broadcast",
              "ncclReduce": "Reduce", "ncclAlltoAll": "AlltoAll",
              "ncclGather": "Gather", "ncclScatter": "Scatter",
              "ncclSend": "Send", "ncclRecv": "Recv"}
ONE_RANK_NOTE = (
    "One rank: NCCL runs a collective of a one-rank communicator as a local "
    "copy (ncclLaunchOneRank) and plans no kernel for it, so collectives "
    "produce no profiler events there; send/recv to itself is still planned "
    "and profiled (../shared/docs/nccl-plugin-abi.md §16a). Per-collective "
    "event counts of real multi-rank jobs need two GPUs or more.")


def add(a, b):
    """Sums two stats dicts (nested counters; other fields from the first)."""
    if a is None:
        return b
    out = dict(a)
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(a.get(k), dict):
            out[k] = add(a[k], v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and \
                k not in ("pid", "abi_version", "event_mask", "nccl_version"):
            out[k] = a.get(k, 0) + v
    return out


def load_stats(run_dir):
    """(merged stats or None, [files], [errors])."""
    files = sorted(glob.glob(os.path.join(run_dir, "stats-*.json")))
    merged, errors = None, []
    for path in files:
        try:
            with open(path) as f:
                s = json.load(f)
        except (OSError, ValueError) as e:
            errors.append(f"{path}: {e}")
            continue
        if s.get("format") != "pitstop-stats/1":
            errors.append(f"{path}: format {s.get('format')!r}, want pitstop-stats/1")
            continue
        merged = add(merged, s)
    return merged, files, errors


def check_stats(mode, stats, files, errors):
    """Reasons this run shows the library did not work (empty: it did)."""
    problems = list(errors)
    if stats is None:
        if mode == "profiler":
            problems.append("no stats file: NCCL did not load the library as "
                            "its profiler plugin (NCCL_PROFILER_PLUGIN)")
        else:
            problems.append("no stats file: the preloaded library saw no NCCL "
                            "call and no profiler init")
        return problems
    prof = stats.get("profiler", {})
    if prof.get("init_calls", 0) == 0:
        problems.append("no profiler init call: NCCL did not load the library "
                        "as its profiler plugin")
    elif prof.get("init_failed", 0) == prof.get("init_calls", 0):
        problems.append("every profiler init failed")
    if stats.get("events_started_total", 0) == 0:
        problems.append("zero profiler events: NCCL loaded the library but "
                        "started no event")
    calls = stats.get("interposer", {}).get("calls_total", 0)
    if mode == "preload":
        if calls == 0:
            problems.append("the interposer saw no NCCL call (LD_PRELOAD did "
                            "not interpose torch's NCCL calls)")
        if not stats.get("preloaded"):
            problems.append("the library does not know it was preloaded")
    elif calls != 0:
        problems.append(f"{calls} interposer calls without LD_PRELOAD")
    return problems


def describe_stats(stats, steps=None):
    """Lines describing one run's counts."""
    lines = []
    prof = stats.get("profiler", {})
    lines.append(
        f"  profiler: {prof.get('init_calls', 0)} init call(s), ABI "
        f"v{prof.get('abi_version', 0)}, {prof.get('finalize_calls', 0)} "
        f"finalize(s); NCCL {stats.get('nccl_version', 0)}; load mode "
        f"{stats.get('load_mode')}")
    ev = {k: v for k, v in stats.get("events_started", {}).items() if v}
    per = f" ({stats.get('events_started_total', 0) / steps:.1f}/step)" \
        if steps else ""
    lines.append(f"  events started: {stats.get('events_started_total', 0)}"
                 f"{per} {json.dumps(ev)}")
    ops = {k: v for k, v in stats.get("ops_per_function", {}).items() if v}
    lines.append(f"  op records by function: {json.dumps(ops)}")
    d = stats.get("drops", {})
    lines.append(f"  drops: ring_full {d.get('ring_full', 0)}, pool_exhausted "
                 f"{d.get('pool_exhausted', 0)}, ignored {d.get('ignored', 0)}"
                 f" (no agent: {d.get('export_dropped', 0)} of "
                 f"{stats.get('records_recorded', 0)} records not exported)")
    calls = {k: v for k, v in stats.get("interposer", {}).get("calls", {}).items()
             if v}
    lines.append(f"  interposer calls: "
                 f"{stats.get('interposer', {}).get('calls_total', 0)} "
                 f"{json.dumps(calls)}")
    return lines


def per_collective(stats):
    """Rows: function, interposer calls, op records, events per call."""
    calls = stats.get("interposer", {}).get("calls", {})
    ops = stats.get("ops_per_function", {})
    by_func = {}
    for api, func in INTERPOSED.items():
        by_func[func] = by_func.get(func, 0) + calls.get(api, 0)
    rows = []
    for func in COLLECTIVES:
        c, o = by_func.get(func, 0), ops.get(func, 0)
        if c or o:
            rows.append({"function": func, "interposer_calls": c,
                         "op_events": o,
                         "op_events_per_call": round(o / c, 3) if c else None})
    return rows


def cmd_stats(a):
    stats, files, errors = load_stats(a.dir)
    problems = check_stats(a.mode, stats, files, errors)
    label = a.label or a.dir
    if stats is not None:
        print(f"{label}: {len(files)} stats file(s)")
        for line in describe_stats(stats):
            print(line)
        for r in per_collective(stats):
            print(f"  {r['function']}: {r['interposer_calls']} interposer "
                  f"call(s), {r['op_events']} op event(s)")
    for p in problems:
        print(f"FAIL {label} ({a.mode}): {p}", file=sys.stderr)
    return 1 if problems else 0


def spread(values):
    return {"median": statistics.median(values), "min": min(values),
            "max": max(values), "n": len(values)}


def load_runs(runs_dir):
    runs = {}
    for d in sorted(glob.glob(os.path.join(runs_dir, "rep*-*"))):
        name = os.path.basename(d)
        rep, _, mode = name.partition("-")
        if mode not in MODES or not rep[3:].isdigit():
            continue
        job = None
        try:
            with open(os.path.join(d, "job.json")) as f:
                job = json.load(f)
        except (OSError, ValueError):
            pass
        runs.setdefault(int(rep[3:]), {})[mode] = {"dir": d, "job": job}
    return runs


def nccl_profiler_lines(d, n=6):
    """NCCL's own log lines about loading the profiler (NCCL_DEBUG=INFO)."""
    try:
        with open(os.path.join(d, "job.log"), errors="replace") as f:
            lines = [l.strip() for l in f if "PROFILER" in l or "pitstop" in l]
    except OSError:
        return []
    return lines[:n]


def op_calls(stats):
    """Collective and send/recv calls the interposer saw (None: not preloaded)."""
    calls = stats.get("interposer", {}).get("calls", {}) if stats else {}
    n = sum(calls.get(api, 0) for api in INTERPOSED)
    return n or None


def log_tail(d, n=15):
    try:
        with open(os.path.join(d, "job.log"), errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return "(no job.log)"


def cmd_final(a):
    runs = load_runs(a.runs)
    problems, per_run, trio_ratios = [], [], {m: [] for m in MODES[1:]}
    medians = {m: [] for m in MODES}
    totals = {m: None for m in MODES[1:]}
    job_info = None
    for rep in sorted(runs):
        for mode in MODES:
            r = runs[rep].get(mode)
            if r is None:
                continue
            name = f"rep{rep}-{mode}"
            job = r["job"]
            if job is None:
                problems.append(f"{name}: the job failed or timed out "
                                f"(no job.json); last lines:\n{log_tail(r['dir'])}")
                continue
            job_info = job_info or job
            medians[mode].append(job["median_step_ms"])
            mapped = [p for p in job.get("nccl_libraries_mapped", [])
                      if "profiler-pitstop" in os.path.basename(p)]
            entry = {"run": name, "median_step_ms": job["median_step_ms"],
                     "pitstop_mapped": bool(mapped)}
            if mode == "baseline":
                if mapped:
                    problems.append(f"{name}: the library was mapped in the "
                                    f"baseline run ({mapped[0]})")
                if glob.glob(os.path.join(r["dir"], "stats-*.json")):
                    problems.append(f"{name}: a stats file in the baseline run")
            else:
                stats, files, errors = load_stats(r["dir"])
                said = nccl_profiler_lines(r["dir"], 3)
                for p in check_stats(mode, stats, files, errors):
                    why = f" (NCCL said: {' | '.join(said)})" if said else ""
                    problems.append(f"{name}: {p}{why}")
                if not mapped:
                    problems.append(f"{name}: libnccl-profiler-pitstop.so was "
                                    "not mapped into the job")
                entry["nccl_log"] = nccl_profiler_lines(r["dir"])
                if stats is not None:
                    totals[mode] = add(totals[mode], stats)
                    entry["stats"] = {
                        "init_calls": stats["profiler"]["init_calls"],
                        "abi_version": stats["profiler"]["abi_version"],
                        "events_started_total": stats["events_started_total"],
                        "interposer_calls": stats["interposer"]["calls_total"]}
            per_run.append(entry)
        base = runs[rep].get("baseline", {}).get("job")
        for mode in MODES[1:]:
            other = runs[rep].get(mode, {}).get("job")
            if base and other:
                trio_ratios[mode].append(other["median_step_ms"] /
                                         base["median_step_ms"])
    if not medians["baseline"]:
        problems.append("no baseline run finished")
    overhead = {}
    for mode in MODES[1:]:
        ratios = trio_ratios[mode]
        if not ratios:
            continue
        s = spread(ratios)
        overhead[mode] = {
            "median_pct": (s["median"] - 1) * 100,
            "min_pct": (s["min"] - 1) * 100, "max_pct": (s["max"] - 1) * 100,
            "repetitions": s["n"],
            "target_pct": a.target_pct,
            "target_met": (s["median"] - 1) * 100 <= a.target_pct}
    steps = job_info["total_steps"] if job_info else None
    # The job is the same every run, so the preload runs' interposer counts
    # are the NCCL operation calls of the profiler runs too.
    calls = op_calls(totals["preload"])
    per_call = {m: round(t["events_started_total"] / calls, 3)
                for m, t in totals.items() if t and calls}
    result = {
        "passed": not problems,
        "problems": problems,
        "command": a.command,
        "job": {k: job_info.get(k) for k in
                ("device", "torch", "nccl_version", "backend", "params", "steps",
                 "warmup", "collectives_per_step")} if job_info else None,
        "step_ms": {m: spread(v) for m, v in medians.items() if v},
        "overhead_vs_baseline": overhead,
        "stats_totals": totals,
        "per_collective": {m: per_collective(t) for m, t in totals.items() if t},
        "events_per_nccl_op_call": per_call,
        "runs": per_run,
        "note": ONE_RANK_NOTE,
    }
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
    md = render_md(result, steps, len(runs))
    with open(os.path.join(a.out, "result.md"), "w") as f:
        f.write(md)
    print(md)
    for p in problems:
        print(f"FAIL: {p}", file=sys.stderr)
    return 1 if problems else 0


def render_md(r, steps, reps):
    out = ["# GPU check result", ""]
    if r["command"]:
        out += [f"Command: `{r['command']}`", ""]
    j = r["job"] or {}
    out += [f"Device: {j.get('device')}; torch {j.get('torch')}; NCCL "
            f"{j.get('nccl_version')}; backend {j.get('backend')}; model "
            f"{j.get('params')} parameters; {j.get('warmup')} + {j.get('steps')}"
            f" steps per run; {reps} repetitions, the three ways interleaved.",
            ""]
    out += ["| way | median step (ms) | min | max | overhead vs baseline "
            "(median of per-repetition ratios) | spread | target |",
            "|---|---|---|---|---|---|---|"]
    for mode in MODES:
        s = r["step_ms"].get(mode)
        if s is None:
            continue
        o = r["overhead_vs_baseline"].get(mode)
        ov = f"{o['median_pct']:+.3f}%" if o else "-"
        sp = f"{o['min_pct']:+.3f}% .. {o['max_pct']:+.3f}%" if o else "-"
        tg = ("met" if o["target_met"] else "NOT met") + \
            f" (<= {o['target_pct']}%)" if o else "-"
        out.append(f"| {mode} | {s['median']:.3f} | {s['min']:.3f} | "
                   f"{s['max']:.3f} | {ov} | {sp} | {tg} |")
    out.append("")
    for mode, t in r["stats_totals"].items():
        if not t:
            continue
        out.append(f"**{mode}** (all repetitions):")
        out.append("")
        out += ["```"] + describe_stats(t, steps * reps if steps else None) + \
            ["```", ""]
    if r["events_per_nccl_op_call"]:
        out += ["Profiler events per NCCL operation call (collectives and "
                "send/recv, as the preload runs' interposer counted them): " +
                ", ".join(f"{m} {v}" for m, v in
                          r["events_per_nccl_op_call"].items()), ""]
    rows = r["per_collective"].get("preload") or []
    if rows:
        out += ["Per NCCL function (preload runs, all repetitions):", "",
                "| function | interposer calls | op events (Coll/P2p) | "
                "op events per call |", "|---|---|---|---|"]
        for row in rows:
            per = row["op_events_per_call"]
            out.append(f"| {row['function']} | {row['interposer_calls']} | "
                       f"{row['op_events']} | {per if per is not None else '-'} |")
        out.append("")
    out += [r["note"], ""]
    out.append("Result: " + ("PASS" if r["passed"] else "FAIL"))
    for p in r["problems"]:
        out.append(f"- {p}")
    return "\n".join(out) + "\n"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("stats")
    s.add_argument("--mode", choices=MODES[1:], required=True)
    s.add_argument("--label", default="")
    s.add_argument("dir")
    f = sub.add_parser("final")
    f.add_argument("--runs", required=True)
    f.add_argument("--out", required=True)
    f.add_argument("--target-pct", type=float, default=0.3)
    f.add_argument("--command", default="")
    a = p.parse_args(argv)
    return cmd_stats(a) if a.cmd == "stats" else cmd_final(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
