#!/usr/bin/python3
"""Replays a ctest run's test times through ctest's parallel scheduling, to
see what a change of test properties (COST, RUN_SERIAL, RESOURCE_LOCK) does
to the suite's wall time without running it (docs/contributing.md, "CI").

Usage: tools/ctest-replay.py JUNIT [--build DIR | --tests JSON] [-j N]

JUNIT is a run's `ctest --output-junit` file (each test's seconds). The
tests, in declaration order, and their properties come from
`ctest --show-only=json-v1` run in DIR (default: build), or from a file
holding that output. Prints the replayed wall time twice: as on a clean
clone, which has no ctest timing data (only declared COSTs order the tests),
and as with ctest's timing data from that run. A test missing from JUNIT
counts as 0 s (their number is printed).

The model is ctest 3.25's (cmCTestMultiProcessHandler): the tests are
sorted by cost, highest first (ties in declaration order); whenever a test
ends, the list is walked and each test that fits is started: a RUN_SERIAL
test only when nothing runs (then nothing else starts until it ends), a
test holding a RESOURCE_LOCK another running test holds is passed over.
Test times do not change with what runs beside them. Not modelled (no
pitstop test sets them): PROCESSORS, DEPENDS, fixtures, and ctest's habit of
starting the tests that failed last time first.
"""
import argparse
import json
import subprocess
import sys
import xml.etree.ElementTree as ET


def junit_times(path):
    """Seconds per test name, from ctest's JUnit file."""
    root = ET.parse(path).getroot()
    return {c.get("name"): float(c.get("time") or 0)
            for c in root.iter("testcase")}


def declared_tests(show_only):
    """[(name, properties)] in declaration order, from show-only JSON."""
    out = []
    for t in show_only["tests"]:
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        out.append((t["name"], props))
    return out


def replay(tests, seconds, cost, slots):
    """Wall time of one run: tests [(name, props)], seconds {name: s},
    cost {name: sort key}; `slots` is ctest -j."""
    order = sorted(range(len(tests)), key=lambda i: -cost.get(tests[i][0], 0))
    pending, running, held = list(order), [], set()
    now, serial = 0.0, False
    while pending or running:
        for i in list(pending):
            if serial or len(running) == slots:
                break
            name, props = tests[i]
            if props.get("RUN_SERIAL") and running:
                continue
            locks = set(props.get("RESOURCE_LOCK", []))
            if locks & held:
                continue
            pending.remove(i)
            held |= locks
            running.append((now + seconds.get(name, 0.0), i))
            serial = bool(props.get("RUN_SERIAL"))
        running.sort()
        now, i = running.pop(0)
        held -= set(tests[i][1].get("RESOURCE_LOCK", []))
        serial = False
    return now


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("junit")
    ap.add_argument("--build", default="build")
    ap.add_argument("--tests", help="ctest --show-only=json-v1 output")
    ap.add_argument("-j", type=int, default=2, dest="slots")
    a = ap.parse_args(argv)
    if a.slots < 1:
        ap.error("-j must be at least 1")
    if a.tests:
        with open(a.tests) as f:
            show_only = json.load(f)
    else:
        r = subprocess.run(["ctest", "--show-only=json-v1"], cwd=a.build,
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("ctest-replay: ctest --show-only failed in %s: %s"
                     % (a.build, r.stderr.strip()))
        show_only = json.loads(r.stdout)
    tests = declared_tests(show_only)
    seconds = junit_times(a.junit)
    declared = {n: float(p.get("COST", 0)) for n, p in tests}
    serial = sum(seconds.get(n, 0) for n, p in tests if p.get("RUN_SERIAL"))
    missing = sum(1 for n, _ in tests if n not in seconds)
    print("%d tests (%d not in %s), %.0f s in all, %.0f s RUN_SERIAL"
          % (len(tests), missing, a.junit, sum(seconds.get(n, 0)
             for n, _ in tests), serial))
    print("clean clone (declared COST only): %.0f s"
          % replay(tests, seconds, declared, a.slots))
    print("with ctest's timing data:         %.0f s"
          % replay(tests, seconds, seconds, a.slots))


if __name__ == "__main__":
    main(sys.argv[1:])
